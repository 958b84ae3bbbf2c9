#!/usr/bin/env python3
"""test_trace_chain — bench/gpu/trace_chain.py on synthetic PINFER_CUDA_TRACE files (no GPU needed).

Two launches of one kernel that overlap (the second's first block enters before the first's last,
a second-wave block) must be told apart by their blocks; steps end with k_top1; the layers'
pattern is found; --blocks' view of one kernel's working blocks; a wrapped ring drops its partial first step; --json writes the table.

usage: test_trace_chain.py TRACE_CHAIN_PY"""
import importlib.util
import json
import os
import struct
import sys
import tempfile

spec = importlib.util.spec_from_file_location("trace_chain", sys.argv[1])
tc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc)

NAMES = ["none", "k_get_rows", "k_mmv", "k_attn_part", "k_top1"]
GET_ROWS, MMV, ATTN, ARGMAX = 1, 2, 3, 4
failures = 0


def check(cond, what):
    global failures
    if not cond:
        print("FAIL:", what)
        failures += 1


def rec(fid, block, nblocks, t_entry, t_exit, t_waited=0, sm=None):
    cyc = lambda t: int((t - t_entry) * 1.98) if t else 0  # noqa: E731
    return (fid, block if sm is None else sm, block, nblocks, t_entry, t_waited, t_exit,
            cyc(t_waited), cyc(t_exit))


def step(t0):
    """One step (ns from t0): get_rows, two layers of [mmv (3 blocks), mmv (3 blocks, overlapping the
    first: its block 0 enters before the first's block 2, a second wave), attn (2 blocks)], argmax."""
    rs = [rec(GET_ROWS, 0, 1, t0, t0 + 2000)]
    t = t0 + 3000
    for _ in range(2):
        a = [rec(MMV, 0, 3, t, t + 4000, t + 1000), rec(MMV, 1, 3, t + 100, t + 4100, t + 1000),
             rec(MMV, 2, 3, t + 4150, t + 6000, t + 4200)]
        b = [rec(MMV, 0, 3, t + 4120, t + 9000, t + 6100), rec(MMV, 1, 3, t + 4300, t + 9100, t + 6100),
             rec(MMV, 2, 3, t + 4400, t + 9200, t + 6100)]
        c = [rec(ATTN, 0, 2, t + 8000, t + 11000, t + 9300), rec(ATTN, 1, 2, t + 8050, t + 11500, t + 9300)]
        rs += a + b + c
        t += 12000
    rs.append(rec(ARGMAX, 0, 1, t, t + 1500, t + 100))
    return rs, t + 1500


def write(path, recs, cap, n):
    with open(path, "wb") as f:
        f.write(tc.HEAD.pack(tc.MAGIC, 1, tc.REC.size, cap, n, len(NAMES), 1980000))
        for nm in NAMES:
            f.write(nm.encode().ljust(tc.NAME_BYTES, b"\0"))
        for r in recs:
            f.write(tc.REC.pack(*r))


recs, t = [], 1_000_000
for _ in range(3):
    s, t = step(t)
    recs += s
    t += 5000

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "t.bin")
    # the ring in slot order is the order of exits; the script sorts
    write(path, sorted(recs, key=lambda r: r[tc.T_EXIT]), cap=1 << 20, n=len(recs))
    tr = tc.read_trace(path)
    check(tr["names"] == NAMES and len(tr["recs"]) == len(recs) and not tr["wrapped"], "read back")
    launches = tc.group_launches(tr["recs"])
    check(len(launches) == 3 * (1 + 2 * 3 + 1), f"launches: {len(launches)}")
    mmv = [L for L in launches if L.fid == MMV]
    check(len(mmv) == 12 and all(len(L.recs) == 3 and L.blocks == {0, 1, 2} for L in mmv), "mmv launches whole")
    first, second = mmv[0], mmv[1]
    check(sorted(r[tc.T_ENTRY] for r in first.recs) == [1_003_000, 1_003_100, 1_007_150], "the first mmv's blocks")
    check(sorted(r[tc.T_ENTRY] for r in second.recs) == [1_007_120, 1_007_300, 1_007_400], "the second mmv's blocks")
    steps, rest = tc.split_steps(launches, NAMES, {"k_top1"})
    check(len(steps) == 3 and not rest, f"steps: {len(steps)}, {len(rest)} after")
    rows = tc.launch_rows(steps[-1], NAMES, 1.98)
    check([r["kernel"] for r in rows] == ["k_get_rows"] + ["k_mmv", "k_mmv", "k_attn_part"] * 2 + ["k_top1"],
          "the step's kernels")
    check(abs(sum(r["share_us"] for r in rows) - (rows[-1]["exit_us"] - rows[0]["entry_us"])) < 1e-9,
          "the shares add up to the step")
    check(abs(rows[1]["blk_med_us"] - 4.0) < 0.01 and abs(rows[1]["wait_med_us"] - 0.9) < 0.01,
          f"the medians from the cycles: {rows[1]['blk_med_us']}, {rows[1]['wait_med_us']}")
    check(rows[2]["gap_next_us"] == rows[3]["share_us"], "gap> is the next launch's share")
    lt = tc.layer_table([rows])
    check(lt is not None and lt["pattern"] == ["k_mmv", "k_mmv", "k_attn_part"] and lt["layers"] == 2,
          f"the layer pattern: {lt and lt['pattern']}")
    lt2 = tc.layer_table([rows], layer_start="k_attn_part")
    check(lt2 is not None and lt2["pattern"] == ["k_attn_part", "k_mmv", "k_mmv"] and lt2["layers"] == 1,
          f"--layer-start: {lt2 and lt2['pattern']}")
    bv = tc.block_view([steps[-1]], NAMES, "k_attn_part", 1.98)
    close = lambda xs, ys: all(abs(x - y) < 0.01 for x, y in zip(xs, ys))  # noqa: E731
    check(bv is not None and bv["launches"] == 2 and bv["working_blocks"] == 2
          and close(bv["entry"], [-1.2, -1.15, -1.15]) and close(bv["wait"], [0.1, 0.1, 0.1])
          and close(bv["exit"], [1.8, 2.3, 2.3]) and close(bv["after_wait"], [1.7, 2.2, 2.2])
          and bv["slowest_blocks"] == [1], f"--blocks: {bv}")
    out = os.path.join(d, "t.json")
    rc = tc.main([path, "--steps", "2", "--json", out, "--blocks", "k_attn_part"])
    check(rc == 0, "main")
    js = json.load(open(out))
    check(len(js["steps"]) == 2 and js["steps"][-1]["step"] == 2 and js["layer"]["layers"] == 4
          and js["blocks"][0]["launches"] == 4, "the JSON")

    # a wrapped ring: the first step's first half was overwritten
    cut = len(step(1_000_000)[0]) // 2
    kept = sorted(recs, key=lambda r: r[tc.T_EXIT])[cut:]
    write(path, kept, cap=len(kept), n=len(recs))
    tr = tc.read_trace(path)
    check(tr["wrapped"], "wrapped")
    kept = tc.drop_partial_head(tr["recs"], NAMES, {"k_top1"})
    steps, rest = tc.split_steps(tc.group_launches(kept), NAMES, {"k_top1"})
    check(len(steps) == 2 and not rest and all(len(s) == 8 for s in steps), f"wrapped: {len(steps)} steps")
    check(tc.main([path, "--skip-last", "1"]) == 0, "main on the wrapped ring")

print(f"trace_chain: {failures} failures")
sys.exit(1 if failures else 0)
