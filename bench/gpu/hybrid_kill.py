#!/usr/bin/env python3
"""hybrid_kill.py — kill -9 of each stage in hybrid mode (gpud on the GPU with a VRAM budget, cpud
computing the cold neurons) leaves the tokens and logits unchanged (issue 10's "Done means").

An instance is started with --backend cuda --vram-budget G; one greedy request runs undisturbed
(the base), then the same request again while gpud, predictord or cpud is killed with SIGKILL once a
few tokens have streamed — once (the restarted stage usually redoes the step), and for cpud also
repeatedly for OUTAGE_S, so gpud computes the cold share itself for a while. Every run's tokens and
logits must be the base's, bitwise; the base's tokens are compared with the all-CPU in-process run
(REF, a --json-stats file of `pictl run --inproc --backend cpu` with the same prompt and -n).

  hybrid_kill.py PICTL MODEL BUDGET_GIB TAG OUTDIR REF.json
HK_LOGITS=0: no --dump-logits, tokens only — gpud then decodes through the backend's whole-step
graph wherever every neuron is on the device (a logits dump takes whole rows, op by op).
Prints one line per check ("hybrid_kill TAG ...: PASS|FAIL ..."); exit 0 when all pass."""
import json, os, signal, subprocess, sys, time

pictl, model, budget, tag, out, ref = sys.argv[1:7]
name = f"hk{os.getpid()}"
N = int(os.environ.get("HK_TOKENS", "480"))
PROMPT = "Once upon a time"
OUTAGE_S = 1.0
fails = 0
LOGITS = os.environ.get("HK_LOGITS", "1") != "0"


def say(ok, msg):
    global fails
    fails += 0 if ok else 1
    print(f"hybrid_kill {tag} {msg}: {'PASS' if ok else 'FAIL'}", flush=True)


def run(*a, timeout=60):
    return subprocess.run([pictl, *a], capture_output=True, timeout=timeout)


def status():
    p = run("status", "--name", name, "--json")
    return json.loads(p.stdout) if p.returncode == 0 else None


def gen(run_tag, kill=None, repeat=False):
    js, lg = os.path.join(out, f"{tag}-{run_tag}.json"), os.path.join(out, f"{tag}-{run_tag}.bin")
    dump = ["--dump-logits", lg] if LOGITS else []
    p = subprocess.Popen([pictl, "generate", "--name", name, "-p", PROMPT, "-n", str(N), "--ignore-eos", "--temp",
                          "0", "--json-stats", js, *dump], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    note = ""
    if kill:
        before = status()["stages"][kill]["restarts"]
        got = b""
        while len(got) < 16:
            c = p.stdout.read(1)
            if not c:
                break
            got += c
        killed, end = set(), time.time() + (OUTAGE_S if repeat else 0)
        while True:
            pid = status()["stages"][kill]["pid"]
            if pid > 0 and pid not in killed and p.poll() is None:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            if time.time() >= end or p.poll() is not None:
                break
            time.sleep(0.01)
        note = f"{len(killed)} kill(s) while running"
    _, err = p.communicate(timeout=120)
    if p.returncode != 0:
        return None, None, f"generate exited {p.returncode}: {err[-300:]!r}"
    if kill:
        end = time.time() + 20
        while time.time() < end and status()["stages"][kill]["restarts"] <= before:
            time.sleep(0.05)
        note += f", restarts {before} -> {status()['stages'][kill]['restarts']}"
    with open(js) as f:
        toks = json.load(f)["tokens"]
    if not LOGITS:
        return toks, b"", note
    with open(lg, "rb") as f:
        return toks, f.read(), note


# HK_START: other start flags instead of the budget (a CPU-only check of this script: --backend cpu ...)
start = os.environ.get("HK_START", "").split() or ["--backend", "cuda", "--vram-budget", budget]
# --parallel 1 as pictl run: the KV cache, and so the fixed bytes of the plan, are those of hybrid.sh's runs
p = run("start", "-m", model, "--name", name, "-t", os.environ.get("HK_THREADS", "8"), "-c", "512", "--parallel", "1",
        *start)
if p.returncode != 0:
    say(False, f"start --vram-budget {budget}: {p.stderr[-300:]!r}")
    sys.exit(1)
try:
    st = status()
    vr = st.get("vram", {})
    print(f"hybrid_kill {tag}: budget {budget} GiB, hot neurons {vr.get('hot_neurons')} of {vr.get('neurons')}, "
          f"coverage {vr.get('hot_coverage')}, backend {st.get('backend')}", flush=True)
    if os.environ.get("HK_WANT_BACKEND"):
        say(st.get("backend") == os.environ["HK_WANT_BACKEND"], f"placement backend {st.get('backend')}")
    base_t, base_l, note = gen("base")
    if base_t is None:
        say(False, f"base run: {note}")
        sys.exit(1)
    with open(ref) as f:
        ref_t = json.load(f)["tokens"]
    same = ref_t[:len(base_t)] == base_t
    first = next((i for i, (a, b) in enumerate(zip(ref_t, base_t)) if a != b), None)
    say(same, f"hybrid greedy = all-CPU greedy ({len(base_t)} tokens{'' if same else f', first difference at {first}'})")
    for stage, repeat in (("gpud", False), ("predictord", False), ("cpud", False), ("cpud", True)):
        rt = f"kill-{stage}" + ("-outage" if repeat else "")
        t, l, note = gen(rt, stage, repeat)
        if t is None:
            say(False, f"{rt}: {note}")
            continue
        say(t == base_t and l == base_l, f"{rt} tokens {'=' if t == base_t else '!='} base, logits "
            f"{('bitwise =' if l == base_l else '!=') if LOGITS else 'not dumped'} ({note})")
finally:
    run("stop", "--name", name)
sys.exit(1 if fails else 0)
