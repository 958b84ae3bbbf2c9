#!/bin/bash
# bench/gpu/pdl_rounds.sh DIR — issue 14's decode defaults in interleaved rounds: d4 with PDL off / on,
# s16 with the default kernels / PDL / PDL + PINFER_CUDA_MMV=2, 3 rounds (bench_cuda, 256 tokens), the
# HBM read floor first. DIR/trees.txz: pack_trees.sh's (gpu/bench/bench_cuda, gpu/tools/pictl), DIR/lib.
set -u
D=$1
[ -f "$D/trees.txz" ] && tar -xJf "$D/trees.txz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
G=$D/gpu S=/dev/shm/pinfer-pdlr
mkdir -p "$S"
"$G/tools/pictl" synth --shape llama-7b --type q4_0 -t 16 -q -o "$S/d4.gguf"
"$G/tools/pictl" synth --shape llama-7b --type f16 --pwri -t 16 -q -o "$S/s16.gguf"
"$G/bench/bench_cuda" --hbm 8 2>/dev/null | tail -1
for r in 1 2 3; do
    for v in d4:dense:X=1 d4:dense:PINFER_CUDA_PDL=1 s16:sparse:X=1 s16:sparse:PINFER_CUDA_PDL=1 \
             s16:sparse:PINFER_CUDA_PDL=1,PINFER_CUDA_MMV=2 s16:sparse:PINFER_CUDA_MMV=2; do
        IFS=: read -r f mode envs <<<"$v"
        t=$(env ${envs//,/ } timeout 30 "$G/bench/bench_cuda" "$S/$f.gguf" --mode "$mode" -n 256 -c 2048 --pp 0 2>/dev/null |
            python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("case")=="decode": print(d["tok_s"], d["first_ids"][:3])')
        echo "r$r $f $envs $t"
    done
done
rm -rf "$S"
