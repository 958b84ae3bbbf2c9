#!/usr/bin/env python3
"""bench_sparse — sparse vs dense decode of a 7B-shaped synthetic model on the CPU, in one run, next to
the bytes-over-bandwidth floor of each.

  bench/bench_sparse.py [--build DIR] [--shape llama-7b] [--type q4_0] [-n 16] [-t 2] [--dir /tmp]
                        [--rank 1024] [--pred-type f16] [--reps 3] [--keep] [--pipeline]

Steps (one JSON line each):
  1. pictl synth: a dense file and its --pwri twin (same seed: the same weights; the twin adds
     ffn_down_t and exact predictors), sparsity 0.9, hottest 30 % of neurons carrying ~80 %.
  2. DRAM read bandwidth: bench_gemv's STREAM-like read (the better of plain and prefetched).
  3. pictl synth --measure: active and predicted fraction, predictor recall, bytes per decode step
     (dense: every weight but the embedding; sparse: attention, output, predictors and the predicted
     neurons' gate/up/down rows).
  4. decode, `pictl run --inproc`: dense = the plain file; sparse = the --pwri file in `pictl run`'s
     sparse mode (the default for PowerInfer files; reported as pending where there is none);
     pwri-dense = the --pwri file with --dense (every neuron, through ffn_down_t). Each against its
     floor (bytes per token / read bandwidth); the [perf] line tells whether the FFN ran sparse.
     --pipeline adds pipe-dense and pipe-sparse: the same files through `pictl run`'s ephemeral
     pipeline instance (gpud's CPU backend, cpud, predictord, loaderd), and their ratio to in-process.
The models are written under --dir and deleted at the end unless --keep."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT = "The synthetic model reads every weight it must and no more"
SEED = 1
GIB = 1024.0 ** 3


def emit(d):
    print(json.dumps(d), flush=True)


def find_build(arg):
    if arg:
        return arg
    cands = [os.path.join(ROOT, d) for d in os.listdir(ROOT) if d.startswith("build")]
    cands = [d for d in cands if os.path.exists(os.path.join(d, "tools", "pictl"))]
    if not cands:
        sys.exit("bench_sparse: no build directory with tools/pictl; pass --build")
    return max(cands, key=lambda d: os.path.getmtime(os.path.join(d, "tools", "pictl")))


def read_bandwidth(build, threads):
    """GB/s (1e9 bytes/s): the better of bench_gemv's read and read_prefetch."""
    exe = os.path.join(build, "bench", "bench_gemv")
    if not os.path.exists(exe):
        return None
    r = subprocess.run([exe, "-t", str(threads), "-n", "3", "-T", "q4_0"], capture_output=True, text=True)
    best = None
    for line in r.stdout.splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if j.get("bench") == "stream" and j.get("op", "").startswith("read"):
            best = max(best or 0.0, j["gbps"])
    return best


def sparse_flags(pictl):
    """Flags for `pictl run` that give (sparse, dense) on a PowerInfer file, or None if it has no
    sparse mode: either sparse is the default there and --dense turns it off, or --sparse turns it on."""
    h = subprocess.run([pictl, "run", "--help"], capture_output=True, text=True)
    text = h.stdout + h.stderr
    if re.search(r"--dense\b", text):
        return [], ["--dense"]
    if re.search(r"--sparse\b", text):
        return ["--sparse"], []
    return None


def decode(pictl, model, n, threads, extra, tmp, inproc=True):
    stats = os.path.join(tmp, "stats.json")
    cmd = [pictl, "run"] + (["--inproc"] if inproc else []) + ["-m", model, "-p", PROMPT, "-n", str(n), "-t", str(threads), "--temp", "0",
           "--ignore-eos", "-c", "256", "--json-stats", stats] + extra
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-400:]}
    with open(stats) as f:
        s = json.load(f)
    perf = [l for l in r.stderr.splitlines() if l.startswith("[perf]")]
    s["sparse_ffn"] = bool(perf and ", sparse" in perf[-1]) # the [perf] line says when the FFN ran sparse
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build")
    ap.add_argument("--shape", default="llama-7b")
    ap.add_argument("--type", default="q4_0")
    ap.add_argument("-n", type=int, default=16, help="tokens to decode (default 16)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--measure-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3, help="decode rounds over all modes (median reported)")
    ap.add_argument("--rank", type=int, default=1024, help="predictor rank (default 1024, as PowerInfer's 7B)")
    ap.add_argument("--pred-type", default="f16", help="predictor weight type (default f16, as PowerInfer's)")
    ap.add_argument("--dir", default="/tmp", help="where the models are written (default /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the models")
    ap.add_argument("--pipeline", action="store_true", help="also the pipeline (pictl run without --inproc)")
    a = ap.parse_args()
    build = find_build(a.build)
    pictl = os.path.join(build, "tools", "pictl")
    work = tempfile.mkdtemp(prefix="pinfer-bench-sparse-", dir=a.dir)
    dense = os.path.join(work, "synth-%s-%s.gguf" % (a.shape, a.type))
    pwri = os.path.join(work, "synth-%s-%s-pwri.gguf" % (a.shape, a.type))
    synth_extra = ["--rank", str(a.rank), "--pred-type", a.pred_type]
    try:
        for path, extra in ((dense, synth_extra), (pwri, synth_extra + ["--pwri"])):
            t0 = time.time()
            subprocess.run([pictl, "synth", "--shape", a.shape, "--type", a.type, "--seed", str(SEED), "-t",
                            str(a.threads), "-q", "-o", path] + extra, check=True)
            emit({"bench": "sparse", "step": "synth", "file": os.path.basename(path),
                  "gib": round(os.path.getsize(path) / GIB, 3), "seconds": round(time.time() - t0, 1)})

        bw = read_bandwidth(build, a.threads)
        emit({"bench": "sparse", "step": "bandwidth", "threads": a.threads, "read_gbps": bw})

        m = subprocess.run([pictl, "synth", "--measure", dense, "--predictor", pwri, "--tokens",
                            str(a.measure_tokens), "-t", str(a.threads)], capture_output=True, text=True, check=True)
        st = json.loads(m.stdout)
        emit({"bench": "sparse", "step": "measure", "n_tokens": st["n_tokens"], "n_ff": st["n_ff"],
              "active_frac": st["active_frac_mean"], "predicted_frac": st["predicted_frac"],
              "recall": st["recall"], "hot_share": st["hot_share_mean"],
              "dense_bytes": st["dense_bytes"], "sparse_bytes": st["sparse_bytes"], "ffn_bytes": st["ffn_bytes"],
              "pred_bytes": st["pred_bytes"]})
        # --dense on the PowerInfer file computes every neuron, but its down_t AXPY skips the rows of
        # inactive neurons: a third of the FFN bytes (down) shrinks to the active fraction.
        pwri_dense_bytes = st["dense_bytes"] - (1.0 - st["active_frac_mean"]) * st["ffn_bytes"] / 3.0

        flags = sparse_flags(pictl)
        cases = [("dense", dense, [], st["dense_bytes"])]
        if flags:
            # the same PowerInfer file both ways: sparse, and dense through its ffn_down_t
            cases += [("sparse", pwri, flags[0], st["sparse_bytes"]), ("pwri-dense", pwri, flags[1], pwri_dense_bytes)]
        if a.pipeline:
            cases += [("pipe-dense", dense, [], st["dense_bytes"])]
            if flags:
                cases += [("pipe-sparse", pwri, flags[0], st["sparse_bytes"])]
        # Rounds interleave the modes, so that the shared machine's load drifts over all of them alike;
        # each mode's line reports the median round.
        runs = {name: [] for name, _, _, _ in cases}
        for _ in range(a.reps):
            for name, path, extra, _ in cases:
                runs[name].append(decode(pictl, path, a.n, a.threads, extra, work, not name.startswith("pipe-")))
        res = {}
        for name, path, extra, nbytes in cases:
            ok = sorted((s for s in runs[name] if "error" not in s), key=lambda s: s["decode_tok_s"])
            floor_ms = nbytes / (bw * 1e9) * 1e3 if bw else None
            line = {"bench": "sparse", "step": "decode", "mode": name, "type": a.type, "shape": a.shape,
                    "threads": a.threads, "rank": a.rank, "pred_type": a.pred_type, "bytes_per_tok": round(nbytes),
                    "floor_ms_per_tok": round(floor_ms, 1) if floor_ms else None,
                    "floor_tok_s": round(1e3 / floor_ms, 2) if floor_ms else None}
            if not ok:
                line["error"] = runs[name][0]["error"]
            else:
                s = ok[len(ok) // 2]
                ms = s["decode_ms"] / max(1, s["n_gen"])
                sparse = s["sparse_ffn"]
                line.update({"sparse_ffn": sparse, "n_gen": s["n_gen"], "reps": len(ok),
                             "decode_tok_s": round(s["decode_tok_s"], 2),
                             "all_tok_s": [round(x["decode_tok_s"], 2) for x in ok],
                             "ms_per_tok": round(ms, 1),
                             "of_floor": round(floor_ms / ms, 2) if floor_ms else None,
                             "neurons_per_tok": round((st["predicted_frac"] if sparse else 1.0) * st["n_ff"]),
                             "neurons_total": st["n_ff"]})
                res[name] = s["decode_tok_s"]
            emit(line)
        for mode in ("dense", "sparse"):
            if mode in res and "pipe-" + mode in res:
                emit({"bench": "sparse", "step": "pipeline_ratio", "mode": mode,
                      "pipeline_over_inproc": round(res["pipe-" + mode] / res[mode], 3)})
        if not flags:
            emit({"bench": "sparse", "step": "decode", "mode": "sparse",
                  "pending": "pictl run has no sparse mode yet"})
        elif "dense" in res and "sparse" in res:
            emit({"bench": "sparse", "step": "speedup", "sparse_over_dense": round(res["sparse"] / res["dense"], 2),
                  "floor_ratio": round(st["dense_bytes"] / st["sparse_bytes"], 2)})
    finally:
        if not a.keep:
            for p in (dense, pwri):
                if os.path.exists(p):
                    os.unlink(p)
            for f in os.listdir(work):
                os.unlink(os.path.join(work, f))
            os.rmdir(work)


if __name__ == "__main__":
    main()
