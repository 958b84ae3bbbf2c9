"""test_disk_pipeline — the disk tier in the pipeline: an instance started with --ram-budget (90 %
of the tiny calibrated model's FFN neurons on disk, read by cpud from the bundle into its neuron
cache) gives bitwise the tokens and logits of the all-in-RAM in-process run; with cpud killed -9
again and again mid-request (gpud computes the cold share from the weights image meanwhile, the
restarted cpud reopens its cache) and with loaderd killed -9 mid-request, the tokens do not change.

usage: test_disk_pipeline.py PICTL MODEL.gguf CALIB_TEXT"""
import json, os, shutil, signal, subprocess, sys, tempfile, time

pictl, dense_model, calib = sys.argv[1:4]
tmp = tempfile.mkdtemp(prefix="pinfer-dpipe-")
name = f"dpipe{os.getpid()}"
failures = checks = 0
N = 96
OUTAGE_S = 1.0
PROMPTS = [("ROMEO:", ["--temp", "0"]), ("KING HENRY:\nO God", ["--temp", "1", "--seed", "11"]),
           ("To be, or not", ["--temp", "0"])]


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run(*a, timeout=600):
    return subprocess.run([pictl, *a], capture_output=True, timeout=timeout)


def result(tag):
    with open(os.path.join(tmp, tag + ".json")) as f:
        toks = json.load(f)["tokens"]
    with open(os.path.join(tmp, tag + ".bin"), "rb") as f:
        return toks, f.read()


def outs(tag):
    return ["--json-stats", os.path.join(tmp, tag + ".json"), "--dump-logits", os.path.join(tmp, tag + ".bin")]


def status():
    p = run("status", "--name", name, "--json")
    return json.loads(p.stdout) if p.returncode == 0 else None


def generate(i, tag, kill_stage=None):
    prompt, samp = PROMPTS[i]
    p = subprocess.Popen([pictl, "generate", "--name", name, "-p", prompt, "-n", str(N), "--ignore-eos", *samp,
                          *outs(tag)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    before = status()["stages"][kill_stage]["restarts"] if kill_stage else 0
    if kill_stage:
        got = b""
        while len(got) < 16:
            c = p.stdout.read(1)
            if not c:
                break
            got += c
        killed, end = set(), time.time() + OUTAGE_S
        while time.time() < end and p.poll() is None:
            pid = status()["stages"][kill_stage]["pid"]
            if pid > 0 and pid not in killed:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            time.sleep(0.01)
        check(killed, f"{tag}: {kill_stage} was never seen running")
    _, err = p.communicate(timeout=600)
    if not check(p.returncode == 0, f"{tag}: generate exited {p.returncode}: {err[-300:]!r}"):
        return None
    if kill_stage:
        end = time.time() + 30
        while time.time() < end and status()["stages"][kill_stage]["restarts"] <= before:
            time.sleep(0.05)
        check(status()["stages"][kill_stage]["restarts"] > before, f"{tag}: {kill_stage} was not restarted")
    return result(tag)


try:
    cal = os.path.join(tmp, "cal.powerinfer.gguf")
    p = run("calibrate", dense_model, "--data", calib, "-o", cal, "--tokens", "4096", "--heldout", "1024",
            "--rank", "32", "--epochs", "2", "-t", "2", "-q")
    if not check(p.returncode == 0, f"calibrate failed: {p.stderr[-400:]!r}"):
        sys.exit(1)
    p = run("bundle", cal, "--align", "512")
    check(p.returncode == 0, f"bundle: {p.stderr[-300:]!r}")
    refs = {}
    for i, (prompt, samp) in enumerate(PROMPTS):
        p = run("run", "--inproc", "-m", cal, "-p", prompt, "-n", str(N), "--ignore-eos", "-c", "512", "-t", "2",
                *samp, *outs(f"ref-{i}"))
        if check(p.returncode == 0, f"reference {i}: {p.stderr[-300:]!r}"):
            refs[i] = result(f"ref-{i}")
    # the budget: dense + cache + 10 % of the neurons, from an in-process run that holds everything
    p = run("run", "--inproc", "-m", cal, "-p", "x", "-n", "1", "--ram-budget", "1000", *outs("sizes"))
    with open(os.path.join(tmp, "sizes.json")) as f:
        d = json.load(f)["disk"]
    n = d["ram_neurons"]
    budget = (d["dense_bytes"] + d["cache_bytes"] + n // 10 * (d["ram_bytes"] // n)) / 2**30
    p = run("start", "-m", cal, "--name", name, "-t", "2", "-c", "512", "--ram-budget", f"{budget:.9f}")
    if not check(p.returncode == 0, f"start --ram-budget failed: {p.stderr[-300:]!r}"):
        sys.exit(1)
    got = generate(0, "plain")
    check(got == refs.get(0), "prompt 0: the pipeline's disk tier differs from the all-in-RAM run (not bitwise)")
    log = run("logs", "cpud", "--name", name).stdout
    check(b"disk tier: budget" in log and b"neurons) read from" in log, f"cpud's log shows no disk tier: {log[-400:]!r}")
    got = generate(1, "kill-cpud", kill_stage="cpud")
    check(got == refs.get(1), "prompt 1: tokens or logits changed with cpud killed -9 during streaming")
    got = generate(2, "kill-loaderd", kill_stage="loaderd")
    check(got == refs.get(2), "prompt 2: tokens or logits changed with loaderd killed -9 during streaming")
    got = generate(0, "after")
    check(got == refs.get(0), "prompt 0 after the restarts: differs")
    log = run("logs", "cpud", "--name", name).stdout
    check(log.count(b"disk tier: budget") >= 2, "the restarted cpud did not reopen its disk tier")
finally:
    run("stop", "--name", name, timeout=60)
    shutil.rmtree(tmp, ignore_errors=True)

print(f"disk_pipeline: {checks} checks, {failures} failed")
sys.exit(1 if failures else 0)
