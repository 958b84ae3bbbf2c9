#!/usr/bin/env python3
"""bench/gpu/hybrid_floor.py — the hybrid mode's critical-path floor of a run (BENCH.md: per layer, the
GPU's attention and predictor, then the larger of the GPU's hot FFN and the hand-off to the host + the
CPU's cold FFN + the hand-off back, summed over the layers), from bandwidths measured in the same call.

  hybrid_floor.py MODEL.gguf RUN.json --hbm GB/s --host GB/s [--handoff-us 25]

MODEL.gguf: the file the run read (its tensor sizes: the attention's q/k/v/o and biases, the
predictors fc1/fc2 and the output matrix are read by the GPU once a token; token_embd one row, not
counted). RUN.json: `pictl run --json-stats` of a hybrid run (decode_profile's per-layer cold MB a
token: what cpud read). The hot FFN branch is taken as 0 (the GPU's active hot rows are a few MB a
layer against 4.5 TB/s, far below the cold branch; counting 0 can only make the floor lower, never
flatter us). --handoff-us: the hand-off's floor a layer (two PCIe crossings and the ring; the figure
every issue 10 table has used). Prints one line of JSON: floor_ms, ms_per_token, x_floor and its parts.
"""
import argparse
import json
import re
import struct
import sys

# ggml type: (elements a block, bytes a block)
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 20: (32, 18),
         23: (256, 136), 26: (1, 4), 30: (1, 2)}


def read_str(f):
    n, = struct.unpack("<Q", f.read(8))
    return f.read(n).decode("utf-8", "replace")


def skip_value(f, t):
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    if t in sizes:
        f.seek(sizes[t], 1)
    elif t == 8:
        read_str(f)
    elif t == 9:
        et, n = struct.unpack("<IQ", f.read(12))
        if et in sizes:
            f.seek(sizes[et] * n, 1)
        else:
            for _ in range(n):
                skip_value(f, et)
    else:
        raise ValueError("unknown GGUF value type %d" % t)


def tensor_bytes(path):
    """{name: bytes} of every tensor of a GGUF file (v2 or v3; PowerInfer's PWRI magic too)"""
    out = {}
    with open(path, "rb") as f:
        magic, version = struct.unpack("<4sI", f.read(8))
        if magic not in (b"GGUF", b"PWRI") or version < 2:  # PWRI: PowerInfer's files, GGUF's layout
            raise ValueError("%s: not a GGUF (or PowerInfer GGUF) v2/v3 file" % path)
        n_t, n_kv = struct.unpack("<QQ", f.read(16))
        for _ in range(n_kv):
            read_str(f)
            t, = struct.unpack("<I", f.read(4))
            skip_value(f, t)
        for _ in range(n_t):
            name = read_str(f)
            nd, = struct.unpack("<I", f.read(4))
            dims = struct.unpack("<%dQ" % nd, f.read(8 * nd))
            t, _off = struct.unpack("<IQ", f.read(12))
            if t not in TYPES:
                raise ValueError("%s: tensor %s has type %d, unknown here" % (path, name, t))
            n = 1
            for d in dims:
                n *= d
            blk, size = TYPES[t]
            out[name] = n // blk * size
    return out


def gpu_bytes(tensors):
    """(per layer {layer: bytes}, output bytes): what the GPU reads once a token outside the FFN"""
    per = {}
    for name, b in tensors.items():
        m = re.match(r"blk\.(\d+)\.(attn_q|attn_k|attn_v|attn_output|attn_norm|ffn_norm|fc1|fc2)\.", name)
        if m:
            per[int(m.group(1))] = per.get(int(m.group(1)), 0) + b
    # the output matrix, or the token embeddings where they are tied to it (read whole then)
    out = tensors["output.weight"] if "output.weight" in tensors else tensors.get("token_embd.weight", 0)
    return per, out + tensors.get("output_norm.weight", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("run")
    ap.add_argument("--hbm", type=float, required=True, help="GB/s, the device's read floor in this call")
    ap.add_argument("--host", type=float, required=True, help="GB/s, bench_gemv's better read in this call")
    ap.add_argument("--handoff-us", type=float, default=25.0)
    a = ap.parse_args()
    if a.hbm <= 0 or a.host <= 0:
        sys.exit("hybrid_floor: bandwidths must be positive (got --hbm %g --host %g)" % (a.hbm, a.host))
    try:
        per, out_b = gpu_bytes(tensor_bytes(a.model))
        j = json.load(open(a.run))
    except (OSError, ValueError, struct.error) as e:
        sys.exit("hybrid_floor: %s" % e)
    layers = (j.get("decode_profile") or {}).get("per_layer") or []
    if not layers:
        sys.exit("hybrid_floor: %s has no decode_profile per layer (not a hybrid run?)" % a.run)
    ms = 1e3 / j["decode_tok_s"]
    gpu_ms = cold_ms = hand_ms = 0.0
    cold_mb = 0.0
    for r in layers:
        mb = r["cpud_mb"] * r["cpud_share_of_gpud_items"]
        cold_mb += mb
        gpu_ms += per.get(r["layer"], 0) / (a.hbm * 1e9) * 1e3
        if mb > 0:
            cold_ms += mb * 1e6 / (a.host * 1e9) * 1e3
            hand_ms += a.handoff_us / 1e3
    if cold_mb <= 0:
        sys.exit("hybrid_floor: %s has no cold share (cpud read nothing): not a sparse hybrid run" % a.run)
    gpu_ms += out_b / (a.hbm * 1e9) * 1e3
    floor = gpu_ms + cold_ms + hand_ms
    print(json.dumps({"run": a.run.split("/")[-1], "tok_s": round(j["decode_tok_s"], 2), "ms_per_token": round(ms, 3),
                      "floor_ms": round(floor, 3), "x_floor": round(ms / floor, 3),
                      "gpu_ms": round(gpu_ms, 3), "cold_ms": round(cold_ms, 3), "handoff_ms": round(hand_ms, 3),
                      "cold_mb": round(cold_mb, 2), "hbm_gbs": a.hbm, "host_gbs": a.host}))


if __name__ == "__main__":
    main()
