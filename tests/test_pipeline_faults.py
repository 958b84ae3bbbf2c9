#!/usr/bin/env python3
"""test_pipeline_faults — the pipeline gives the in-process engine's results, and keeps giving them
while its stages die: for every reference case, `pictl generate` on a running instance produces the
in-process greedy tokens and its --dump-logits rows match within 1e-5 relative; then each of
loaderd, cpud, predictord and gpud is killed with SIGKILL in the middle of a 200-token greedy
generation and once during a prefill, and cpud is restarted with `pictl restart`: every
generation completes with the undisturbed tokens, `pictl status` shows the restart, and `pictl
stop` leaves no segment, socket or runtime file.

usage: test_pipeline_faults.py PICTL MODEL.gguf SHARED_DIR"""
import json, os, shutil, signal, struct, subprocess, sys, tempfile, time

pictl, model, fixtures = sys.argv[1:4]
uid = os.geteuid()
name = f"pf{os.getpid()}"
tmp = tempfile.mkdtemp(prefix="pinfer-faults-")
failures = checks = 0
N_GEN = 200
KILL_AFTER_BYTES = 60   # a few dozen tokens printed: mid-decode


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def pictl_run(*args, timeout=300):
    return subprocess.run([pictl, *args], capture_output=True, timeout=timeout)


def status():
    p = pictl_run("status", "--name", name, "--json")
    return json.loads(p.stdout) if p.returncode == 0 else None


def wait_for(pred, timeout=60, step=0.02):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def stage_ready(stage):
    s = status()
    return s and s["stages"][stage]["state"] == "ready" and s["stages"][stage]["pid"] > 0


def read_stats(path):
    with open(path) as f:
        return json.load(f)


def inproc(prompt, n, tag):
    js, lg = os.path.join(tmp, f"{tag}-in.json"), os.path.join(tmp, f"{tag}-in.bin")
    p = pictl_run("run", "--inproc", "-m", model, "-p", prompt, "--temp", "0", "-n", str(n), "--ignore-eos",
                  "-t", "1", "-c", "2048", "--json-stats", js, "--dump-logits", lg)
    check(p.returncode == 0, f"{tag}: in-process run failed: {p.stderr[-300:]!r}")
    return read_stats(js)["tokens"], lg


def generate_args(prompt, n, js, lg=None):
    a = ["generate", "--name", name, "-p", prompt, "--temp", "0", "-n", str(n), "--ignore-eos", "--json-stats", js]
    return a + (["--dump-logits", lg] if lg else [])


def rows(path, V):
    raw = open(path, "rb").read()
    return [struct.unpack_from(f"<{V}f", raw, i * V * 4) for i in range(len(raw) // (V * 4))]


def cleanup():
    pictl_run("stop", "--name", name, timeout=60)


try:
    p = pictl_run("start", "-m", model, "--name", name, "-t", "1", "-c", "2048", "--gpu-ffn-share", "0.5")
    if not check(p.returncode == 0, f"start failed: {p.stderr!r}"):
        sys.exit(1)
    V = status()["n_vocab"]

    # 1. pipeline == in-process on every reference case: tokens and logits
    ref = json.load(open(os.path.join(fixtures, "models/tiny-relu-llama/reference.json")))
    for i, case in enumerate(ref["cases"]):
        n = len(case["greedy_ids"])
        want, want_lg = inproc(case["prompt"], n, f"case{i}")
        js, lg = os.path.join(tmp, f"case{i}.json"), os.path.join(tmp, f"case{i}.bin")
        p = pictl_run(*generate_args(case["prompt"], n, js, lg))
        if not check(p.returncode == 0, f"case {i}: generate failed: {p.stderr[-300:]!r}"):
            continue
        got = read_stats(js)["tokens"]
        check(got == want, f"case {i}: pipeline tokens differ from in-process")
        check(got == case["greedy_ids"], f"case {i}: pipeline tokens differ from HF greedy")
        a, b = rows(lg, V), rows(want_lg, V)
        check(len(a) == len(b) == n, f"case {i}: {len(a)} / {len(b)} logits rows, expected {n}")
        worst = 0.0
        for ra, rb in zip(a, b):
            mr = max(abs(x) for x in rb)
            worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb)) / mr)
        check(worst < 1e-5, f"case {i}: pipeline logits differ from in-process by {worst:.3g}")
        print(f"case {i}: {n} tokens identical, logits max rel diff {worst:.3g}")

    # 2. faults in the middle of a 200-token greedy generation
    prompt = ref["cases"][3]["prompt"]
    want, _ = inproc(prompt, N_GEN, "long")

    def faulted(tag, stage, action, prompt=prompt, want=want, n=N_GEN, during_prefill=False):
        before = status()["stages"][stage]["restarts"]
        js = os.path.join(tmp, f"{tag}.json")
        proc = subprocess.Popen([pictl, *generate_args(prompt, n, js)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        printed = b""
        if during_prefill:
            wait_for(lambda: any(r["state"] == "running" for r in (status() or {}).get("requests", [])), 30, 0.005)
        else:
            while len(printed) < KILL_AFTER_BYTES:
                c = proc.stdout.read(1)
                if not c:
                    break
                printed += c
        target_pid = status()["stages"][stage]["pid"]
        action(target_pid)
        at_kill = len(printed)
        out, err = proc.communicate(timeout=300)
        printed += out
        ok = check(proc.returncode == 0, f"{tag}: generate exited {proc.returncode}: {err[-300:]!r}")
        got = read_stats(js)["tokens"] if ok else None
        check(got == want, f"{tag}: tokens differ from the undisturbed run")
        if during_prefill:
            check(at_kill == 0, f"{tag}: tokens were printed before the kill: not during prefill")
        else:
            check(at_kill >= KILL_AFTER_BYTES and at_kill < len(printed),
                  f"{tag}: the stage was not killed mid-generation ({at_kill} of {len(printed)} bytes)")
        restarted = wait_for(lambda: status()["stages"][stage]["restarts"] >= before + 1 and stage_ready(stage), 30)
        check(restarted, f"{tag}: pictl status does not show {stage} restarted and ready")
        print(f"{tag}: {'identical' if got == want else 'DIFFERENT'}, {stage} restarts {before} -> "
              f"{status()['stages'][stage]['restarts']}")

    kill9 = lambda pid: os.kill(pid, signal.SIGKILL)
    for stage in ("loaderd", "cpud", "predictord", "gpud"):
        faulted(f"kill-{stage}", stage, kill9)
    faulted("restart-cpud", "cpud", lambda pid: check(pictl_run("restart", "cpud", "--name", name).returncode == 0,
                                                     "pictl restart cpud failed"))
    # during prefill: a long prompt, killed while gpud prefills it
    long_prompt = "First Citizen:\n" + "We are accounted poor citizens, the patricians good.\n" * 60
    want_long, _ = inproc(long_prompt, 24, "prefill")
    for stage in ("gpud", "cpud", "predictord", "loaderd"):
        faulted(f"prefill-kill-{stage}", stage, kill9, prompt=long_prompt, want=want_long, n=24, during_prefill=True)
    s = status()
    print("gpud fallbacks:", s["stages"]["gpud"]["fallbacks"], "stale dropped:",
          {k: v["stale_dropped"] for k, v in s["stages"].items()})
finally:
    cleanup()

# 3. nothing left behind
left = [f for f in os.listdir("/dev/shm") if f.startswith(f"pinfer-{uid}-{name}-")]
check(not left, f"segments left after stop: {left}")
xdg = os.environ.get("XDG_RUNTIME_DIR")
rundir = os.path.join(xdg, "pinfer", name) if xdg else f"/tmp/pinfer-{uid}/{name}"
leftover_files = []
for root, dirs, files in os.walk(rundir):
    leftover_files += [os.path.join(root, f) for f in files if not root.endswith("logs")]
check(not leftover_files, f"runtime files left after stop: {leftover_files}")
shutil.rmtree(tmp, ignore_errors=True)
print(f"pipeline_faults: {checks} checks, {failures} failed", file=sys.stderr)
sys.exit(1 if failures else 0)
