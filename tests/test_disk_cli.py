"""test_disk_cli — the disk tier through pictl on the tiny calibrated model (made as
tests/test_invariance.py makes it): pictl bundle writes and verifies the sidecar; pictl run --inproc
with a --ram-budget that leaves most FFN neurons on disk gives bitwise the tokens and logits of the
all-in-RAM run (greedy and sampled), its --json-stats carry the disk counters; a damaged bundle, a
budget below the dense weights, and a missing bundle are refused with a message; ^C while the bundle
is written leaves no OUT.tmp.

usage: test_disk_cli.py PICTL MODEL.gguf CALIB_TEXT"""
import json, os, shutil, signal, subprocess, sys, tempfile

from interrupt_write import interrupt_while_writing

pictl, dense_model, calib = sys.argv[1:4]
tmp = tempfile.mkdtemp(prefix="pinfer-disk-")
failures = checks = 0
N = 48
PROMPTS = [("ROMEO:", ["--temp", "0"]), ("KING HENRY:\nO God", ["--temp", "1", "--seed", "11"])]


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run(*a, timeout=600, env=None):
    return subprocess.run([pictl, *a], capture_output=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def gen(model, i, tag, *extra, env=None):
    js, lg = os.path.join(tmp, tag + ".json"), os.path.join(tmp, tag + ".bin")
    prompt, samp = PROMPTS[i]
    p = run("run", "--inproc", "-m", model, "-p", prompt, "-n", str(N), "--ignore-eos", "-c", "256", "-t", "2",
            *samp, "--json-stats", js, "--dump-logits", lg, *extra, env=env)
    if not check(p.returncode == 0, f"{tag}: run failed: {p.stderr[-400:]!r}"):
        return None, None, None, p
    with open(js) as f:
        st = json.load(f)
    with open(lg, "rb") as f:
        return st["tokens"], f.read(), st, p


try:
    cal = os.path.join(tmp, "cal.powerinfer.gguf")
    p = run("calibrate", dense_model, "--data", calib, "-o", cal, "--tokens", "4096", "--heldout", "1024",
            "--rank", "32", "--epochs", "2", "-t", "2", "-q")
    if not check(p.returncode == 0, f"calibrate failed: {p.stderr[-400:]!r}"):
        sys.exit(1)
    p = run("run", "--inproc", "-m", cal, "-p", "x", "-n", "1", "--ram-budget", "1")
    check(p.returncode != 0 and b"pictl bundle" in p.stderr, f"no bundle: {p.stderr[-300:]!r}")
    size = os.path.getsize(cal)
    p = run("bundle", cal, "-o", cal)
    check(p.returncode != 0 and b"refusing to overwrite an input" in p.stderr and os.path.getsize(cal) == size,
          f"bundle -o MODEL must refuse and keep the model: {p.stderr[-300:]!r}")
    part = os.path.join(tmp, "interrupted.ffnbundle")
    rc, err, leftover = interrupt_while_writing([pictl, "bundle", cal, "-o", part], part + ".tmp")
    check(rc == -signal.SIGINT and not leftover and not os.path.exists(part),
          f"^C mid-bundle: rc {rc}, OUT.tmp left: {leftover}, {err[-200:]!r}")
    p = run("bundle", cal, "--align", "512")
    check(p.returncode == 0 and os.path.exists(cal + ".ffnbundle"), f"bundle: {p.stderr[-300:]!r}")
    p = run("bundle", cal, "--verify")
    check(p.returncode == 0 and b"every row matches" in p.stdout, f"bundle --verify: {p.stdout!r} {p.stderr!r}")
    p = run("bundle", dense_model)
    check(p.returncode != 0 and b"PowerInfer" in p.stderr, f"a dense file cannot be bundled: {p.stderr!r}")

    # the budget: dense + cache, read from a run that holds everything, + 10 % of the neurons
    t, lg, st, p = gen(cal, 0, "sizes", "--ram-budget", "1000")
    if st is None or not check("disk" in st, "--json-stats has no disk section"):
        sys.exit(1)
    d = st["disk"]
    check(d["disk_neurons"] == 0 and d["misses"] == 0, f"a budget that holds everything reads nothing: {d}")
    n_neurons = d["ram_neurons"]
    record = d["ram_bytes"] // n_neurons
    budget = (d["dense_bytes"] + d["cache_bytes"] + n_neurons // 10 * record) / 2**30
    for i in range(len(PROMPTS)):
        ref_t, ref_l, _, _ = gen(cal, i, f"ram-{i}")
        got_t, got_l, st, p = gen(cal, i, f"disk-{i}", "--ram-budget", f"{budget:.9f}", "--disk-floor")
        if got_t is None:
            continue
        d = st["disk"]
        check(d["disk_neurons"] > 0.8 * n_neurons, f"prompt {i}: most neurons on disk ({d['disk_neurons']} of {n_neurons})")
        check(got_t == ref_t, f"prompt {i}: tokens with --ram-budget differ from the all-in-RAM run")
        check(got_l == ref_l, f"prompt {i}: logits with --ram-budget differ from the all-in-RAM run (not bitwise)")
        check(d["misses"] > 0 and d["bytes_read_per_token"] > 0 and 0 < d["hit_rate"] <= 1 and d["reads_in_flight"] == 0,
              f"prompt {i}: counters {d}")
        check(d["floor_mib_s"] > 0, f"prompt {i}: no disk floor measured")
        check(b"[disk]" in p.stderr and b"KiB read/token" in p.stderr, f"prompt {i}: no [disk] line: {p.stderr[-300:]!r}")
        print(f"prompt {i}: bitwise with {d['disk_neurons']} of {n_neurons} neurons on disk; "
              f"{d['bytes_read_per_token'] / 1024:.1f} KiB/token, hit rate {d['hit_rate']:.3f}, reader {d['reader']}")

    # the reads issued by the kernel's workers (the default from 8 cores; forced both ways here): the same bits
    ref_t, ref_l, _, _ = gen(cal, 0, "ram-a")
    for a in ("1", "0"):
        got_t, got_l, st, p = gen(cal, 0, f"disk-async{a}", "--ram-budget", f"{budget:.9f}",
                                  env={"PINFER_STREAM_ASYNC": a})
        if got_t is None:
            continue
        check(got_t == ref_t and got_l == ref_l, f"PINFER_STREAM_ASYNC={a}: tokens or logits differ from all in RAM")
        reader = st["disk"]["reader"]
        check(("async" in reader and "qd 1024" in reader) if a == "1" else ("async" not in reader and "qd 64" in reader),
              f"PINFER_STREAM_ASYNC={a}: reader {reader!r}")

    p = run("run", "--inproc", "-m", cal, "-p", "x", "-n", "1", "--ram-budget", "0.0000001")
    check(p.returncode != 0 and b"dense weights" in p.stderr, f"too small a budget: {p.stderr[-300:]!r}")
    # (the pipeline's --ram-budget: tests/test_disk_pipeline.py)
    # a bundle of another model (the same shapes, other weights) is refused
    other = os.path.join(tmp, "other.gguf")
    p = run("calibrate", dense_model, "--data", calib, "-o", other, "--tokens", "2048", "--heldout", "512",
            "--rank", "16", "--epochs", "1", "-t", "2", "-q")
    if p.returncode == 0:
        shutil.copy(cal + ".ffnbundle", other + ".ffnbundle")
        p = run("bundle", other, "--verify")
        # the same base model: its FFN rows are the same, so the bundle is valid for it
        check(p.returncode == 0, f"same FFN rows: the bundle fits: {p.stderr[-300:]!r}")
    with open(cal + ".ffnbundle", "r+b") as f:
        f.seek(20)
        f.write(b"\x07")
    p = run("run", "--inproc", "-m", cal, "-p", "x", "-n", "1", "--ram-budget", f"{budget:.9f}")
    check(p.returncode != 0 and b"checksum" in p.stderr, f"a damaged bundle: {p.stderr[-300:]!r}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

print(f"disk_cli: {checks} checks, {failures} failed")
sys.exit(1 if failures else 0)
