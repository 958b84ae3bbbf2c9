#!/usr/bin/env python3
"""test_supervisor — the lifecycle of pipeline instances, driven through pictl as a user would:
start/status/stop with nothing left behind, fast and clean failures (missing, truncated and
corrupt models, a loader read error), a refused second start, two instances side by side, private
segments and directories, restarts on request, after kill -9 and after a hang (SIGSTOP), an
ephemeral `pictl run` whose owner is killed, and a supervisor that survives malformed commands
sent as raw nanomsg REQ frames.

usage: test_supervisor.py PICTL MODEL.gguf BUILD_DIR [--cuda-no-device]
The stages are found next to pictl's build tree (or $PINFER_STAGE_DIR).

--cuda-no-device (a build with the CUDA backend; the 'cuda' suite) runs only what such a build does
where it finds no device (CUDA_VISIBLE_DEVICES="" makes that so on any machine): `--backend cuda`
fails at once naming the reason, in process and in the pipeline, and `auto` runs on the CPU and says
why; and, where there is a device, a model that does not fit it fails at once with what it needs."""
import json, os, shutil, signal, socket, struct, subprocess, sys, tempfile, time

pictl, model, build = sys.argv[1:4]
only_cuda_no_device = sys.argv[4:5] == ["--cuda-no-device"]
uid = os.geteuid()
tag = f"sv{os.getpid()}"
failures = 0
checks = 0
START_FAIL_LIMIT_S = 5.0


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def run(*args, timeout=120, env=None):
    return subprocess.run([pictl, *args], capture_output=True, timeout=timeout, env=env)


def runtime_dir(name):
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(xdg, "pinfer", name) if xdg else f"/tmp/pinfer-{uid}/{name}"


def segments(name):
    prefix = f"pinfer-{uid}-{name}-"
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefix))


def stage_pids(name):
    p = subprocess.run(["pgrep", "-f", "--", f"--instance {name}$"], capture_output=True)
    return [int(x) for x in p.stdout.split()]


def status(name, dead_ok=False):
    """The instance's status, None when it has none (or, unless dead_ok, when it is dead: exit 1)."""
    p = run("status", "--name", name, "--json")
    if p.returncode != 0 and not (dead_ok and p.returncode == 1 and p.stdout.strip()):
        return None
    return json.loads(p.stdout)


def wait_for(pred, timeout, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def cleanup(name):
    """Whatever happened, leave nothing of this instance behind."""
    run("stop", "--name", name, timeout=60)
    for pid in stage_pids(name):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for seg in segments(name):
        os.unlink(os.path.join("/dev/shm", seg))
    shutil.rmtree(runtime_dir(name), ignore_errors=True)


def start(name, *extra, m=None, env=None):
    p = run("start", "-m", m or model, "--name", name, "-t", "1", "-c", "256", *extra, env=env)
    check(p.returncode == 0, f"{name}: start exited {p.returncode}: {p.stderr.decode(errors='replace')[:300]}")
    return p


def no_leftovers(name, what):
    check(segments(name) == [], f"{what}: segments left: {segments(name)}")
    check(wait_for(lambda: stage_pids(name) == [], 5), f"{what}: stage processes left: {stage_pids(name)}")
    d = runtime_dir(name)
    left = [f for f in os.listdir(d) if f != "logs"] if os.path.isdir(d) else []
    check(left == [], f"{what}: runtime files left in {d}: {left}")


tests = []


def test(fn):
    tests.append(fn)
    return fn


@test
def start_ctx_from_model():
    """-c 0: the instance's context is the model's trained one (llama.cpp's -c 0), 1 024 for the tiny model"""
    name = f"{tag}_c0"
    try:
        start(name, "-c", "0")
        st = status(name)
        want = 1024 if "tiny" in os.path.basename(model) else None
        check(st is not None and st["ctx"] > 8 and (want is None or st["ctx"] == want),
              f"start -c 0: ctx {st and st['ctx']}, want the model's ({want})")
    finally:
        cleanup(name)


@test
def start_status_stop():
    name = f"{tag}_a"
    try:
        p = start(name)
        check(b"serving" in p.stdout, f"start summary: {p.stdout!r}")
        st = status(name)
        if not check(st is not None, "status --json after start"):
            return
        check(st["state"] == "serving", f"state {st['state']}")
        check(st["model"] == os.path.realpath(model), f"model {st['model']}")
        check(st["supervisor_alive"] and st["supervisor_pid"] > 0, "supervisor pid alive")
        check(st["ctx"] == 256 and st["threads"] == 1, "ctx/threads from the flags")
        for s in ("loaderd", "predictord", "cpud", "gpud"):
            check(st["stages"][s]["state"] == "ready" and st["stages"][s]["pid"] > 0, f"{s}: {st['stages'][s]}")
        check(st["load"]["total_bytes"] == os.path.getsize(model), "load total = file size")
        check(len(segments(name)) == 3, f"segments {segments(name)}")
        check(sorted(stage_pids(name)) == sorted(st["stages"][s]["pid"] for s in st["stages"]),
              "stage processes are the ones status lists")
        d = runtime_dir(name)
        check(os.stat(d).st_mode & 0o777 == 0o700, "runtime dir mode 0700")
        check(os.path.exists(os.path.join(d, "ctl.ipc")) and os.path.exists(os.path.join(d, "supervisor.pid")),
              "ctl.ipc and supervisor.pid exist while running")
        for seg in segments(name):
            check(os.stat(os.path.join("/dev/shm", seg)).st_mode & 0o777 == 0o600, f"{seg} mode 0600")
        txt = run("status", "--name", name).stdout.decode()
        check("# Stages" in txt and "\ngpud:pid=" in txt and "state=ready" in txt, f"plain status: {txt[:200]!r}")
        # a completion through the instance equals the in-process one
        g = run("generate", "--name", name, "-p", "ROMEO:", "-n", "24", "--temp", "0")
        r = run("run", "--inproc", "-m", model, "-p", "ROMEO:", "-n", "24", "--temp", "0", "-c", "256", "-t", "1")
        check(g.returncode == 0 and g.stdout == r.stdout, f"generate {g.stdout[:60]!r} != inproc {r.stdout[:60]!r}")
        check(b"[perf]" in g.stderr, "generate prints [perf]")
        check(status(name)["requests"] == [], "the slot is released after generate")
        prof = json.loads(run("profile", "--name", name, "--json").stdout)
        check(prof["gpud"]["items"] > 0, "profile counts gpud items")
        trace = os.path.join(tempfile.mkdtemp(prefix="pinfer-sv-"), "t.json")
        check(run("profile", "--name", name, "--trace", trace).returncode == 0, "profile --trace")
        ev = json.load(open(trace))["traceEvents"]
        check(any(e["ph"] == "X" for e in ev) and any(e["ph"] == "M" for e in ev), "trace has X and M events")
        logs = run("logs", "gpud", "--name", name)
        check(logs.returncode == 0 and b"starting gpud" in logs.stdout, f"logs gpud: {logs.stdout[:200]!r}")
        t0 = time.time()
        p = run("stop", "--name", name)
        check(p.returncode == 0, f"stop exited {p.returncode}: {p.stderr!r}")
        check(time.time() - t0 < 10, "stop within 10 s")
        no_leftovers(name, "after stop")
        check(os.path.isdir(os.path.join(runtime_dir(name), "logs")), "logs survive the stop")
        check(run("status", "--name", name).returncode != 0, "status of a stopped instance fails")
        check(run("stop", "--name", name).returncode != 0, "stop of a stopped instance fails")
    finally:
        cleanup(name)


@test
def bad_models_fail_fast():
    tmp = tempfile.mkdtemp(prefix="pinfer-sv-")
    trunc, bad = os.path.join(tmp, "trunc.gguf"), os.path.join(tmp, "bad.gguf")
    with open(model, "rb") as f, open(trunc, "wb") as g:
        g.write(f.read(100000))
    with open(bad, "wb") as g:
        g.write(b"NOTAGGUF" + b"\0" * 64)
    cases = [(os.path.join(tmp, "missing.gguf"), "missing.gguf", None), (trunc, "truncated", None),
             (bad, "magic", None), (model, "input/output error", {"PINFER_LOADER_FAIL_READ": "1"})]
    for i, (path, needle, extra_env) in enumerate(cases):
        name = f"{tag}_bad{i}"
        try:
            env = dict(os.environ, **(extra_env or {}))
            t0 = time.time()
            p = run("start", "-m", path, "--name", name, env=env)
            dt = time.time() - t0
            err = p.stderr.decode(errors="replace")
            check(p.returncode == 1, f"{needle}: start exited {p.returncode}")
            check(dt < START_FAIL_LIMIT_S, f"{needle}: start took {dt:.1f} s to fail")
            check(needle in err.lower(), f"{needle}: stderr {err.strip()[:200]!r}")
            check(stage_pids(name) == [], f"{needle}: processes left: {stage_pids(name)}")
            no_leftovers(name, needle)
        finally:
            cleanup(name)


@test
def second_start_refused_and_side_by_side():
    a, b = f"{tag}_x", f"{tag}_y"
    tmp = tempfile.mkdtemp(prefix="pinfer-sv-")
    model2 = os.path.join(tmp, "copy.gguf")
    shutil.copy(model, model2)
    try:
        start(a)
        p = run("start", "-m", model, "--name", a)
        check(p.returncode != 0 and b"already running" in p.stderr, f"second start: {p.returncode} {p.stderr!r}")
        check(status(a)["state"] == "serving", "the first instance still serves")
        start(b, m=model2)
        sa, sb = status(a), status(b)
        check(sa["model"] == os.path.realpath(model) and sb["model"] == os.path.realpath(model2),
              f"models {sa['model']} / {sb['model']}")
        check(sa["supervisor_pid"] != sb["supervisor_pid"], "each has its own supervisor")
        pa = {s["pid"] for s in sa["stages"].values()}
        pb = {s["pid"] for s in sb["stages"].values()}
        check(not (pa & pb), "each has its own stages")
        check(run("stop", "--name", a).returncode == 0, "stop a")
        check(status(b)["state"] == "serving", "b serves after a stopped")
        check(run("stop", "--name", b).returncode == 0, "stop b")
        no_leftovers(a, "a")
        no_leftovers(b, "b")
    finally:
        cleanup(a)
        cleanup(b)


@test
def other_user_cannot_attach():
    if uid != 0:
        print("skip: other_user_cannot_attach needs root (setuid)", file=sys.stderr)
        return
    name = f"{tag}_u"
    try:
        start(name)
        seg = f"/dev/shm/pinfer-0-{name}-ctl"
        sock = os.path.join(runtime_dir(name), "ctl.ipc")
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.setgid(65534)
                os.setuid(65534)
                for path in (seg, sock):
                    try:
                        if path == sock:
                            socket.socket(socket.AF_UNIX).connect(path)
                        else:
                            open(path, "rb")
                        code = 1
                    except PermissionError:
                        pass
            except Exception:
                code = 2
            os._exit(code)
        _, st = os.waitpid(pid, 0)
        check(os.WEXITSTATUS(st) == 0, f"uid 65534 opened the segment or the socket (child exit {os.WEXITSTATUS(st)})")
    finally:
        cleanup(name)


def stage_info(name, stage):
    st = status(name)
    return st["stages"][stage] if st else {}


def ready_again(name, stage, old_pid, old_restarts):
    def pred():
        s = stage_info(name, stage)
        return s.get("state") == "ready" and s.get("pid") not in (0, old_pid) and s.get("restarts", 0) > old_restarts
    return pred


@test
def restarts():
    name = f"{tag}_r"
    try:
        start(name)
        s0 = stage_info(name, "cpud")
        p = run("restart", "cpud", "--name", name)
        check(p.returncode == 0, f"restart cpud: {p.stderr!r}")
        s1 = stage_info(name, "cpud")
        check(s1["restarts"] == s0["restarts"] + 1 and s1["pid"] != s0["pid"] and s1["state"] == "ready",
              f"after restart cpud: {s1}")
        check(run("restart", "nosuch", "--name", name).returncode == 2, "restart of an unknown stage")
        for stage in ("gpud", "predictord"):
            s0 = stage_info(name, stage)
            os.kill(s0["pid"], signal.SIGKILL)
            check(wait_for(ready_again(name, stage, s0["pid"], s0["restarts"]), 10),
                  f"{stage} after kill -9: {stage_info(name, stage)}")
            check("signal 9" in stage_info(name, stage)["last_exit"], f"{stage} last_exit")
        # a hung stage (no heartbeat: SIGSTOP stops its heartbeat thread too) is killed and restarted
        s0 = stage_info(name, "cpud")
        os.kill(s0["pid"], signal.SIGSTOP)
        check(wait_for(ready_again(name, "cpud", s0["pid"], s0["restarts"]), 12), f"hung cpud: {stage_info(name, 'cpud')}")
        g = run("generate", "--name", name, "-p", "ROMEO:", "-n", "8", "--temp", "0")
        check(g.returncode == 0 and len(g.stdout) > 1, f"generate after the restarts: {g.stderr[-300:]!r}")
        check(status(name)["state"] == "serving", "still serving")
        check(run("stop", "--name", name).returncode == 0, "stop")
        no_leftovers(name, "restarts")
    finally:
        cleanup(name)


@test
def supervisor_killed():
    name = f"{tag}_k"
    try:
        start(name)
        st = status(name)
        dead_pid = st["supervisor_pid"]
        os.kill(dead_pid, signal.SIGKILL)
        check(wait_for(lambda: stage_pids(name) == [], 5), f"stages outlive their supervisor: {stage_pids(name)}")
        # status says so (issue 7, item 9): state dead, not the frozen "serving", and exit 1
        for args in (["--json"], []):
            p = run("status", "--name", name, *args)
            check(p.returncode == 1 and b"is dead" in p.stderr, f"status {args} of a dead instance: {p.returncode} "
                  f"{p.stderr[-200:]!r}")
            check(b"serving" not in p.stdout, f"status {args} of a dead instance says serving: {p.stdout[:200]!r}")
        st = status(name, dead_ok=True)
        check(st is not None and st["state"] == "dead" and not st["supervisor_alive"], f"status shows a dead supervisor")
        t0 = time.time()
        g = run("generate", "--name", name, "-p", "x", "-n", "2")
        check(g.returncode != 0 and b"dead" in g.stderr and time.time() - t0 < 3,
              f"generate to a dead instance: {g.returncode} {g.stderr[-200:]!r}")
        # the next start cleans up the dead instance's leftovers and serves again, naming the new
        # supervisor (it used to print the dead one's pid, left in the pid file)
        p = start(name)
        st = status(name)
        check(st is not None and st["state"] == "serving", "serving again after the supervisor was killed")
        if st is not None:
            check(st["supervisor_pid"] != dead_pid and f"supervisor pid {st['supervisor_pid']})".encode() in p.stdout,
                  f"start reports pid {p.stdout!r}, the new supervisor is {st['supervisor_pid']}, the dead {dead_pid}")
        check(run("stop", "--name", name).returncode == 0, "stop")
        no_leftovers(name, "after a killed supervisor")
    finally:
        cleanup(name)


# ---- raw nanomsg REQ over the ipc transport (SP header, then 0x01 + u64 size + request id + body) ----
SP_REQ, SP_REP = 48, 49


def sp_connect(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(path)
    s.sendall(b"\0SP\0" + struct.pack(">HH", SP_REQ, 0))
    hdr = recv_exact(s, 8)
    assert hdr[:4] == b"\0SP\0" and struct.unpack(">H", hdr[4:6])[0] == SP_REP, hdr
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def sp_request(s, body, req_id):
    s.sendall(b"\x01" + struct.pack(">Q", 4 + len(body)) + struct.pack(">I", 0x80000000 | req_id) + body)
    kind, size = struct.unpack(">BQ", recv_exact(s, 9))
    payload = recv_exact(s, size)
    return json.loads(payload[4:])


@test
def bad_commands():
    name = f"{tag}_j"
    try:
        start(name)
        s = sp_connect(os.path.join(runtime_dir(name), "ctl.ipc"))
        cases = [(b"{not json", "invalid JSON"), (b"[1,2]", "object"), (b"{}", "cmd"), (b'{"cmd":42}', "cmd"),
                 (b'{"cmd":"frob"}', "unknown command"), (b'{"cmd":"generate"}', "prompt"),
                 (b'{"cmd":"generate","prompt":"x","temp":"hot"}', "temp"),
                 (b'{"cmd":"generate","prompt":"x","temperature":1}', "unknown field"),
                 (b'{"cmd":"generate","prompt":"x","n_predict":1e99}', "n_predict"),
                 (b'{"cmd":"generate","prompt":"x","dump_logits":"rel/path"}', "absolute"),
                 (b'{"cmd":"generate","prompt":"' + b"word " * 300 + b'"}', "context"),
                 (b'{"cmd":"release","slot":99,"id":1}', "slot"), (b'{"cmd":"release","slot":0,"id":12345}', "request"),
                 (b'{"cmd":"restart","stage":"nosuch"}', "unknown stage"), (b'\xff\xfe\x00', "invalid JSON"),
                 (b'{"cmd":"status","cmd":"stop"}', "invalid JSON")]
        for i, (body, needle) in enumerate(cases):
            r = sp_request(s, body, i + 1)
            check(r.get("ok") is False and needle.lower() in r.get("error", "").lower(),
                  f"{body[:40]!r}: reply {r}")
        r = sp_request(s, b'{"cmd":"status"}', 100)
        check(r.get("ok") is True and r["status"]["state"] == "serving", f"status over the socket: {str(r)[:200]}")
        # a request slot: generate, wait for DONE, release
        r = sp_request(s, b'{"cmd":"generate","prompt":"Hi","n_predict":4,"temp":0,"seed":"18446744073709551615"}', 101)
        check(r.get("ok") is True and r.get("n_prompt", 0) > 0, f"generate over the socket: {r}")
        if r.get("ok"):
            done = wait_for(lambda: all(q["state"] in ("done", "failed") for q in status(name)["requests"]), 10)
            check(done, "request finished")
            r2 = sp_request(s, json.dumps({"cmd": "release", "slot": r["slot"], "id": r["id"]}).encode(), 102)
            check(r2.get("ok") is True, f"release: {r2}")
            check(status(name)["requests"] == [], "slot free after release")
        s.close()
        check(status(name)["supervisor_alive"], "the supervisor survived the bad commands")
    finally:
        cleanup(name)


@test
def ephemeral_run_owner_killed():
    p = subprocess.Popen([pictl, "run", "-m", model, "-p", "ROMEO:", "-n", "4000", "-c", "4096", "--temp", "0",
                          "--ignore-eos", "-t", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    name = f"run{p.pid}"
    try:
        up = wait_for(lambda: any(seg.endswith("-ctl") for seg in segments(name)) and
                      (status(name) or {}).get("state") == "serving", 30)
        check(up, "the ephemeral instance came up")
        time.sleep(0.3)
        p.kill()
        p.wait()
        gone = wait_for(lambda: segments(name) == [] and stage_pids(name) == [], 15)
        check(gone, f"ephemeral instance after its owner died: segments {segments(name)}, pids {stage_pids(name)}")
    finally:
        if p.poll() is None:
            p.kill()
        cleanup(name)
    # and a run that ends normally leaves nothing at all
    q = subprocess.run([pictl, "run", "-m", model, "-p", "Hi", "-n", "4", "--temp", "0", "-t", "1"],
                       capture_output=True, timeout=60)
    check(q.returncode == 0, f"pictl run: {q.stderr[-300:]!r}")


def cuda_no_device():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    name = f"{tag}_nodev"
    needle = "no CUDA device"
    try:
        t0 = time.time()
        p = run("start", "-m", model, "--name", name, "-t", "1", "-c", "256", "--backend", "cuda", env=env)
        dt, err = time.time() - t0, p.stderr.decode(errors="replace")
        check(p.returncode == 1, f"start --backend cuda exited {p.returncode}")
        check(dt < START_FAIL_LIMIT_S, f"start --backend cuda took {dt:.1f} s to fail (restarts of gpud?)")
        check("gpud cannot start" in err and needle in err, f"start --backend cuda: stderr {err.strip()[-300:]!r}")
        # named as a failed start, not as an I/O error (the stage's own words follow)
        check("the instance did not start: gpud cannot start" in err and "I/O error" not in err,
              f"start --backend cuda: the failure's words {err.strip()[-300:]!r}")
        no_leftovers(name, "start --backend cuda")
    finally:
        cleanup(name)
    for how in ([], ["--inproc"]):
        t0 = time.time()
        p = run("run", *how, "-m", model, "-p", "ROMEO:", "-n", "4", "--temp", "0", "--backend", "cuda", env=env)
        dt, err = time.time() - t0, p.stderr.decode(errors="replace")
        check(p.returncode != 0 and needle in err, f"run {how} --backend cuda: {p.returncode} {err.strip()[-300:]!r}")
        check(dt < START_FAIL_LIMIT_S, f"run {how} --backend cuda took {dt:.1f} s to fail")
    # auto: the CPU, and the reason on stderr; the same tokens as --backend cpu
    ref = run("run", "--inproc", "-m", model, "-p", "ROMEO:", "-n", "8", "--temp", "0", "--backend", "cpu")
    for how, who in (([], "gpud"), (["--inproc"], "pictl run")):
        p = run("run", *how, "-m", model, "-p", "ROMEO:", "-n", "8", "--temp", "0", env=env)
        err = p.stderr.decode(errors="replace")
        check(p.returncode == 0 and p.stdout == ref.stdout, f"run {how} auto: {p.returncode} {p.stdout[:60]!r}")
        check(f"{who}: running on the CPU: cuda: {needle}" in err, f"run {how} auto: stderr {err.strip()[-300:]!r}")
    try:
        start(name, env=env)
        st = status(name) or {}
        check(st.get("backend") == "cpu" and needle in st.get("backend_why", ""),
              f"status: backend {st.get('backend')!r}, backend_why {st.get('backend_why')!r}")
    finally:
        cleanup(name)


def cuda_does_not_fit():
    """On a device: a model whose arenas exceed the free memory (PINFER_CUDA_FREE_MIB=1 says there is
    1 MiB) fails the start at once with what it needs, in process and in the pipeline."""
    probe = run("run", "--inproc", "-m", model, "-p", "x", "-n", "1", "--backend", "cuda")
    if probe.returncode != 0:
        print(f"cuda_does_not_fit: SKIP (no usable device: {probe.stderr.decode(errors='replace').strip()[-120:]})",
              file=sys.stderr)
        return
    env = dict(os.environ, PINFER_CUDA_FREE_MIB="1")
    for how in ([], ["--inproc"]):
        t0 = time.time()
        p = run("run", *how, "-m", model, "-p", "ROMEO:", "-n", "4", "--backend", "cuda", env=env)
        dt, err = time.time() - t0, p.stderr.decode(errors="replace")
        check(p.returncode != 0 and "GiB free of" in err and "KV cache" in err and "-ngl" in err,
              f"run {how} on a device too small: {p.returncode} {err.strip()[-400:]!r}")
        check(dt < START_FAIL_LIMIT_S + 5, f"run {how} on a device too small took {dt:.1f} s to fail")


if only_cuda_no_device:
    probe = run("run", "--inproc", "-m", model, "-p", "x", "-n", "1", "--backend", "cuda",
                env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    if b"not built in" in probe.stderr:
        print("SKIP: pictl is built without the CUDA backend")
        sys.exit(77)
    tests = [cuda_no_device, cuda_does_not_fit]

for fn in tests:
    t0 = time.time()
    try:
        fn()
    except Exception as e:  # a crash of the test is a failure, not a skip
        import traceback
        traceback.print_exc()
        check(False, f"{fn.__name__} raised {e!r}")
    print(f"{fn.__name__}: {time.time() - t0:.1f} s", file=sys.stderr)

print(f"supervisor: {checks} checks, {failures} failed", file=sys.stderr)
sys.exit(1 if failures else 0)
