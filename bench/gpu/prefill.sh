#!/bin/bash
# bench/gpu/prefill.sh — the prefill kernels' GPU call (issue 14, branches gpre, pattn): the bitwise
# CUDA tests (test_cuda_mma, also under the prefill tilings of TILES; test_cuda_ops, test_backend_ops,
# test_backend_ops_random, the first two also with PINFER_CUDA_PATTN=2 = the tiled prompt attention
# for every batch of more than one token), then pp512 of d16 (default = the tiled attention,
# PINFER_CUDA_PATTN=0 = cuk_attn.cu's split-K attention for every batch, and each tiling of TILES, same
# run; PINFER_CUDA_PATTN_PF=1 = its variant that prefetches the next chunk, PINFER_CUDA_PATTN_TT=16 =
# tiles of 16 tokens, each with test_cuda_ops and test_backend_ops) and
# d4, each with its per-part profile of one 512-token batch and of a decode step.
# Stops itself before LIMIT seconds (default 210) so that partial results come back.
#
#   bash bench/gpu/prefill.sh KIT     KIT: b.txz (build tree: tests/, bench/, tools/) and lib/
#   env: LIMIT, TILES (e.g. "3 5 6": test_cuda_mma and d16's prefill again under PINFER_CUDA_MMA_TILE=N;
#   default none)
# Results: $OUT/prefill.tgz (logs, bench.jsonl), $OUT/summary.txt, and the key figures on stdout.
set -u
KIT=$1
OUT=${OUT:-/tmp/prefill-out}
LIMIT=${LIMIT:-210}
TILES=${TILES-}
T0=$(date +%s)
W=/tmp/prefill-kit
mkdir -p "$W" "$OUT/r"
xz -dc "$KIT/b.txz" | tar -C "$W" -xf -
export LD_LIBRARY_PATH="$PWD/$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SHM=/dev/shm/pinfer-prefill
mkdir -p "$SHM"
RUNDIR=$OUT/r
. "$(dirname "$0")/call_lib.sh"
log "start: $(nproc) cores; $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"
(for name in d16 d4; do
    t=f16
    [ $name = d4 ] && t=q4_0
    "$W/tools/pictl" synth --shape llama-7b --type $t -t 8 -q -o "$SHM/$name.gguf" >"$OUT/r/synth-$name.log" 2>&1
done; touch "$SHM/.done") &
step 40 test_cuda_mma "$W/tests/test_cuda_mma"
grep -m3 "failed" "$OUT/r/test_cuda_mma.log"
for v in $TILES; do
    step 40 "test_cuda_mma-tile$v" env PINFER_CUDA_MMA_TILE=$v "$W/tests/test_cuda_mma"
    grep -m3 "failed" "$OUT/r/test_cuda_mma-tile$v.log"
done
step 60 test_cuda_ops "$W/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf
grep -m8 "failed\|FAIL" "$OUT/r/test_cuda_ops.log"
step 40 test_backend_ops "$W/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
grep -m8 "failed\|FAIL" "$OUT/r/test_backend_ops.log"
while [ ! -f "$SHM/.done" ] && [ "$(left)" -gt 20 ]; do sleep 1; done
log "synth: $(ls -s "$SHM" | tr '\n' ' ')"
bench() { # name file env...
    local name=$1 f=$2
    shift 2
    [ -f "$f" ] || return
    step 45 "bench-$name" env "$@" "$W/bench/bench_cuda" "$f" --mode dense -n 32 -c 2048 --pp 512
    sed "s/^{/{\"file\":\"$name\",/" "$OUT/r/bench-$name.log" | grep '^{' >>"$OUT/r/bench.jsonl"
    grep '"prefill"' "$OUT/r/bench-$name.log" | cut -c1-400
    grep '"decode"' "$OUT/r/bench-$name.log" | grep -o '"tok_s":[0-9.]*\|"first_ids":[^]]*]\|"profile_ms":[^}]*}' | tr '\n' ' '
    echo
}
bench d16 "$SHM/d16.gguf" PINFER_NONE=1
bench d16-splitk "$SHM/d16.gguf" PINFER_CUDA_PATTN=0
bench d16-pf "$SHM/d16.gguf" PINFER_CUDA_PATTN_PF=1
bench d16-tt16 "$SHM/d16.gguf" PINFER_CUDA_PATTN_TT=16
step 60 test_cuda_ops-pf env PINFER_CUDA_PATTN_PF=1 "$W/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf
grep -m8 "failed\|FAIL" "$OUT/r/test_cuda_ops-pf.log"
step 40 test_backend_ops-pf env PINFER_CUDA_PATTN_PF=1 "$W/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
grep -m8 "failed\|FAIL" "$OUT/r/test_backend_ops-pf.log"
step 60 test_cuda_ops-tt16 env PINFER_CUDA_PATTN_TT=16 "$W/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf
grep -m8 "failed\|FAIL" "$OUT/r/test_cuda_ops-tt16.log"
step 40 test_backend_ops-tt16 env PINFER_CUDA_PATTN_TT=16 "$W/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
grep -m8 "failed\|FAIL" "$OUT/r/test_backend_ops-tt16.log"
step 60 test_backend_ops_random "$W/tests/test_backend_ops_random"
grep -m8 "failed\|FAIL" "$OUT/r/test_backend_ops_random.log"
step 60 test_cuda_ops-pattn2 env PINFER_CUDA_PATTN=2 "$W/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf
grep -m8 "failed\|FAIL" "$OUT/r/test_cuda_ops-pattn2.log"
step 40 test_backend_ops-pattn2 env PINFER_CUDA_PATTN=2 "$W/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
grep -m8 "failed\|FAIL" "$OUT/r/test_backend_ops-pattn2.log"
bench d4 "$SHM/d4.gguf" PINFER_NONE=1
for v in $TILES; do
    bench "d16-tile$v" "$SHM/d16.gguf" PINFER_CUDA_MMA_TILE=$v
done
log "done"
python3 - "$OUT/r/bench.jsonl" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'):
        continue
    r = json.loads(l)
    keep = {k: r[k] for k in ('file', 'case', 'path', 'tok_s', 'pp_invariant', 'profile_ms') if k in r}
    print(json.dumps(keep))
EOF
tar -C "$OUT/r" -czf "$OUT/prefill.tgz" .
