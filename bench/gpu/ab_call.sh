#!/bin/bash
# bench/gpu/ab_call.sh DIR — a kernel change against the tree before it, in one GPU call:
#   1. the new tree's CUDA tests (TESTS, default: test_cuda_ops, test_backend_ops, test_backend_ops_random,
#      test_cuda_mma — per-op against f64, fused = unfused and batched = alone bitwise)
#   2. bench_kern's cases KERN (default "gateup_11008 qkv_12288"), KROUNDS rounds (2), each case under
#      every KVARIANTS entry "TREE:ENV" (TREE new | old; ENV NAME=VALUE, X=1 for none; default
#      "new:X=1 old:X=1"), interleaved
#   3. decode_rounds.sh with VARIANTS (default "d16:dense:X=1 d16:dense:X=1:old") in ROUNDS rounds (3),
#      the HBM read floor before and after
# DIR: trees.txz (the new tree's gpu/: pack_ab.sh new), old.txz (the old tree's gpu/: pack_ab.sh old),
# lib/ (the .so files). env LIMIT (seconds the call may take, default 400), OUT (logs; the device's
# $OUT: at most 8 files come back — run.log, synth.log, rounds.log and one a test).
set -u
D=$1
T0=$(date +%s) LIMIT=${LIMIT:-400} RUNDIR=${OUT:-/tmp/ab-out}
mkdir -p "$RUNDIR"
. "$(dirname "$0")/call_lib.sh"
log "gpu: $(nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1)"
[ -f "$D/trees.txz" ] && tar -xJf "$D/trees.txz" -C "$D" && rm -f "$D/trees.txz"
[ -f "$D/old.txz" ] && mkdir -p "$D/old" && tar -xJf "$D/old.txz" -C "$D/old" && rm -f "$D/old.txz"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
G=$D/gpu
M=models/tiny-relu-llama-f16.gguf
S=/dev/shm/pinfer-rounds
mkdir -p "$S"
# the 7B files decode_rounds.sh needs, written while the tests run
(. "$(dirname "$0")/bench_files.sh"
for f in d16 s16 d4 s4; do
    case " ${VARIANTS:-d16:}" in *[[:space:]]"$f:"*) bench_file "$G/tools/pictl" "$S" "$f" ;; esac
done
touch "$S/.done") >"$RUNDIR/synth.log" 2>&1 &
for t in ${TESTS-test_cuda_ops test_backend_ops test_backend_ops_random test_cuda_mma}; do
    case $t in test_cuda_ops | test_backend_ops) a=$M ;; *) a= ;; esac
    step 90 "$t" "$G/tests/$t" $a
done
for r in $(seq "${KROUNDS:-2}"); do
    for c in ${KERN-gateup_11008 qkv_12288}; do
        for v in ${KVARIANTS:-new:X=1 old:X=1}; do
            IFS=: read -r tree env <<<"$v"
            b=$G/bench/bench_kern
            [ "$tree" = old ] && b=$D/old/gpu/bench/bench_kern
            log "kern r$r $c $tree $env $(env "$env" timeout 30 "$b" --reps 40 --only "$c" 2>&1 | grep "\"$c\"")"
        done
    done
done
while [ ! -f "$S/.done" ] && [ "$(left)" -gt 60 ]; do sleep 1; done
log "synth: $(ls -s "$S" | tr '\n' ' ')"
step $(($(left) - 5)) rounds env ROUNDS="${ROUNDS:-3}" VARIANTS="${VARIANTS:-d16:dense:X=1 d16:dense:X=1:old}" \
    bash "$(dirname "$0")/decode_rounds.sh" "$D"
cat "$RUNDIR/rounds.log"
log "hbm after: $("$G/bench/bench_cuda" --hbm 8 2>/dev/null | tail -1)"
