#!/usr/bin/env python3
"""test_pipeline_sparse — the pipeline with predictors: a synthetic PowerInfer model whose
predictors are exact (pictl synth --pwri), so sparse decoding must equal dense decoding token for
token. Through a running instance with a VRAM budget (split solver + gpuidx) and --audit-rate 1:
tokens equal the in-process dense run, predictord really predicts (its profile has items, the
audit measures recall 1 on live traffic), the gpuidx is written in PowerInfer's format; with
predictord or cpud killed mid-generation the request completes with the same tokens (every neuron
active while predictord is down).

usage: test_pipeline_sparse.py PICTL"""
import json, os, signal, subprocess, sys, tempfile, time

pictl = sys.argv[1]
name = f"ps{os.getpid()}"
tmp = tempfile.mkdtemp(prefix="pinfer-sparse-")
model = os.path.join(tmp, "synth-pwri.gguf")
failures = checks = 0
N = 96


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run(*a, timeout=300):
    return subprocess.run([pictl, *a], capture_output=True, timeout=timeout)


def status():
    p = run("status", "--name", name, "--json")
    return json.loads(p.stdout) if p.returncode == 0 else None


def tokens(js):
    with open(js) as f:
        return json.load(f)["tokens"]


p = run("synth", "--shape", "tiny", "--pwri", "-o", model, "-q")
if not check(p.returncode == 0, f"synth failed: {p.stderr!r}"):
    sys.exit(1)
prompt = "the quick brown fox"
js = os.path.join(tmp, "dense.json")
p = run("run", "--inproc", "--dense", "-m", model, "-p", prompt, "-n", str(N), "--temp", "0", "--ignore-eos",
        "-t", "1", "--json-stats", js)
check(p.returncode == 0, f"dense run failed: {p.stderr!r}")
dense = tokens(js)
p = run("run", "--inproc", "-m", model, "-p", prompt, "-n", str(N), "--temp", "0", "--ignore-eos", "-t", "1",
        "--json-stats", js)
check(p.returncode == 0 and b"sparse" in p.stderr, f"in-process sparse run failed or not sparse: {p.stderr!r}")
check(tokens(js) == dense, "in-process sparse tokens differ from dense (exact predictors)")

try:
    p = run("start", "-m", model, "--name", name, "-t", "1", "-c", "512", "--vram-budget", "0.043",
            "--audit-rate", "1")
    if not check(p.returncode == 0, f"start failed: {p.stderr!r}"):
        sys.exit(1)
    cands = [f for f in os.listdir(tmp) if f.endswith(".generated.gpuidx")]
    check(len(cands) == 1, f"no gpuidx written next to the model: {os.listdir(tmp)}")
    if cands:
        with open(os.path.join(tmp, cands[0]), "rb") as f:
            check(f.read(4) == b"PWRI", "gpuidx does not start with the PWRI magic")

    def generate(tag, kill_stage=None):
        out = os.path.join(tmp, f"{tag}.json")
        proc = subprocess.Popen([pictl, "generate", "--name", name, "-p", prompt, "-n", str(N), "--temp", "0",
                                 "--ignore-eos", "--json-stats", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        before = status()["stages"][kill_stage]["restarts"] if kill_stage else 0
        if kill_stage:
            got = b""
            while len(got) < 40:
                c = proc.stdout.read(1)
                if not c:
                    break
                got += c
            os.kill(status()["stages"][kill_stage]["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
        if not check(proc.returncode == 0, f"{tag}: generate failed: {err[-300:]!r}"):
            return
        check(tokens(out) == dense, f"{tag}: tokens differ from dense")
        if kill_stage:
            end = time.time() + 30
            while time.time() < end and not (status()["stages"][kill_stage]["restarts"] > before and
                                             status()["stages"][kill_stage]["state"] == "ready"):
                time.sleep(0.05)
            check(status()["stages"][kill_stage]["restarts"] > before, f"{tag}: {kill_stage} not restarted")

    generate("plain")
    s = status()
    check(s["stages"]["predictord"]["items"] > 0, "predictord computed no masks")
    check(s["audit"]["tokens"] > 0, "nothing was audited at --audit-rate 1")
    check(s["audit"]["recall"] == 1.0, f"exact predictors audited at recall {s['audit']['recall']}")
    check(0 < s["audit"]["predicted"] < s["audit"]["tokens"] * s["n_ff"],
          f"predicted {s['audit']['predicted']} of {s['audit']['tokens']} x {s['n_ff']}: not sparse")
    print(f"audit: {s['audit']['tokens']} token-layers, recall {s['audit']['recall']}, "
          f"{s['audit']['predicted'] / s['audit']['tokens']:.1f} of {s['n_ff']} neurons predicted per token-layer")
    p = run("profile", "--name", name)
    check(b"predictor audit" in p.stdout, "pictl profile shows no audit table")
    check(b"# per step (all layers): gpud compute" in p.stdout, "pictl profile shows no per-step split")
    # --json-stats' decode_profile: decode only (the first token to the last), per layer and per token
    with open(os.path.join(tmp, "plain.json")) as f:
        dp = json.load(f).get("decode_profile") or {}
    rows, pt = dp.get("per_layer") or [], dp.get("per_token") or {}
    check(len(rows) == s["n_layer"] and dp.get("tokens", 0) > 0 and dp["tokens"] < N,
          f"decode_profile: {len(rows)} layers, {dp.get('tokens')} tokens")
    # the first copy is taken when the client sees the first token: gpud may be a step further by then
    check(all(r["gpud_items"] >= dp.get("tokens", 1) - 2 and r["gpud_compute_us"] > 0 for r in rows),
          f"decode_profile: a layer without gpud items or time: {[r['gpud_items'] for r in rows]}, "
          f"{dp.get('tokens')} tokens")
    some_cold = s["vram"]["hot_neurons"] < s["vram"]["neurons"]
    check(any(r["cpud_items"] > 0 for r in rows) == some_cold and
          all(r["cpud_mb"] > 0 for r in rows if r["cpud_items"]),
          f"decode_profile: cpud's rows {[(r['cpud_items'], r['cpud_mb']) for r in rows]} "
          f"({s['vram']['hot_neurons']} of {s['vram']['neurons']} neurons on gpud)")
    check(pt.get("wall_ms", 0) > 0 and pt.get("pcie_d2h_mb", -1) == 0 and pt.get("pcie_h2d_mb", -1) == 0,
          f"decode_profile per token {pt} (no PCIe on the CPU backend)")
    before = status()["stages"]["predictord"]["items"]
    out = os.path.join(tmp, "dense-req.json")
    p = run("generate", "--name", name, "-p", prompt, "-n", str(N), "--temp", "0", "--ignore-eos", "--dense",
            "--json-stats", out)
    check(p.returncode == 0 and tokens(out) == dense, f"generate --dense failed or differs: {p.stderr[-200:]!r}")
    check(status()["stages"]["predictord"]["items"] == before, "generate --dense still asked predictord for masks")
    generate("kill-predictord", "predictord")
    generate("kill-cpud", "cpud")
finally:
    run("stop", "--name", name)
print(f"pipeline_sparse: {checks} checks, {failures} failed", file=sys.stderr)
sys.exit(1 if failures else 0)
