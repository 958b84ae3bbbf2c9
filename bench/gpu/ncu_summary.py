#!/usr/bin/env python3
"""ncu_summary.py CSV... — one decode step per Nsight Compute CSV (--csv --page raw of bench_cuda -n 2,
bench/gpu/ncu_step.sh): the run's last kernels repeat (the warm-up step and the timed step replay the
same graph), so the step is the longest tail that equals the run of kernels just before it. Prints,
per kernel name in step order: launches, total µs, DRAM MB read, TB/s, grid × block; then the step's
total µs and bytes."""
import csv
import sys


def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def rows(path):
    """The kernels of an ncu --csv --page raw --print-units base log, in launch order."""
    with open(path) as f:
        r = list(csv.reader(l for l in f if l.startswith('"')))
    if len(r) < 3:
        return []
    col = {h: i for i, h in enumerate(r[0])}  # r[1]: the units (base: nsecond, byte)
    out = []
    for d in r[2:]:
        get = lambda k: d[col[k]] if k in col else ""
        out.append({
            "name": get("Kernel Name").split("(")[0].split("<")[0].replace("void ", "").strip(),
            "us": num(get("gpu__time_duration.sum")) / 1000.0,
            "rd": num(get("dram__bytes_read.sum")),
            "grid": get("launch__grid_size"),
            "block": get("launch__block_size"),
        })
    return out


def last_step(ks):
    names = [k["name"] for k in ks]
    for s in range(len(names) // 2, 0, -1):
        if names[-s:] == names[-2 * s:-s]:
            return ks[-s:]
    return ks


for path in sys.argv[1:]:
    ks = rows(path)
    if not ks:
        print(f"{path}: no kernels")
        continue
    step = last_step(ks)
    agg = {}
    order = []
    for k in step:
        a = agg.get(k["name"])
        if a is None:
            a = agg[k["name"]] = {"n": 0, "us": 0.0, "rd": 0.0, "geo": f"{k['grid']}x{k['block']}"}
            order.append(k["name"])
        a["n"] += 1
        a["us"] += k["us"]
        a["rd"] += k["rd"]
    tot_us = sum(k["us"] for k in step)
    tot_rd = sum(k["rd"] for k in step)
    print(f"== {path}: {len(step)} kernels a step, {tot_us:.0f} us, {tot_rd / 1e9:.3f} GB read "
          f"({tot_rd / tot_us / 1e6 if tot_us else 0:.2f} TB/s)")
    print(f"{'kernel':34s} {'n':>4s} {'us':>8s} {'us/launch':>9s} {'MB rd':>9s} {'TB/s':>6s} {'share':>6s}  grid x block")
    for nm in order:
        a = agg[nm]
        tbs = a["rd"] / a["us"] / 1e6 if a["us"] else 0
        print(f"{nm[:34]:34s} {a['n']:4d} {a['us']:8.1f} {a['us'] / a['n']:9.2f} {a['rd'] / 1e6:9.1f} {tbs:6.2f} "
              f"{a['us'] / tot_us:6.1%}  {a['geo']}")
