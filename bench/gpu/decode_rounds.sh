#!/bin/bash
# bench/gpu/decode_rounds.sh DIR — issue 14's decode launches (PDL: cuk_pdl.cuh; the streamed kernel's level: cuk_mmv.h) in
# interleaved rounds: bench_cuda (256 tokens) over VARIANTS, ROUNDS rounds (3), the HBM read floor
# first. A variant is FILE:MODE:ENV[:TREE] (ENV: comma-separated NAME=VALUE, X=1 for none; TREE: the
# build tree DIR/TREE/gpu, default DIR/gpu — e.g. "old" for DIR/old.txz, pack_trees.sh's trees.txz of
# an older build, unpacked into DIR/old); FILE is one of d16 s16 d4 s4 (BENCH.md's files, synthesized
# here when a variant needs them and not already there). PP=1: each run also measures pp512 (--pp 512).
# HYBRID="FILE:BUDGET[:TREE] ..." adds, to each round, the pipeline (`pictl run --backend cuda --vram-budget
# BUDGET`, 128 tokens; TREE as for VARIANTS) once per HYBRID_ENVS entry (default "X=1 PINFER_CUDA_PDL=0,PINFER_CUDA_MMV=1": the defaults,
# then the plain launches); each hybrid line ends with cpud's FFN mean, median and p90 from its log.
# DIR/trees.txz: pack_trees.sh's (gpu/bench/bench_cuda, gpu/tools/pictl), DIR/lib.
set -u
D=$1
[ -f "$D/trees.txz" ] && tar -xJf "$D/trees.txz" -C "$D"
[ -f "$D/old.txz" ] && mkdir -p "$D/old" && tar -xJf "$D/old.txz" -C "$D/old"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
G=$D/gpu S=/dev/shm/pinfer-rounds PPN=0
[ -n "${PP:-}" ] && PPN=512
HYBRID=${HYBRID:-}
VARIANTS=${VARIANTS:-"d16:dense:X=1 d16:dense:PINFER_CUDA_PDL=0,PINFER_CUDA_MMV=1 d4:dense:X=1
    d4:dense:PINFER_CUDA_PDL=0 s16:sparse:X=1 s16:sparse:PINFER_CUDA_PDL=0,PINFER_CUDA_MMV=1"}
mkdir -p "$S"
. "$(dirname "$0")/bench_files.sh"
for f in d16 s16 d4 s4; do
    case " $VARIANTS $HYBRID" in *[[:space:]]"$f:"*) ;; *) continue ;; esac
    bench_file "$G/tools/pictl" "$S" "$f"
done
"$G/bench/bench_cuda" --hbm 8 2>/dev/null | tail -1
for r in $(seq "${ROUNDS:-3}"); do
    for v in $VARIANTS; do
        IFS=: read -r f mode envs tree <<<"$v"
        bc=$G/bench/bench_cuda
        [ -n "$tree" ] && bc=$D/$tree/gpu/bench/bench_cuda
        t=$(env ${envs//,/ } timeout 40 "$bc" "$S/$f.gguf" --mode "$mode" -n 256 -c 2048 --pp "$PPN" \
            2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("case")=="decode": print(d["tok_s"], d["first_ids"][:3], end=" ")
    if d.get("case")=="prefill" and d.get("path")!="cublas": print("pp", d.get("tok_s"), "inv", d.get("pp_invariant"), end=" ")
print()')
        echo "r$r $f $mode $envs${tree:+ [$tree]} $t"
    done
    for h in $HYBRID; do
        IFS=: read -r f budget tree <<<"$h"
        pc=$G/tools/pictl
        [ -n "$tree" ] && pc=$D/$tree/gpu/tools/pictl
        for envs in ${HYBRID_ENVS:-X=1 PINFER_CUDA_PDL=0,PINFER_CUDA_MMV=1}; do
            X=$S/xdg-$r; rm -rf "$X"; mkdir -p "$X" # the instance's logs kept there: cpud's exit line
            env ${envs//,/ } PINFER_KEEP_LOGS=1 XDG_RUNTIME_DIR="$X" timeout 60 "$pc" run -m "$S/$f.gguf" \
                -p "Once upon a time" -n 128 --temp 0 --ignore-eos -c 512 -t 16 --backend cuda \
                --vram-budget "$budget" --json-stats "$S/h.json" >"$S/h.txt" 2>"$S/h.err"
            t=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["decode_tok_s"])' "$S/h.json" 2>/dev/null)
            split=$(grep -o 'per layer:[^|]*' "$S/h.err")
            ffn=$(cat "$X"/pinfer/*/logs/cpud.log 2>/dev/null | grep -o 'ffn [0-9.]* us (median [0-9.]*, p90 [0-9.]*' | tail -1)
            echo "r$r hybrid $f $budget ${tree:-new} $envs $t text $(md5sum <"$S/h.txt" | cut -c1-8) $split| cpud $ffn"
            rm -f "$S/h.json"
        done
    done
done
rm -rf "$S"
