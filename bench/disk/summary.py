"""summary — the table of bench/disk/gpu_host.sh from its --json-stats files: TYPE-ram.json (all in
RAM) and TYPE-FRACTION.json (--ram-budget at that fraction of the FFN, with --disk-floor). "x floor"
is ms/token over the disk floor (the disk bytes per token at the floor's random-record bandwidth;
the bytes per token count the prompt's reads too); "x max(RAM, floor)" over the slower of the
all-in-RAM token and the floor, what a perfect overlap of reads and compute would give.

usage: summary.py DIR"""
import glob, json, os, sys

d = sys.argv[1]
runs = {}
for p in sorted(glob.glob(os.path.join(d, "*.json"))):
    try:
        runs[os.path.basename(p)[:-5]] = json.load(open(p))
    except (OSError, ValueError):
        pass
print("case | decode tok/s (ms/token) | x all-in-RAM | disk MiB/token | hit rate (hits, prefetched, misses) | "
      "disk wait + prefetch hand-over ms/token | floor MiB/s -> ms/token | x floor | x max(RAM, floor) | tokens vs RAM")
for tag, r in runs.items():
    typ = tag.split("-")[0]
    ram = runs.get(typ + "-ram")
    tps = r.get("decode_tok_s") or 0
    ms = 1e3 / tps if tps else float("nan")
    line = f"{tag} | {tps:.2f} ({ms:.0f})"
    if ram and ram is not r and ram.get("decode_tok_s"):
        line += f" | {ram['decode_tok_s'] / tps:.2f}x" if tps else " | -"
        same = ram.get("tokens") == r.get("tokens")
        tail = f"{'equal' if same else 'DIFFERENT'} ({len(r.get('tokens', []))})"
    else:
        line += " | -"
        tail = "-"
    k = r.get("disk")
    if k:
        mib = k["bytes_read_per_token"] / 2**20
        line += (f" | {mib:.1f} | {k['hit_rate']:.3f} ({k['hits']}, {k['prefetched']}, {k['misses']}) | "
                 f"{k['disk_wait_ms_per_token']:.1f} + {k.get('prefetch_ms_per_token', 0):.1f}")
        if k.get("floor_mib_s"):
            fl = k["floor_ms_per_token"]
            line += f" | {k['floor_mib_s']:.0f} -> {fl:.1f} | {ms / fl:.2f}x"
            # the token cannot beat the slower of its compute (all in RAM) and its reads
            bound = max(fl, 1e3 / ram["decode_tok_s"]) if ram and ram.get("decode_tok_s") else fl
            line += f" | {ms / bound:.2f}x"
        else:
            line += " | - | - | -"
    else:
        line += " | - | - | - | - | - | -"
    print(line + " | " + tail)
