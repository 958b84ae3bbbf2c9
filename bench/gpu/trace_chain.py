#!/usr/bin/env python3
"""trace_chain.py — the decode chain's timeline, launch by launch, from a PINFER_CUDA_TRACE file.

A build with `meson setup build-trace -Dcuda=enabled -Dcuk_trace=true` records one entry per block of
every kernel (gpud/cuda/cuk_trace.cuh: %globaltimer at the block's entry, when it came back from
pdl_wait() and at its exit, the same in clock64() cycles); PINFER_CUDA_TRACE=FILE makes the device
context write them to FILE when it closes (gpud/cuda/cudev_trace.c, format in gpud/cuda/cuk_trace.h).

    PINFER_CUDA_TRACE=/tmp/t.bin build-trace/bench/gpu/bench_cuda MODEL --mode dense -n 64 --pp 0
    python3 bench/gpu/trace_chain.py /tmp/t.bin --skip-last 1

The records are sorted by entry and grouped into launches: a record joins the oldest open launch of
its kernel that has fewer records than its grid's blocks (the same grid, not this block yet, and
begun no longer than --join-slack-us before the launch's latest exit so far), else it opens a new
launch. A step ends with k_top1 (argmax) or k_topk (--boundary); the last --steps complete steps are
printed (--skip-last drops the last ones first: bench_cuda ends its decode with an eager profiled
step). Per launch (µs; entry, wait and exit relative to the step's first entry):
  entry     the first block's entry          wait    the first return from pdl_wait() (- none)
  exit      the last block's exit            dur     exit - entry
  blk_med   the median block's exit - entry  w_med   the median block's wait - entry (cycles / --ghz)
  share     this launch's exit - the previous launch's exit (the step's first entry for the
            first): how much later the chain ends because of it (the shares add up to the step)
  gap>      the next launch's exit - this one's exit (the next launch's share)
  SMs       distinct SMs its blocks ran on
Then one layer as a table: the launches after the embedding (k_get_rows) fall into a repeating
pattern of kernels (found automatically, or --layer-start NAME: a layer begins at each launch of
NAME; --layer-len P: P launches a layer), and each position's columns are averaged over the layers
of the printed steps. --blocks K1,K2: for each of these kernels, its working blocks (those that ran
more than 0.5 µs after their wait) in every printed launch — the min / median / max of their entry,
wait and exit (µs from the previous launch's last exit) and of their time after the wait, averaged
over the launches: whether a kernel's time is waiting for a slot, for the previous kernel, or its own
work. --json OUT writes the launches, the layer table and the block views.

Standard library only."""
import argparse
import json
import statistics
import struct
import sys

HEAD = struct.Struct("<8sIIQQII")  # struct cuk_trace_file_head
REC = struct.Struct("<IIIIQQQII")  # struct cuk_trace_rec
NAME_BYTES = 32
MAGIC = b"CUKTRACE"

# record fields (tuples, for memory: a ring holds up to millions)
FID, SMID, BLOCK, NBLOCKS, T_ENTRY, T_WAITED, T_EXIT, CYC_WAIT, CYC_EXIT = range(9)


class TraceError(Exception):
    pass


def read_trace(path):
    """The file's header fields, kernel names and records (those ever written: fid != 0)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEAD.size:
        raise TraceError(f"{path}: too short for a trace header")
    magic, version, rec_size, cap, n, n_fid, clock_khz = HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise TraceError(f"{path}: not a CUKTRACE file")
    if version != 1 or rec_size != REC.size:
        raise TraceError(f"{path}: version {version}, records of {rec_size} bytes (this script reads 1, {REC.size})")
    off = HEAD.size
    names = []
    for i in range(n_fid):
        raw = data[off + i * NAME_BYTES:off + (i + 1) * NAME_BYTES]
        names.append(raw.split(b"\0", 1)[0].decode("ascii", "replace") or f"fid{i}")
    off += n_fid * NAME_BYTES
    m = min(n, cap)
    body = data[off:off + m * REC.size]
    if len(body) != m * REC.size:
        raise TraceError(f"{path}: {m} records announced, {len(body) // REC.size} present")
    recs = [r for r in REC.iter_unpack(body) if 0 < r[FID] < n_fid]
    return {"cap": cap, "n": n, "names": names, "clock_khz": clock_khz, "recs": recs, "wrapped": n > cap}


class Launch:
    __slots__ = ("fid", "nblocks", "recs", "blocks", "max_exit", "first_entry")

    def __init__(self, rec):
        self.fid, self.nblocks = rec[FID], rec[NBLOCKS]
        self.recs, self.blocks = [], set()
        self.max_exit = 0
        self.first_entry = rec[T_ENTRY]
        self.add(rec)

    def add(self, rec):
        self.recs.append(rec)
        self.blocks.add(rec[BLOCK])
        self.max_exit = max(self.max_exit, rec[T_EXIT])

    def full(self):
        return len(self.recs) >= self.nblocks

    def accepts(self, rec, slack_ns):
        return (rec[NBLOCKS] == self.nblocks and not self.full() and rec[BLOCK] not in self.blocks
                and rec[T_ENTRY] <= self.max_exit + slack_ns)


def group_launches(recs, slack_ns=20000):
    """Records (any order) → launches in the order of their first entry."""
    recs = sorted(recs, key=lambda r: (r[T_ENTRY], r[T_EXIT], r[FID], r[BLOCK]))
    open_by_fid = {}
    launches = []
    for r in recs:
        opened = open_by_fid.setdefault(r[FID], [])
        for L in opened:  # the oldest first
            if L.accepts(r, slack_ns):
                L.add(r)
                if L.full():
                    opened.remove(L)
                break
        else:
            L = Launch(r)
            launches.append(L)
            if not L.full():
                opened.append(L)
    launches.sort(key=lambda L: (L.first_entry, L.max_exit))
    return launches


def drop_partial_head(recs, names, boundary):
    """A wrapped ring: its earliest step lost records. Keep what entered after the first boundary
    launch (k_top1 / k_topk) had left."""
    bset = {i for i, nm in enumerate(names) if nm in boundary}
    recs = sorted(recs, key=lambda r: (r[T_ENTRY], r[T_EXIT]))
    first = next((r for r in recs if r[FID] in bset), None)
    if first is None:
        return []
    cut = max(r[T_EXIT] for r in recs if r[FID] == first[FID] and r[T_ENTRY] <= first[T_EXIT])
    return [r for r in recs if r[T_ENTRY] > cut]


def split_steps(launches, names, boundary):
    """Complete steps (lists of launches), each ending with a boundary kernel; the launches after the
    last boundary are returned apart."""
    steps, cur = [], []
    for L in launches:
        cur.append(L)
        if names[L.fid] in boundary:
            steps.append(cur)
            cur = []
    return steps, cur


def med(xs):
    return statistics.median(xs) if xs else None


def launch_rows(step, names, ghz):
    """The per-launch table of one step (dicts, times in µs)."""
    t0 = step[0].first_entry
    rows = []
    prev_exit = t0
    for i, L in enumerate(step):
        waits = [r[T_WAITED] for r in L.recs if r[T_WAITED]]
        cw = [r[CYC_WAIT] for r in L.recs if r[T_WAITED]]
        row = {
            "index": i,
            "kernel": names[L.fid],
            "blocks": L.nblocks,
            "entry_us": (L.first_entry - t0) / 1e3,
            "wait_us": (min(waits) - t0) / 1e3 if waits else None,
            "exit_us": (L.max_exit - t0) / 1e3,
            "dur_us": (L.max_exit - L.first_entry) / 1e3,
            "blk_med_us": med([r[CYC_EXIT] for r in L.recs]) / (ghz * 1e3),
            "wait_med_us": med(cw) / (ghz * 1e3) if cw else None,
            "share_us": (L.max_exit - prev_exit) / 1e3,
            "gap_next_us": (step[i + 1].max_exit - L.max_exit) / 1e3 if i + 1 < len(step) else None,
            "sms": len({r[SMID] for r in L.recs}),
        }
        prev_exit = L.max_exit
        rows.append(row)
    return rows


def repeats(names, start, pattern):
    """How many times pattern follows itself from names[start]."""
    P, k = len(pattern), 0
    while start + (k + 1) * P <= len(names) and tuple(names[start + k * P:start + (k + 1) * P]) == pattern:
        k += 1
    return k


def find_pattern(names, start, layer_start=None, layer_len=None):
    """(offset, pattern) of the layers in names[start:] (a step's kernel names); None if none."""
    body = len(names) - start
    if body < 1:
        return None
    if layer_len:
        return start, tuple(names[start:start + layer_len])
    if layer_start:
        pos = [i for i in range(start, len(names)) if names[i] == layer_start]
        if not pos:
            return None
        segs = [tuple(names[a:b]) for a, b in zip(pos, pos[1:])]
        if not segs:
            return pos[0], tuple(names[pos[0]:])
        pattern = max(set(segs), key=lambda s: (segs.count(s), -len(s)))
        o = next(p for p in pos if repeats(names, p, pattern) > 0)
        return o, pattern
    best = None  # (coverage, -offset, -P)
    for o in range(start, min(len(names), start + 64)):
        for P in range(1, (len(names) - o) // 2 + 1):
            k = repeats(names, o, tuple(names[o:o + P]))
            if k >= 2:
                key = (k * P, -o, -P)
                if best is None or key > best:
                    best = key
    if best is None:
        return None
    o, P = -best[1], -best[2]
    return o, tuple(names[o:o + P])


def layer_table(steps_rows, layer_start=None, layer_len=None):
    """The mean over the layers of every printed step of each position's columns."""
    acc, pattern, n_layers, layer_us = None, None, 0, []
    for rows in steps_rows:
        names = [r["kernel"] for r in rows]
        emb = names.index("k_get_rows") if "k_get_rows" in names else -1
        found = find_pattern(names, emb + 1, layer_start, layer_len)
        if not found:
            continue
        o, pat = found
        if pattern is None:
            pattern = pat
            acc = [[] for _ in pat]
        elif pat != pattern:
            continue  # a step of another shape (the prompt's, say)
        k = repeats(names, o, pattern)
        for layer in range(k):
            base = o + layer * len(pattern)
            t0 = rows[base]["entry_us"]
            layer_us.append(sum(rows[base + j]["share_us"] for j in range(len(pattern))))
            for j in range(len(pattern)):
                acc[j].append((rows[base + j], t0))
            n_layers += 1
    if not pattern:
        return None

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return statistics.fmean(xs) if xs else None

    pos = []
    for j, name in enumerate(pattern):
        rs = acc[j]
        rel = lambda key: mean([r[key] - t0 if r[key] is not None else None for r, t0 in rs])  # noqa: E731
        pos.append({
            "index": j,
            "kernel": name,
            "blocks": mean([r["blocks"] for r, _ in rs]),
            "entry_us": rel("entry_us"),
            "wait_us": rel("wait_us"),
            "exit_us": rel("exit_us"),
            "dur_us": mean([r["dur_us"] for r, _ in rs]),
            "blk_med_us": mean([r["blk_med_us"] for r, _ in rs]),
            "wait_med_us": mean([r["wait_med_us"] for r, _ in rs]),
            "share_us": mean([r["share_us"] for r, _ in rs]),
            "gap_next_us": mean([r["gap_next_us"] for r, _ in rs]),
            "sms": mean([r["sms"] for r, _ in rs]),
        })
    return {"pattern": list(pattern), "layers": n_layers, "layer_us_mean": mean(layer_us),
            "layer_us_min": min(layer_us), "layer_us_max": max(layer_us), "positions": pos}


COLS = [("#", "index", 3, "d"), ("kernel", "kernel", 14, "s"), ("blocks", "blocks", 7, "d"),
        ("entry", "entry_us", 9, ".2f"), ("wait", "wait_us", 9, ".2f"), ("exit", "exit_us", 9, ".2f"),
        ("dur", "dur_us", 8, ".2f"), ("blk_med", "blk_med_us", 8, ".2f"), ("w_med", "wait_med_us", 8, ".2f"),
        ("share", "share_us", 8, ".2f"), ("gap>", "gap_next_us", 8, ".2f"), ("SMs", "sms", 5, "d")]


def fmt_row(r):
    out = []
    for _, key, w, f in COLS:
        v = r.get(key)
        if v is None:
            s = "-"
        elif f == "d":
            s = str(int(round(v)))
        elif f == "s":
            s = str(v)
        else:
            s = format(v, f)
        out.append(s.ljust(w) if f == "s" else s.rjust(w))
    return " ".join(out)


def header():
    return " ".join(h.ljust(w) if f == "s" else h.rjust(w) for h, _, w, f in COLS)


def clock_check(recs):
    """(measured cycles per ns over blocks of > 20 µs, the smallest %globaltimer step seen)"""
    ratios = [r[CYC_EXIT] / (r[T_EXIT] - r[T_ENTRY]) for r in recs if r[T_EXIT] - r[T_ENTRY] > 20000]
    ts = sorted({r[T_ENTRY] for r in recs[:200000]})
    steps = [b - a for a, b in zip(ts, ts[1:]) if b > a]
    return (med(ratios), min(steps) if steps else None)


def block_view(steps, names, kernel, ghz, min_work_us=0.5):
    """The working blocks of every launch of kernel in steps (those that ran more than min_work_us
    after their wait — or after their entry, without a wait): per launch the quantiles 0 / 0.5 / 1 of
    their entry, wait and exit, µs from the previous launch's last exit, and of their time after the
    wait; then the mean of each over the launches. Where a kernel's time goes: waiting for a slot,
    for the previous kernel, or its own work (and which part of its blocks)."""
    def q3(xs):
        xs = sorted(xs)
        return [xs[0], xs[len(xs) // 2], xs[-1]] if xs else [None] * 3
    per = []
    for step in steps:
        for i, L in enumerate(step):
            if names[L.fid] != kernel or i == 0:
                continue
            t0 = step[i - 1].max_exit
            work = [r for r in L.recs if (r[CYC_EXIT] - r[CYC_WAIT] if r[T_WAITED] else r[CYC_EXIT]) > min_work_us * ghz * 1e3]
            if not work:
                continue
            us = lambda t: (t - t0) / 1e3  # noqa: E731
            per.append({"blocks": len(work),
                        "entry": q3([us(r[T_ENTRY]) for r in work]),
                        "wait": q3([us(r[T_WAITED]) for r in work if r[T_WAITED]]),
                        "exit": q3([us(r[T_EXIT]) for r in work]),
                        "after_wait": q3([(r[CYC_EXIT] - r[CYC_WAIT]) / (ghz * 1e3) for r in work]),
                        "slowest_block": max(work, key=lambda r: r[T_EXIT])[BLOCK]})
    if not per:
        return None

    def mean3(key):
        cols = [[p[key][k] for p in per if p[key][k] is not None] for k in range(3)]
        return [statistics.fmean(c) if c else None for c in cols]
    return {"kernel": kernel, "launches": len(per), "working_blocks": statistics.fmean(p["blocks"] for p in per),
            "entry": mean3("entry"), "wait": mean3("wait"), "exit": mean3("exit"),
            "after_wait": mean3("after_wait"),
            "slowest_blocks": sorted({p["slowest_block"] for p in per})[:16]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--steps", type=int, default=3, help="the last N complete steps (default 3)")
    ap.add_argument("--skip-last", type=int, default=0, help="drop the last K complete steps first (default 0)")
    ap.add_argument("--ghz", type=float, default=1.98, help="SM clock for the cycle counts (default 1.98)")
    ap.add_argument("--layer-start", help="a layer begins at each launch of this kernel (default: found)")
    ap.add_argument("--layer-len", type=int, help="launches a layer (default: found)")
    ap.add_argument("--boundary", default="k_top1,k_topk", help="kernels that end a step (default k_top1,k_topk)")
    ap.add_argument("--join-slack-us", type=float, default=20.0,
                    help="a block joins an open launch only if it entered at most this long after the "
                    "launch's latest exit so far (default 20)")
    ap.add_argument("--json", help="write the launches and the layer table here")
    ap.add_argument("--blocks", help="also the working blocks of these kernels' launches (comma-separated; block_view)")
    a = ap.parse_args(argv)
    try:
        tr = read_trace(a.file)
    except (OSError, TraceError) as e:
        print(f"trace_chain: {e}", file=sys.stderr)
        return 1
    names, boundary = tr["names"], set(a.boundary.split(","))
    recs = tr["recs"]
    print(f"{a.file}: {tr['n']} records appended, ring of {tr['cap']}"
          f"{' (wrapped: the earliest step dropped)' if tr['wrapped'] else ''}, {len(recs)} read")
    if tr["wrapped"]:
        recs = drop_partial_head(recs, names, boundary)
    if not recs:
        print("trace_chain: no records", file=sys.stderr)
        return 1
    cyc_ns, tick = clock_check(recs)
    print(f"clock: --ghz {a.ghz:g}; the device reports {tr['clock_khz'] / 1e6:.3f} GHz peak"
          + (f"; blocks over 20 µs ran {cyc_ns:.3f} cycles/ns" if cyc_ns else "")
          + (f"; smallest %globaltimer step seen {tick} ns" if tick else ""))
    launches = group_launches(recs, int(a.join_slack_us * 1e3))
    steps, rest = split_steps(launches, names, boundary)
    print(f"{len(launches)} launches, {len(steps)} complete steps"
          + (f", {len(rest)} launches after the last" if rest else ""))
    if not steps:
        print(f"trace_chain: no launch of {a.boundary} (--boundary) ends a step", file=sys.stderr)
        return 1
    if len(steps) > 1:
        tail = steps[-12:]
        print("the last steps' durations (µs): " + ", ".join(
            f"{(s[-1].max_exit - s[0].first_entry) / 1e3:.1f}" for s in tail))
    end = len(steps) - a.skip_last
    if end < 1:
        print("trace_chain: --skip-last leaves no step", file=sys.stderr)
        return 1
    first = max(0, end - a.steps)
    chosen = list(range(first, end))
    steps_rows = []
    for k in chosen:
        step = steps[k]
        rows = launch_rows(step, names, a.ghz)
        steps_rows.append(rows)
        dur = (step[-1].max_exit - step[0].first_entry) / 1e3
        print(f"\nstep {k} (of {len(steps)}): {len(step)} launches, "
              f"{sum(L.nblocks for L in step)} blocks, {dur:.2f} µs")
        print(header())
        for r in rows:
            print(fmt_row(r))
    lt = layer_table(steps_rows, a.layer_start, a.layer_len)
    if lt:
        print(f"\none layer: the mean over {lt['layers']} layers of {len(chosen)} steps "
              f"(pattern of {len(lt['pattern'])} launches; a layer {lt['layer_us_mean']:.2f} µs, "
              f"{lt['layer_us_min']:.2f}-{lt['layer_us_max']:.2f}); entry/wait/exit from the layer's first entry")
        print(header())
        for r in lt["positions"]:
            print(fmt_row(r))
    else:
        print("\nno repeating layer pattern found (--layer-start NAME / --layer-len P)")
    bvs = []
    for kernel in (a.blocks.split(",") if a.blocks else []):
        bv = block_view([steps[k] for k in chosen], names, kernel, a.ghz)
        if bv is None:
            print(f"\nno working block of {kernel} in the printed steps")
            continue
        bvs.append(bv)
        f3 = lambda xs: " / ".join("-" if x is None else f"{x:.2f}" for x in xs)  # noqa: E731
        print(f"\n{kernel}: {bv['launches']} launches, {bv['working_blocks']:.1f} working blocks each; "
              f"µs from the previous launch's last exit, min / median / max, mean over the launches:")
        for key in ("entry", "wait", "exit", "after_wait"):
            print(f"  {key:<11} {f3(bv[key])}")
        print(f"  the last to exit, by block index: {bv['slowest_blocks']}")
    if a.json:
        out = {"blocks": bvs, "file": a.file, "n": tr["n"], "cap": tr["cap"], "ghz": a.ghz, "clock_khz": tr["clock_khz"],
               "steps": [{"step": k, "launches": rows} for k, rows in zip(chosen, steps_rows)], "layer": lt}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"\nwrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
