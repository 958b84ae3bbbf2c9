#!/usr/bin/env python3
"""bench_decode — decode tokens/s of the tiny reference model (tiny-relu-llama) per weight type and
thread count, through `pictl run --inproc --json-stats`. One run per case, one JSON line per case.

  bench/bench_decode.py [--build DIR] [-n TOKENS] [--types f32,f16,q8_0,q4_0] [--threads 1,2]
                        [--pipeline]

The GGUFs are the build's tests/tiny-relu-llama-TYPE.gguf (converted at build time); a missing one is
converted from ../shared/models/tiny-relu-llama into a temporary directory. --pipeline also runs each
case through the multi-process pipeline (`pictl run` without --inproc)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT = "Once upon a time, in a small village by the sea, there lived"


def find_build(arg):
    if arg:
        return arg
    cands = [os.path.join(ROOT, d) for d in os.listdir(ROOT) if d.startswith("build")]
    cands = [d for d in cands if os.path.exists(os.path.join(d, "tools", "pictl"))]
    if not cands:
        sys.exit("bench_decode: no build directory with tools/pictl; pass --build")
    return max(cands, key=lambda d: os.path.getmtime(os.path.join(d, "tools", "pictl")))


def model_path(build, shared, typ, tmp):
    p = os.path.join(build, "tests", "tiny-relu-llama-%s.gguf" % typ)
    if os.path.exists(p):
        return p
    p = os.path.join(tmp, "tiny-relu-llama-%s.gguf" % typ)
    hf = os.path.join(shared, "models", "tiny-relu-llama")
    subprocess.run([os.path.join(build, "tools", "pictl"), "convert", hf, "-o", p, "--type", typ, "-q"], check=True)
    return p


def run_case(pictl, model, typ, threads, n, inproc, tmp):
    stats = os.path.join(tmp, "stats.json")
    cmd = [pictl, "run", "-m", model, "-p", PROMPT, "-n", str(n), "-t", str(threads), "--temp", "0",
           "--ignore-eos", "--json-stats", stats]
    if inproc:
        cmd.insert(2, "--inproc")
    t0 = time.time()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        return {"bench": "decode", "type": typ, "threads": threads, "error": r.stderr.strip()[-300:]}
    with open(stats) as f:
        s = json.load(f)
    return {
        "bench": "decode", "model": s["model"], "type": typ, "mode": "inproc" if inproc else "pipeline",
        "threads": threads, "n_prompt": s["n_prompt"], "n_gen": s["n_gen"],
        "prefill_tok_s": round(s["n_prompt"] * 1e3 / s["prefill_ms"], 1) if s["prefill_ms"] > 0 else None,
        "decode_tok_s": round(s["decode_tok_s"], 1),
        "decode_ms_per_tok": round(s["decode_ms"] / max(1, s["n_gen"]), 3),
        "wall_s": round(wall, 2),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build")
    ap.add_argument("--shared", default=os.environ.get("PINFER_SHARED", os.path.join(ROOT, "..", "shared")))
    ap.add_argument("-n", type=int, default=128, help="tokens to generate per case (default 128)")
    ap.add_argument("--types", default="f32,f16,q8_0,q4_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pipeline", action="store_true", help="also through the multi-process pipeline")
    a = ap.parse_args()
    build = find_build(a.build)
    pictl = os.path.join(build, "tools", "pictl")
    with tempfile.TemporaryDirectory(prefix="pinfer-bench-decode-") as tmp:
        for typ in a.types.split(","):
            model = model_path(build, a.shared, typ, tmp)
            for t in [int(x) for x in a.threads.split(",")]:
                for inproc in ([True, False] if a.pipeline else [True]):
                    print(json.dumps(run_case(pictl, model, typ, t, a.n, inproc, tmp)), flush=True)


if __name__ == "__main__":
    main()
