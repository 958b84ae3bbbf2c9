"""summary — the table of bench/disk/gpu_host.sh from its --json-stats files: TYPE-ram.json (all in
RAM) and TYPE-FRACTION.json (--ram-budget at that fraction of the FFN, with --disk-floor).

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
      "disk wait ms/token | floor MiB/s -> ms/token | x floor | tokens vs RAM")
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
                 f"{k['disk_wait_ms_per_token']:.1f}")
        if k.get("floor_mib_s"):
            line += f" | {k['floor_mib_s']:.0f} -> {k['floor_ms_per_token']:.1f} | {ms / k['floor_ms_per_token']:.2f}x"
        else:
            line += " | - | -"
    else:
        line += " | - | - | - | - | -"
    print(line + " | " + tail)
