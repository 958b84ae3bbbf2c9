#!/bin/bash
# bench/gpu/mma.sh — the tensor-core kernels' GPU call (issue 14, branch mma): the CUDA tests, then
# decode / prefill / batch rates of d16 (mma kernels, then PINFER_CUDA_MMA=0 = the CUDA-core
# kernels, same run), d4 and s16, with the HBM floor and cuBLAS prefill in the same run. Stops
# itself before LIMIT seconds (default 185) so that partial results come back.
#
#   bash bench/gpu/mma.sh KIT     KIT: b.tgz (build tree: tests/, bench/, tools/) and lib/ (shared libs)
#   env: MODELS ("d16 d4 s16"), OLD ("d16 s16": files also run with PINFER_CUDA_MMA=0), LIMIT, SKIP_TESTS=1,
#        TILES ("1 2": d16's prefill again under PINFER_CUDA_MMA_TILE=N; test_cuda_mma under each too),
#        U4 ("d16 s16": decode again under PINFER_CUDA_MMA_U=4; test_cuda_mma under it too)
# Results: $OUT/mma.tgz (logs, bench.jsonl) and the key figures on stdout.
set -u
KIT=$1
OUT=${OUT:-/tmp/mma-out}
LIMIT=${LIMIT:-185}
MODELS=${MODELS-d16 d4 s16}
OLD=${OLD-d16 s16}
TILES=${TILES-1 2}
U4=${U4-d16 s16}
T0=$(date +%s)
W=/tmp/mma-kit
mkdir -p "$W" "$OUT/r"
tar -C "$W" -xzf "$KIT/b.tgz"
export LD_LIBRARY_PATH="$PWD/$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SHM=/dev/shm/pinfer-mma
mkdir -p "$SHM"
RUNDIR=$OUT/r
. "$(dirname "$0")/call_lib.sh"
log "start: $(nproc) cores; $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"
# the 7B files in the background while the tests run
synth() {
    local name=$1
    shift
    "$W/tools/pictl" synth --shape llama-7b "$@" -t 6 -q -o "$SHM/$name.gguf" >"$OUT/r/synth-$name.log" 2>&1
}
(for name in $MODELS; do
    case $name in
    d16) synth d16 --type f16 ;;
    d4) synth d4 --type q4_0 ;;
    s16) synth s16 --type f16 --pwri ;;
    esac
done; touch "$SHM/.done") &
if [ -z "${SKIP_TESTS:-}" ]; then
    step 40 test_cuda_mma "$W/tests/test_cuda_mma"
    grep NMSE "$OUT/r/test_cuda_mma.log" | head -8
    grep -m5 "failed" "$OUT/r/test_cuda_mma.log"
    for v in $TILES; do
        step 40 "test_cuda_mma-tile$v" env PINFER_CUDA_MMA_TILE=$v "$W/tests/test_cuda_mma"
    done
    [ -n "$U4" ] && step 40 "test_cuda_mma-u4" env PINFER_CUDA_MMA_U=4 "$W/tests/test_cuda_mma"
    step 90 test_cuda_ops "$W/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf
    grep -m5 "failed" "$OUT/r/test_cuda_ops.log"
    step 40 test_backend_ops "$W/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
    grep -m5 "failed" "$OUT/r/test_backend_ops.log"
    step 60 test_backend_ops_random "$W/tests/test_backend_ops_random"
    grep -m5 "failed" "$OUT/r/test_backend_ops_random.log"
fi
while [ ! -f "$SHM/.done" ] && [ "$(left)" -gt 20 ]; do sleep 1; done
log "synth: $(ls -s "$SHM" | tr '\n' ' ')"
"$W/bench/bench_cuda" --hbm 8 >>"$OUT/r/bench.jsonl" 2>>"$OUT/r/run.log"
for name in $MODELS; do
    f=$SHM/$name.gguf
    [ -f "$f" ] || continue
    mode=dense
    [ "${name#s}" != "$name" ] && mode=sparse
    step 45 "bench-$name" "$W/bench/bench_cuda" "$f" --mode "$mode" -n 256 -c 2048 --pp 512 --batch 1,4,8
    sed "s/^{/{\"file\":\"$name\",/" "$OUT/r/bench-$name.log" | grep '^{' >>"$OUT/r/bench.jsonl"
    if [[ " $OLD " == *" $name "* ]]; then
        step 40 "bench-$name-old" env PINFER_CUDA_MMA=0 "$W/bench/bench_cuda" "$f" --mode "$mode" -n 256 -c 2048 --pp 512 --batch 1,8
        sed "s/^{/{\"file\":\"$name-old\",/" "$OUT/r/bench-$name-old.log" | grep '^{' >>"$OUT/r/bench.jsonl"
    fi
    if [[ " $U4 " == *" $name "* ]]; then
        step 30 "bench-$name-u4" env PINFER_CUDA_MMA_U=4 "$W/bench/bench_cuda" "$f" --mode "$mode" -n 256 -c 2048 --pp 0 --batch 8
        sed "s/^{/{\"file\":\"$name-u4\",/" "$OUT/r/bench-$name-u4.log" | grep '^{' >>"$OUT/r/bench.jsonl"
    fi
    if [ "$name" = d16 ]; then
        for v in $TILES; do
            step 30 "bench-$name-tile$v" env PINFER_CUDA_MMA_TILE=$v "$W/bench/bench_cuda" "$f" --mode "$mode" -n 32 -c 2048 --pp 512
            sed "s/^{/{\"file\":\"$name-tile$v\",/" "$OUT/r/bench-$name-tile$v.log" | grep '^{' >>"$OUT/r/bench.jsonl"
        done
    fi
done
"$W/bench/bench_cuda" --hbm 8 >>"$OUT/r/bench.jsonl" 2>>"$OUT/r/run.log"
log "done"
python3 - "$OUT/r/bench.jsonl" <<'EOF' | tee "$OUT/r/summary.txt"
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'):
        continue
    r = json.loads(l)
    keep = {k: r[k] for k in ('file', 'case', 'mode', 'path', 'tok_s', 'agg_tok_s', 'batch', 'best_gbps',
                              'achieved_gbps', 'pp_invariant', 'profile_ms') if k in r}
    print(json.dumps(keep))
EOF
tar -C "$OUT/r" -czf "$OUT/mma.tgz" .
