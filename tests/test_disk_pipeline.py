"""test_disk_pipeline — the disk tier in the pipeline: an instance started with --ram-budget (90 %
of the tiny calibrated model's FFN neurons on disk, read by loaderd with io_uring from the bundle
into cpud's neuron cache in the "ncache" segment) gives bitwise the tokens and logits of the
all-in-RAM in-process run; with cpud killed -9 again and again mid-request (gpud computes the cold
share from the weights image meanwhile, the restarted cpud creates a new cache segment and loaderd
re-attaches to it) and with loaderd killed -9 again and again mid-request (cpud reads the rows it
lacks itself — the fallback counter moves — until the restarted loaderd serves again), the tokens
do not change. The counters (bytes/token, hit rate, reads, waits, fallbacks) are in pictl status,
pictl profile and generate --json-stats.

usage: test_disk_pipeline.py PICTL MODEL.gguf CALIB_TEXT"""
import json, os, re, shutil, signal, subprocess, sys, tempfile, time

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


def disk():
    st = status()
    return st.get("disk") if st else None


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
    # without its bundle the start fails at once, naming the file and how to make it (cpud could not
    # start, and with the weights trimmed of their FFN rows no request would ever end)
    for how in (["start", "--name", name + "nb"], ["run", "-p", "x", "-n", "2"]):
        t0 = time.time()
        p = run(how[0], "-m", cal, *how[1:], "-t", "1", "-c", "256", "--ram-budget", "0.001", timeout=60)
        err = p.stderr.decode(errors="replace")
        check(p.returncode != 0 and ".ffnbundle" in err and "pictl bundle" in err and time.time() - t0 < 10,
              f"{how[0]} --ram-budget without a bundle: rc {p.returncode} in {time.time() - t0:.1f} s, {err[-300:]!r}")
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
    log = run("logs", "loaderd", "--name", name).stdout
    check(b"serving the neuron cache" in log, f"loaderd's log shows it never served the cache: {log[-400:]!r}")
    # the load-time peak: the supervisor left the FFN pages unallocated, so right after the load (before
    # loaderd's punch, which then frees nothing) the segment held the dense parts only, never the file
    m = re.search(rb"weights segment \((\d+) bytes\) had (\d+) bytes resident after the load, (\d+) after the "
                  rb"trim; its FFN rows \((\d+) bytes\)", log)
    if check(m, f"loaderd's log does not say the segment's resident bytes after the load: {log[-400:]!r}"):
        seg, peak, after, ffn = map(int, m.groups())
        print(f"weights segment {seg} bytes: {peak} resident after the load, {after} after the trim, FFN {ffn}")
        check(ffn > seg // 4 and peak <= seg - ffn + 65536 and after == peak,
              f"the weights segment held FFN pages during the load: {peak} resident of {seg} (FFN {ffn})")
    d = disk()
    print("disk after plain:", d)
    if check(d is not None, "pictl status --json has no disk object"):
        check(d["loaderd_serving"] and d["loaderd_reads"] > 0 and d["loaderd_bytes"] > 0,
              f"loaderd did not stream: {d}")
        check(d["tokens"] > 0 and d["bytes_per_token"] > 0 and 0 < d["hit_rate"] <= 1 and d["needed"] > 0,
              f"the disk counters did not move: {d}")
        check(d["in_flight"] == 0 and d["loaderd_in_flight"] == 0, f"reads still in flight when idle: {d}")
        check(d["prefill_tokens"] > 0 and d["prefill_bytes"] > 0, f"no prefill streaming counted: {d}")
        # the weights segment holds the dense parts only: the FFN rows were punched out
        check(d["weights_trimmed_bytes"] > 0 and
              d["weights_resident_bytes"] <= d["weights_segment_bytes"] - d["weights_trimmed_bytes"] + 65536,
              f"the weights segment still holds the FFN rows: {d}")
    with open(os.path.join(tmp, "plain.json")) as f:
        js = json.load(f)
    check("disk" in js and js["disk"]["bytes_per_token"] > 0, "generate --json-stats has no disk counters")
    prof = run("profile", "--name", name).stdout
    check(b"# disk tier:" in prof and b"KiB read/token" in prof, f"pictl profile shows no disk tier: {prof[-300:]!r}")
    txt = run("status", "--name", name).stdout
    check(b"# Disk tier" in txt and b"fallback_reads:" in txt, "pictl status shows no disk tier section")
    got = generate(1, "kill-cpud", kill_stage="cpud")
    check(got == refs.get(1), "prompt 1: tokens or logits changed with cpud killed -9 during streaming")
    end = time.time() + 10
    while time.time() < end and not ((disk() or {}).get("loaderd_serving")):
        time.sleep(0.05)
    log = run("logs", "loaderd", "--name", name).stdout
    check(log.count(b"serving the neuron cache") >= 2, "loaderd did not re-attach to the restarted cpud's cache")
    d0 = disk()
    got = generate(2, "kill-loaderd", kill_stage="loaderd")
    check(got == refs.get(2), "prompt 2: tokens or logits changed with loaderd killed -9 during streaming")
    d1 = disk()
    print("disk after the loaderd kills:", d1)
    check(d0 and d1 and d1["fallback_reads"] > d0["fallback_reads"],
          f"cpud never read by itself while loaderd was down: {d0} -> {d1}")
    end = time.time() + 10
    while time.time() < end and not ((disk() or {}).get("loaderd_serving")):
        time.sleep(0.05)
    d2 = disk()
    got = generate(0, "after")
    check(got == refs.get(0), "prompt 0 after the restarts: differs")
    d3 = disk()
    check(d2 and d3 and d3["loaderd_serving"] and d3["loaderd_reads"] > d2["loaderd_reads"],
          f"the restarted loaderd does not stream: {d2} -> {d3}")
    log = run("logs", "cpud", "--name", name).stdout
    check(log.count(b"disk tier: budget") >= 2, "the restarted cpud did not reopen its disk tier")
    run("stop", "--name", name, timeout=60)

    # a read error (loaderd's 40th streamed read fails with EIO): the request fails cleanly, naming
    # the file offset, within seconds (no hang, no stage restart); the next request is served
    p = subprocess.run([pictl, "start", "-m", cal, "--name", name, "-t", "2", "-c", "512", "--ram-budget",
                        f"{budget:.9f}"], capture_output=True, timeout=120,
                       env=dict(os.environ, PINFER_LOADER_FAIL_STREAM="40"))
    if check(p.returncode == 0, f"start with the read-error hook failed: {p.stderr[-300:]!r}"):
        t0 = time.time()
        p = run("generate", "--name", name, "-p", PROMPTS[0][0], "-n", str(N), "--ignore-eos", *PROMPTS[0][1],
                timeout=120)
        err = p.stderr.decode(errors="replace")
        print("read error:", err.strip()[-300:])
        check(p.returncode != 0, "a request whose disk read failed succeeded")
        check("offset" in err and "Input/output error" in err, f"the error does not name the offset: {err[-300:]!r}")
        check(time.time() - t0 < 60, f"the failed request took {time.time() - t0:.1f} s")
        st = status()
        check(st and st["stages"]["cpud"]["restarts"] == 0 and st["stages"]["loaderd"]["restarts"] == 0,
              "a stage died over a read error")
        d = disk()
        check(d and d["loaderd_errors"] == 1, f"loaderd's error count: {d}")
        got = generate(0, "after-error")
        check(got == refs.get(0), "the request after the read error differs")
    run("stop", "--name", name, timeout=60)

    # cpud cannot come back (its bundle is gone): with the weights segment trimmed of the FFN rows no
    # step can end without cpud, so the request in flight fails naming the bundle (cpud sees it go
    # away, or its restarts are used up) and the instance turns FAILED and refuses new requests —
    # nothing waits forever
    p = run("start", "-m", cal, "--name", name, "-t", "2", "-c", "512", "--ram-budget", f"{budget:.9f}")
    if check(p.returncode == 0, f"start for the lost bundle: {p.stderr[-300:]!r}"):
        g = subprocess.Popen([pictl, "generate", "--name", name, "-p", PROMPTS[0][0], "-n", "2000", "--ignore-eos",
                              "--temp", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got = b""
        while len(got) < 16 and g.poll() is None:
            got += g.stdout.read(1)
        bundle = cal + ".ffnbundle"
        os.rename(bundle, bundle + ".away")
        t0 = time.time()
        pid = status()["stages"]["cpud"]["pid"]
        if pid > 0:
            os.kill(pid, signal.SIGKILL)
        try:
            _, err = g.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            g.kill()
            _, err = g.communicate()
        err = err.decode(errors="replace")
        print(f"lost bundle: the request ended after {time.time() - t0:.1f} s: {err.strip()[-200:]}")
        check(g.returncode != 0 and "ffnbundle" in err,
              f"with cpud's bundle gone the request must fail naming it: rc {g.returncode}, {err[-300:]!r}")
        end = time.time() + 90
        while time.time() < end and (status() or {}).get("state") != "failed":
            time.sleep(0.2)
        st = status() or {}
        check(st.get("state") == "failed" and "cpud" in st.get("error", ""),
              f"the instance without cpud: state {st.get('state')!r}, error {st.get('error', '')[:200]!r}")
        t0 = time.time()
        p = run("generate", "--name", name, "-p", "x", "-n", "4", timeout=60)
        check(p.returncode != 0 and time.time() - t0 < 10,
              f"a request to the failed instance: rc {p.returncode} after {time.time() - t0:.1f} s")
        os.rename(bundle + ".away", bundle)
finally:
    run("stop", "--name", name, timeout=60)
    shutil.rmtree(tmp, ignore_errors=True)

print(f"disk_pipeline: {checks} checks, {failures} failed")
sys.exit(1 if failures else 0)
