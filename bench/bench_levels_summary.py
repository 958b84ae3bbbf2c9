#!/usr/bin/env python3
"""bench_levels_summary — the tables of one bench/bench_levels.sh run (its OUT_DIR), as markdown.

  bench/bench_levels_summary.py OUT_DIR

GEMV: GB/s and share of the read bandwidth measured in the same run, per type and kernel level.
Decode: (generated - 1) / decode time per model and level (BENCH.md's rate), each round, from the
`[perf]` line pictl prints; the tests' pass/fail per step."""
import json
import os
import re
import sys

PERF = re.compile(r"decode (\d+) tok, ([\d.]+) ms")
PREFILL = re.compile(r"prompt (\d+) tok, prefill ([\d.]+) ms")


def main():
    out = sys.argv[1]
    steps = [json.loads(line) for line in open(os.path.join(out, "steps.jsonl")) if line.strip()]
    print("machine:", open(os.path.join(out, "machine.txt")).read().replace("\n", " | "))
    print("\n| step | rc | ms |\n|---|---|---|")
    for s in steps:
        if s["step"].startswith(("test_", "backend_ops", "logits", "end")) or "skipped" in s:
            print(f"| {s['step']} | {s.get('rc', s.get('skipped', s.get('identical', '')))} | {s.get('ms', s.get('left_s', ''))} |")
    read = None
    rows = {}
    for name in ("gemv", "gemm_b16"):
        path = os.path.join(out, name + ".out")
        if not os.path.exists(path):
            continue
        for line in open(path):
            d = json.loads(line)
            if d["bench"] == "stream" and d["op"].startswith("read"):
                read = max(read or 0, d["gbps"])
            elif d["bench"] == "gemv":
                rows.setdefault((name, d["type"], d.get("batch", 1)), {})[d["level"]] = d
    if rows:
        print(f"\nread bandwidth (best of plain / prefetching, same run): {read} GB/s\n")
        print("| matmul | type | scalar GB/s | avx2 GB/s (frac) | avx512 GB/s (frac) | avx512/avx2 | max rel err vs ref |")
        print("|---|---|---|---|---|---|---|")
        for (name, ty, b), lv in rows.items():
            def cell(level, frac=True):
                d = lv.get(level)
                if not d:
                    return "—"
                return f"{d['gbps']:.1f}" + (f" ({d['frac_of_read_bw']:.2f})" if frac else "")
            ratio = (f"{lv['avx512']['gbps'] / lv['avx2']['gbps']:.2f}" if "avx512" in lv and "avx2" in lv else "—")
            err = max(d["max_rel_err_vs_ref"] for d in lv.values())
            print(f"| {'GEMV' if b == 1 else f'GEMM B={b}'} | {ty} | {cell('scalar', False)} | {cell('avx2')} | "
                  f"{cell('avx512')} | {ratio} | {err:.2g} |")
    dec = {}
    for s in steps:
        m = re.match(r"decode_(d4|s4|d16|q4km)(_r2)?_(scalar|avx2|avx512)$", s["step"])
        if not m or s.get("rc") != 0:
            continue
        err = open(os.path.join(out, s["step"] + ".err")).read()
        p = PERF.search(err)
        if not p:
            continue
        n, ms = int(p.group(1)), float(p.group(2))
        pf = PREFILL.search(err)
        dec.setdefault((m.group(1), m.group(3)), []).append(
            ((n - 1) / (ms / 1e3), pf and int(pf.group(1)) / (float(pf.group(2)) / 1e3)))
    if dec:
        print("\n| model | scalar tok/s | avx2 tok/s (rounds) | avx512 tok/s (rounds) | avx512/avx2 | prefill tok/s avx2 / avx512 |")
        print("|---|---|---|---|---|---|")
        for model in ("d4", "s4", "d16", "q4km"):
            def cell(level):
                v = dec.get((model, level))
                return " / ".join(f"{r:.2f}" for r, _ in v) if v else "—"

            def best(level):
                v = dec.get((model, level))
                return max(r for r, _ in v) if v else None

            def pre(level):
                v = dec.get((model, level))
                return f"{max(p for _, p in v):.1f}" if v and v[0][1] else "—"
            a, b = best("avx2"), best("avx512")
            print(f"| {model} | {cell('scalar')} | {cell('avx2')} | {cell('avx512')} | "
                  f"{(b / a) if a and b else float('nan'):.2f} | {pre('avx2')} / {pre('avx512')} |")


if __name__ == "__main__":
    main()
