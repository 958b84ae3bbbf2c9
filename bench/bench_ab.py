#!/usr/bin/env python3
"""bench_ab — two pictl binaries side by side: single-sequence decode tok/s of `pictl run --inproc`
(or the pipeline with --pipeline) on each model, rounds interleaved (A, B, A, B, ...), one JSON line
per (model, binary) with min / median / max, and the ratio B/A of the medians.

  bench/bench_ab.py --a OLD/pictl --b NEW/pictl -m MODEL [-m MODEL ...] [--rounds 7] [-n 128] [-t 2]
                    [--pipeline] [--extra ARG ...]"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

PROMPT = "Once upon a time"
PERF = re.compile(rb"decode (\d+) tok, ([\d.]+) ms")


def decode_rate(pictl, model, args):
    cmd = [pictl, "run", "-m", model, "-p", PROMPT, "-n", str(args.n), "--temp", "0", "--ignore-eos",
           "-t", str(args.t), "-c", str(args.c)] + ([] if args.pipeline else ["--inproc"]) + args.extra
    p = subprocess.run(cmd, capture_output=True, timeout=1800)
    m = PERF.search(p.stderr)
    if p.returncode or not m:
        sys.exit(f"bench_ab: {' '.join(cmd)} failed: {p.stderr[-400:]!r}")
    n, ms = int(m.group(1)), float(m.group(2))
    return (n - 1) / (ms / 1e3) if n > 1 else 0.0  # BENCH.md: (generated - 1) / decode time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="baseline pictl")
    ap.add_argument("--b", required=True, help="candidate pictl")
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-c", type=int, default=2048)
    ap.add_argument("--pipeline", action="store_true")
    ap.add_argument("--extra", action="append", default=[])
    args = ap.parse_args()
    for model in args.model:
        rates = {"a": [], "b": []}
        for _ in range(args.rounds):
            for k in ("a", "b"):
                rates[k].append(decode_rate(getattr(args, k), model, args))
        med = {k: statistics.median(v) for k, v in rates.items()}
        for k in ("a", "b"):
            print(json.dumps({"bench": "ab_decode", "model": os.path.basename(model), "binary": getattr(args, k),
                              "side": k, "mode": "pipeline" if args.pipeline else "inproc", "threads": args.t,
                              "n": args.n, "rounds": args.rounds, "min": round(min(rates[k]), 2),
                              "median": round(med[k], 2), "max": round(max(rates[k]), 2), "unit": "tok/s"}))
        print(json.dumps({"bench": "ab_decode_ratio", "model": os.path.basename(model),
                          "b_over_a": round(med["b"] / med["a"], 3) if med["a"] else None}))


if __name__ == "__main__":
    main()
