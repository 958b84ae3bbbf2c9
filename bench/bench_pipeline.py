#!/usr/bin/env python3
"""bench_pipeline — the pipeline against the in-process engine, measured side by side in one run,
and the time each stage takes from its death (SIGKILL) to serving again.

usage: bench_pipeline.py PICTL MODEL.gguf [THREADS] [GPU_FFN_SHARE] [N_TOKENS] [REPS]
Prints one JSON line per case."""
import json, os, signal, statistics, subprocess, sys, tempfile, time

pictl, model = sys.argv[1:3]
threads = sys.argv[3] if len(sys.argv) > 3 else "2"
share = sys.argv[4] if len(sys.argv) > 4 else "0.5"
n_tok = sys.argv[5] if len(sys.argv) > 5 else "256"
reps = int(sys.argv[6]) if len(sys.argv) > 6 else 5
name = f"bp{os.getpid()}"
tmp = tempfile.mkdtemp(prefix="pinfer-bench-")
prompt = "ROMEO:\nBut soft, what light through yonder window breaks?"


def run(*a, check=True):
    p = subprocess.run([pictl, *a], capture_output=True, timeout=600)
    if check and p.returncode:
        sys.exit(f"pictl {' '.join(a[:2])} failed: {p.stderr.decode()[-400:]}")
    return p


def decode_rate(args):
    js = os.path.join(tmp, "s.json")
    run(*args, "-p", prompt, "-n", n_tok, "--temp", "0", "--ignore-eos", "--json-stats", js)
    return json.load(open(js))["decode_tok_s"]


def status():
    return json.loads(run("status", "--name", name, "--json").stdout)


run("start", "-m", model, "--name", name, "-t", threads, "--gpu-ffn-share", share, "-c", "1024")
try:
    inproc, pipe = [], []
    for _ in range(reps):  # interleaved, so that machine noise hits both alike
        inproc.append(decode_rate(["run", "--inproc", "-m", model, "-t", threads, "-c", "1024"]))
        pipe.append(decode_rate(["generate", "--name", name]))
    mi, mp = statistics.median(inproc), statistics.median(pipe)
    print(json.dumps({"bench": "pipeline_decode", "model": os.path.basename(model), "threads": int(threads),
                      "gpu_ffn_share": float(share), "tokens": int(n_tok), "n": reps,
                      "inproc_tok_s": round(mi, 1), "pipeline_tok_s": round(mp, 1),
                      "ratio": round(mp / mi, 3), "unit": "tok/s"}))
    for stage in ("loaderd", "predictord", "cpud", "gpud"):
        times = []
        for _ in range(3):
            pid = status()["stages"][stage]["pid"]
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            while True:
                s = status()["stages"][stage]
                if s["pid"] not in (0, pid) and s["state"] == "ready":
                    break
                time.sleep(0.002)
            times.append((time.monotonic() - t0) * 1e3)
            time.sleep(0.3)  # past the supervisor's fast-restart window
        print(json.dumps({"bench": "stage_restart", "stage": stage, "n": len(times),
                          "median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1),
                          "unit": "ms (SIGKILL to READY again)"}))
finally:
    run("stop", "--name", name, check=False)
