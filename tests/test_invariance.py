#!/usr/bin/env python3
"""test_invariance — the engine's invariance contract (docs/ARCHITECTURE.md), on the embedded dense
model and on a calibrated sparse one (imperfect predictors: where a neuron fires that its token's
mask did not predict, only computing each token with its own mask keeps results exact):

  1. in-process: tokens and --dump-logits rows bitwise identical for -t 1, 2, 3;
  2. the pipeline with the in-process placement (every neuron in gpud) = in-process, bitwise;
  3. the pipeline with the FFN split between gpud and cpud: 4 concurrent requests (2 greedy, 2
     sampled at temperature 1 with fixed seeds) give bitwise the same tokens and logits rows when
     gpud, predictord or cpud is killed with SIGKILL in the middle of their generation as when
     nothing is killed (a replayed request prefills prompt + generated tokens in one batch; a
     predictord outage makes gpud evaluate the same predictor; a cpud outage makes gpud compute
     the cold share with cpud's kernels);
  4. continuous batching: 8 requests with different prompts and lengths (4 greedy, 4 sampled with
     fixed seeds), some joining while others decode, through an instance with --parallel 4 give
     bitwise the tokens and logits rows they give through --parallel 1; `pictl status` shows the
     slots and the queue; Ctrl-C of a client and kill -9 of another cancel their requests and free
     their slots while the others complete unchanged.

usage: test_invariance.py PICTL MODEL.gguf CALIB_TEXT"""
import json, os, shutil, signal, subprocess, sys, tempfile, time

pictl, dense_model, calib = sys.argv[1:4]
tmp = tempfile.mkdtemp(prefix="pinfer-inv-")
name = f"inv{os.getpid()}"
failures = checks = 0
N = 160
OUTAGE_S = 1.5  # how long a stage is killed again whenever it comes back
PROMPTS = ["ROMEO:", "First Citizen:\nBefore we proceed", "KING HENRY:\nO God", "To be, or not"]
SAMPLING = [("0", None), ("0", None), ("1", "11"), ("1", "12345")]  # (temp, seed)


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run(*a, timeout=600):
    return subprocess.run([pictl, *a], capture_output=True, timeout=timeout)


def status():
    p = run("status", "--name", name, "--json")
    return json.loads(p.stdout) if p.returncode == 0 else None


def sample_args(i):
    temp, seed = SAMPLING[i]
    return ["--temp", temp] + (["--seed", seed] if seed else [])


def result(tag):
    js, lg = os.path.join(tmp, tag + ".json"), os.path.join(tmp, tag + ".bin")
    with open(js) as f:
        toks = json.load(f)["tokens"]
    with open(lg, "rb") as f:
        return toks, f.read()


def inproc(model, i, threads, tag):
    js, lg = os.path.join(tmp, tag + ".json"), os.path.join(tmp, tag + ".bin")
    p = run("run", "--inproc", "-m", model, "-p", PROMPTS[i], "-n", str(N), "--ignore-eos", "-c", "512",
            "-t", str(threads), *sample_args(i), "--json-stats", js, "--dump-logits", lg)
    check(p.returncode == 0, f"{tag}: in-process run failed: {p.stderr[-300:]!r}")
    return result(tag)


def gen_cmd(i, tag):
    js, lg = os.path.join(tmp, tag + ".json"), os.path.join(tmp, tag + ".bin")
    return [pictl, "generate", "--name", name, "-p", PROMPTS[i], "-n", str(N), "--ignore-eos", *sample_args(i),
            "--json-stats", js, "--dump-logits", lg]


def start(model, *extra):
    p = run("start", "-m", model, "--name", name, "-t", "2", "-c", "512", *extra)
    return check(p.returncode == 0, f"start {extra} failed: {p.stderr[-300:]!r}")


def stop():
    run("stop", "--name", name, timeout=60)


def concurrent(tag, kill_stage=None, repeat=False):
    """The 4 requests at once; with kill_stage, SIGKILL it once the first request has streamed a few
    tokens — with repeat, again each time it is back, for OUTAGE_S, so that the supervisor's restart
    backoff keeps it down for a while and gpud runs without it (a single kill is often only a redo:
    the restarted stage takes the step from its ring). Returns {i: (tokens, logits bytes)}."""
    procs = [subprocess.Popen(gen_cmd(i, f"{tag}-{i}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(len(PROMPTS))]
    before = status()["stages"][kill_stage]["restarts"] if kill_stage else 0
    if kill_stage:
        got = b""
        while len(got) < 24:
            c = procs[0].stdout.read(1)
            if not c:
                break
            got += c
        killed, end = set(), time.time() + (OUTAGE_S if repeat else 0)
        while True:
            pid = status()["stages"][kill_stage]["pid"]
            if pid > 0 and pid not in killed:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            if time.time() >= end or all(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
    out = {}
    for i, p in enumerate(procs):
        _, err = p.communicate(timeout=600)
        if check(p.returncode == 0, f"{tag} request {i}: generate exited {p.returncode}: {err[-300:]!r}"):
            out[i] = result(f"{tag}-{i}")
    if kill_stage:
        end = time.time() + 30
        while time.time() < end and status()["stages"][kill_stage]["restarts"] <= before:
            time.sleep(0.05)
        check(status()["stages"][kill_stage]["restarts"] > before, f"{tag}: {kill_stage} was not restarted")
    return out


try:
    # PINFER_INV_CAL: a calibrated file made before (the GPU machine has no OpenBLAS to calibrate with)
    cal = os.environ.get("PINFER_INV_CAL") or os.path.join(tmp, "cal.powerinfer.gguf")
    if not os.environ.get("PINFER_INV_CAL"):
        p = run("calibrate", dense_model, "--data", calib, "-o", cal, "--tokens", "4096", "--heldout", "1024",
                "--rank", "32", "--epochs", "2", "-t", "2", "-q")
        if not check(p.returncode == 0, f"calibrate failed: {p.stderr[-400:]!r}"):
            sys.exit(1)

    # 1. thread count
    for model, kind in ((dense_model, "dense"), (cal, "sparse")):
        for i in (0, 2):
            base = inproc(model, i, 1, f"{kind}-t1-{i}")
            for t in (2, 3):
                got = inproc(model, i, t, f"{kind}-t{t}-{i}")
                check(got[0] == base[0], f"{kind} prompt {i}: tokens at -t {t} differ from -t 1")
                check(got[1] == base[1], f"{kind} prompt {i}: logits at -t {t} differ from -t 1 (not bitwise)")
        print(f"{kind}: -t 1, 2, 3 compared (FAIL lines above, if any)")

    # 2. pipeline, every neuron in gpud (the in-process placement) = in-process, with the masks
    # computed in gpud (the default) and in predictord
    want = {i: inproc(cal, i, 1, f"sparse-ref-{i}") for i in range(len(PROMPTS))}
    for where in ("gpud", "predictord"):
        if not start(cal, "--predict-in", where):
            continue
        check(status()["predict_in"] in (where, "device"), f"status predict_in {status()['predict_in']!r}")
        for i in range(len(PROMPTS)):
            p = subprocess.run(gen_cmd(i, f"pipe-{where}-{i}"), capture_output=True, timeout=600)
            if check(p.returncode == 0, f"pipeline request {i} failed: {p.stderr[-300:]!r}"):
                got = result(f"pipe-{where}-{i}")
                check(got[0] == want[i][0], f"pipeline (masks in {where}) prompt {i}: tokens differ from in-process")
                check(got[1] == want[i][1],
                      f"pipeline (masks in {where}) prompt {i}: logits differ from in-process (not bitwise)")
        stop()
        print(f"pipeline (masks in {where}) vs in-process on the calibrated model: see FAIL lines above, if any")

    # 3. FFN split between gpud and cpud; kill -9 each stage under 4 concurrent requests (masks from
    # predictord, so that its outage is tested: gpud then evaluates the same predictor itself)
    if start(cal, "--gpu-ffn-share", "0.5", "--predict-in", "predictord"):
        base = concurrent("base")
        check(len(base) == len(PROMPTS), "undisturbed concurrent requests failed")
        seeded = [base[i][0] for i in (2, 3) if i in base]
        check(len(seeded) < 2 or seeded[0] != seeded[1], "the two seeded requests drew the same tokens")
        # a backend that runs the predictor itself (a GPU) never asks predictord: no outage to test
        pred_here = status()["backend"] != "cpu"
        for stage, repeat in (("gpud", False), ("predictord", False), ("cpud", False), ("predictord", True),
                              ("cpud", True)):
            fb = status()["stages"]["gpud"]["fallbacks"]
            tag = f"kill-{stage}" + ("-outage" if repeat else "")
            got = concurrent(tag, stage, repeat)
            for i in base:
                if i in got:
                    check(got[i][0] == base[i][0], f"{tag}: request {i} tokens differ")
                    check(got[i][1] == base[i][1], f"{tag}: request {i} logits differ (not bitwise)")
            fb = status()["stages"]["gpud"]["fallbacks"] - fb
            if repeat and not (stage == "predictord" and pred_here):
                check(fb > 0, f"{tag}: gpud never ran a layer without {stage}: the outage path was not tested")
            same = all(i in got and got[i] == base[i] for i in base)
            print(f"{tag} under 4 requests: tokens and logits {'bitwise identical' if same else 'DIFFERENT'} "
                  f"({fb} layers without {stage})")

    # 4. batched = alone
    stop()
    BATCH_PROMPTS = ["ROMEO:", "JULIET:\nO Romeo, Romeo", "First Citizen:\nWe are accounted poor citizens",
                     "Q: What is", "KING RICHARD III:\nNow is the winter of our discontent\nMade glorious",
                     "A", "To be, or not to be, that is the question:", "MENENIUS:\nWhat work's, my countrymen"]
    LENS = [40, 64, 24, 80, 32, 56, 48, 72]

    def bcmd(i, tag):
        js, lg = os.path.join(tmp, tag + ".json"), os.path.join(tmp, tag + ".bin")
        samp = ["--temp", "0"] if i % 2 == 0 else ["--temp", "1", "--seed", str(100 + i)]
        return [pictl, "generate", "--name", name, "-p", BATCH_PROMPTS[i], "-n", str(LENS[i]), "--ignore-eos",
                *samp, "--json-stats", js, "--dump-logits", lg]

    def batch_round(tag, queued_first):
        """The 8 requests; with queued_first, they are sent while 4 long requests hold the 4 sequences,
        which are cancelled once pictl status shows a queue (or after 10 s: on a fast GPU a holder can
        reach the context's end first), so the queue no longer depends on the backend's speed (on the
        GPU the first four requests used to finish before the last four had started). Then 4 start
        together and the others join as they end."""
        procs, holders, seen_queue = {}, [], 0
        if queued_first:
            hold = [pictl, "generate", "--name", name, "-p", "HOLD", "-n", "100000", "--ignore-eos", "--temp", "0"]
            holders = [subprocess.Popen(hold, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(4)]
            end = time.time() + 60
            while time.time() < end:  # every sequence decoding a holder
                st = status()
                if st and sum(sl["state"] == "decoding" for sl in st["slots"]) == 4:
                    break
                time.sleep(0.01)
        for i in range(8):
            procs[i] = subprocess.Popen(bcmd(i, f"{tag}-{i}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if holders:
            end = time.time() + 10
            while time.time() < end and not seen_queue:
                st = status()
                seen_queue = max(seen_queue, st["queued"] if st else 0)
                time.sleep(0.01)
            for h in holders:
                h.send_signal(signal.SIGINT)
            for h in holders:
                h.communicate(timeout=60)
        out = {}
        while any(p.poll() is None for p in procs.values()):
            st = status()
            if st:
                seen_queue = max(seen_queue, st["queued"])
            time.sleep(0.01)
        for i, p in procs.items():
            _, err = p.communicate(timeout=600)
            if check(p.returncode == 0, f"{tag} request {i}: exited {p.returncode}: {err[-300:]!r}"):
                out[i] = result(f"{tag}-{i}")
                with open(os.path.join(tmp, f"{tag}-{i}.json")) as f:
                    seen_queue = max(seen_queue, json.load(f).get("queued_steps", 0))
        return out, seen_queue

    for model, kind in ((dense_model, "dense"), (cal, "sparse")):
        if not start(model, "--parallel", "1"):
            continue
        alone, _ = batch_round(f"alone-{kind}", False)
        stop()
        if not start(model, "--parallel", "4"):
            continue
        st = status()
        check(st["parallel"] == 4 and len(st["slots"]) == 4, f"{kind}: status shows {st.get('parallel')} slots")
        batched, queued = batch_round(f"batched-{kind}", True)
        check(queued > 0, f"{kind}: 8 requests on 4 sequences never queued (pictl status and every request's queued_steps)")
        for i in alone:
            if i in batched:
                check(batched[i][0] == alone[i][0], f"{kind} request {i}: batched tokens differ from alone")
                check(batched[i][1] == alone[i][1], f"{kind} request {i}: batched logits differ from alone")
        same = all(i in batched and batched[i] == alone[i] for i in alone)
        print(f"{kind}: 8 requests batched on 4 sequences {'= alone, bitwise' if same else 'DIFFER from alone'} "
              f"(queue seen: {queued})")

        # cancel: a client interrupted (SIGINT) and a client killed free their slots; others go on
        long = [pictl, "generate", "--name", name, "-p", "ROMEO:", "-n", "100000", "--ignore-eos", "--temp", "0"]
        a = subprocess.Popen(long, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        b = subprocess.Popen(long, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ok = subprocess.Popen(bcmd(0, f"cancel-{kind}-0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for p in (a, b):
            p.stdout.read(8)
        a.send_signal(signal.SIGINT)
        b.kill()
        a.communicate(timeout=60)
        b.communicate(timeout=60)
        _, err = ok.communicate(timeout=600)
        if check(ok.returncode == 0, f"{kind}: request beside the cancelled ones failed: {err[-300:]!r}"):
            check(result(f"cancel-{kind}-0") == alone[0], f"{kind}: request beside the cancelled ones differs")
        end = time.time() + 10
        while time.time() < end and status()["requests"]:
            time.sleep(0.05)
        left = status()["requests"]
        check(not left, f"{kind}: cancelled requests still hold slots: {left}")

        # more clients than request slots (16): the rest wait in the supervisor's queue, in order
        if kind == "dense":
            many = [subprocess.Popen([pictl, "generate", "--name", name, "-p", "ROMEO:", "-n", "12", "--temp", "0",
                                      "--ignore-eos", "--json-stats", os.path.join(tmp, f"many-{k}.json")],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE) for k in range(24)]
            toks = []
            for k, p in enumerate(many):
                _, err = p.communicate(timeout=600)
                if check(p.returncode == 0, f"client {k} of 24 on 16 slots failed: {err[-200:]!r}"):
                    with open(os.path.join(tmp, f"many-{k}.json")) as f:
                        toks.append(json.load(f)["tokens"])
            check(len(set(map(tuple, toks))) == 1, "24 identical greedy requests gave different tokens")
            print(f"24 clients on 16 request slots: all served, identical ({len(toks)})")
        stop()
finally:
    stop()
    shutil.rmtree(tmp, ignore_errors=True)
print(f"invariance: {checks} checks, {failures} failed", file=sys.stderr)
sys.exit(1 if failures else 0)
