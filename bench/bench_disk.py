"""bench_disk — the disk tier on a synthetic 7B (issue 12): decode tok/s, disk bytes per token, cache
hit rate and the random-read floor for --ram-budget at fractions of the FFN, against the all-in-RAM
run and an mmap run of the same file under the same memory limit. One JSON line per case.

The memory limit is a cgroup (v1 memory.limit_in_bytes, or v2 memory.max) that each limited run is
started in; the model's pages are dropped from the page cache before each run (posix_fadvise
DONTNEED on the file), so that the run faults them in, charged to its cgroup.

With --pipeline, the same budgets also run in the pipeline (pictl start --ram-budget: loaderd streams
the disk tier into cpud's cache in shared memory; the supervisor allocates the weights segment
without the FFN rows), under the same cgroup limit: `pictl start` is started in the cgroup, so the
supervisor, every stage and the shared memory they allocate are charged to it (the generate client
is not): decode tok/s, the counters of pictl status (bytes/token, hit rate, waits, fallback reads),
the weights segment's resident bytes and the cgroup's peak.

usage: bench_disk.py PICTL MODEL.pwri.gguf [--fractions 0.25,0.5] [-n N] [-t T] [--slack-gib G] [--pipeline]
                     [--skip-inproc]"""
import argparse, json, os, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("pictl")
ap.add_argument("model")
ap.add_argument("--fractions", default="0.25,0.5")
ap.add_argument("-n", type=int, default=24)
ap.add_argument("-t", type=int, default=2)
ap.add_argument("--slack-gib", type=float, default=0.5, help="KV cache, scratch, the process: above the budget")
ap.add_argument("--mmap-timeout", type=int, default=900)
ap.add_argument("--pipeline", action="store_true", help="also run each budget in the pipeline (same cgroup limit)")
ap.add_argument("--skip-inproc", action="store_true", help="only the all-in-RAM reference and the pipeline runs")
a = ap.parse_args()
GIB = 2**30
tmp = tempfile.mkdtemp(prefix="pinfer-bdisk-")


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd) if False else None
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def cgroup(limit):
    """a memory cgroup limited to `limit` bytes: (path of its procs file, how)"""
    v1 = "/sys/fs/cgroup/memory"
    v2 = "/sys/fs/cgroup/unified" if os.path.exists("/sys/fs/cgroup/unified/cgroup.procs") else "/sys/fs/cgroup"
    if os.path.exists(v1 + "/memory.limit_in_bytes"):
        d = f"{v1}/pinfer-bdisk-{os.getpid()}"
        os.makedirs(d, exist_ok=True)
        with open(d + "/memory.limit_in_bytes", "w") as f:
            f.write(str(int(limit)))
        return d, f"cgroup v1 {d} memory.limit_in_bytes={int(limit)}"
    d = f"{v2}/pinfer-bdisk-{os.getpid()}"
    os.makedirs(d, exist_ok=True)
    with open(d + "/memory.max", "w") as f:
        f.write(str(int(limit)))
    return d, f"cgroup v2 {d} memory.max={int(limit)}"


def peak(d):
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        if os.path.exists(f"{d}/{name}"):
            with open(f"{d}/{name}") as f:
                return int(f.read())
    return 0


def run(tag, extra, limit=None, timeout=900):
    js = os.path.join(tmp, tag + ".json")
    cmd = [a.pictl, "run", "--inproc", "-m", a.model, "-p", "Once upon a time", "-n", str(a.n), "--ignore-eos",
           "--temp", "0", "-t", str(a.t), "-c", "256", "--json-stats", js, *extra]
    how, d = "none", None
    drop_cache(a.model)
    if limit:
        d, how = cgroup(limit)
        procs = d + "/cgroup.procs"
        cmd = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *cmd]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout)
        rc, err = p.returncode, p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, err = 124, f"timed out after {timeout} s"
    wall = time.time() - t0
    row = {"case": tag, "limit": how, "wall_s": round(wall, 1), "rc": rc}
    if d:
        row["peak_bytes"] = peak(d)
        try:
            os.rmdir(d)
        except OSError:
            pass
    if rc == 0:
        st = json.load(open(js))
        row.update({"decode_tok_s": st["decode_tok_s"], "prefill_ms": st["prefill_ms"], "tokens": st["tokens"]})
        if "disk" in st:
            dk = st["disk"]
            row.update({k: dk.get(k) for k in ("budget_bytes", "dense_bytes", "cache_bytes", "ram_bytes", "disk_bytes",
                                           "ram_share", "by_freq", "bytes_read_per_token", "hit_rate", "misses",
                                           "prefetched", "disk_wait_ms_per_token", "prefetch_ms_per_token",
                                           "floor_mib_s", "floor_ms_per_token", "reader")})
    else:
        row["error"] = err[-300:]
    print(json.dumps(row), flush=True)
    return row


ram = run("all-in-RAM", [])
p = subprocess.run([a.pictl, "run", "--inproc", "-m", a.model, "-p", "x", "-n", "1", "--ram-budget", "0"],
                   capture_output=True)
# "... below what is always resident: D GiB dense weights + C GiB neuron cache"
msg = p.stderr.decode()
dense = float(msg.split("resident: ")[1].split(" GiB")[0])
cache = float(msg.split("+ ")[1].split(" GiB")[0])
hdr = open(a.model + ".ffnbundle", "rb").read(4096)
import struct
n_layer, n_ff = struct.unpack_from("<II", hdr, 8)
stride = struct.unpack_from("<Q", hdr, 64)[0]
ffn = n_layer * n_ff * stride / GIB


def pipeline(tag, budget, limit):
    name = f"bdisk{os.getpid()}"
    js = os.path.join(tmp, tag.replace(" ", "_") + ".json")
    d, how = cgroup(limit)
    row = {"case": tag, "limit": how}
    drop_cache(a.model)
    t0 = time.time()
    cmd = [a.pictl, "start", "-m", a.model, "--name", name, "-t", str(a.t), "-c", "256", "--ram-budget",
           f"{budget:.4f}"]
    p = subprocess.run(["sh", "-c", f'echo $$ > {d}/cgroup.procs && exec "$@"', "sh", *cmd], capture_output=True,
                       timeout=900)
    row["start_s"] = round(time.time() - t0, 1)
    try:
        if p.returncode:
            row.update({"rc": p.returncode, "error": p.stderr.decode(errors="replace")[-300:]})
            return row
        p = subprocess.run([a.pictl, "generate", "--name", name, "-p", "Once upon a time", "-n", str(a.n),
                            "--ignore-eos", "--temp", "0", "--json-stats", js], capture_output=True, timeout=1800)
        row["rc"] = p.returncode
        if p.returncode:
            row["error"] = p.stderr.decode(errors="replace")[-300:]
            return row
        st = json.load(open(js))
        row.update({"decode_tok_s": st["decode_tok_s"], "prefill_ms": st["prefill_ms"], "tokens": st["tokens"]})
        dk = st.get("disk", {})
        row.update({k: dk.get(k) for k in ("reader", "bytes_per_token", "hit_rate", "misses", "prefetched", "reads",
                                           "wait_ms_per_token", "fallback_reads", "loaderd_reads", "prefill_tokens",
                                           "prefill_bytes", "prefill_reads", "prefill_ms", "pinned_bytes",
                                           "cache_bytes", "weights_segment_bytes", "weights_resident_bytes",
                                           "weights_trimmed_bytes", "segment_bytes")})
        return row
    finally:
        row["peak_bytes"] = peak(d)
        subprocess.run([a.pictl, "stop", "--name", name], capture_output=True, timeout=120)
        time.sleep(1)
        try:
            os.rmdir(d)
        except OSError:
            pass
        print(json.dumps(row), flush=True)


for frac in [float(x) for x in a.fractions.split(",")]:
    budget = dense + cache + frac * ffn
    limit = (budget + a.slack_gib) * GIB
    if not a.skip_inproc:
        r = run(f"ram-budget {frac:.0%} of FFN", ["--ram-budget", f"{budget:.4f}", "--disk-floor"], limit)
        run(f"mmap, same limit as {frac:.0%}", ["--mmap"], limit, timeout=a.mmap_timeout)
    if a.pipeline:
        pipeline(f"pipeline ram-budget {frac:.0%} of FFN", budget, limit)
