#!/bin/bash
# bench/gpu/final_check.sh — one GPU-machine call that checks a merged tree end to end:
#   1. the CUDA tests (per-op against f64, the tensor-core kernels, the host-side traits, the device
#      top-k, mixed batches = alone; the tensor-core ones also in the split activation mode, the
#      attention's cluster merge on every model and on none) and test_hybrid on the calibrated tiny model;
#      cuda_no_device (test_supervisor.py --cuda-no-device: what the build does where it sees no device)
#   2. pipeline_checks.sh greedy + fault: gpud on cuda, greedy tokens vs cpu, kill -9 of each stage
#   3. hybrid.sh's tiny part (SKIP_7B): hybrid greedy = all-CPU at three budgets, kill -9 each stage
#   4. the CPU table of issue 9 (bench_sparse.py --pipeline: dense / sparse, in-process / pipeline,
#      against the floors) on the host's 16 cores, release binaries; then llama.cpp's llama-bench on
#      the same dense file when DIR/llama.txz is there
#   5. the disk tier on the host's disk (bench/disk/gpu_host.sh): a 7B q4_0 file and its bundle,
#      --ram-budget at 25 % and 50 % of the FFN in process against its floor, tokens against all-in-RAM
#   7. (HYBRID_RUNS) issue 10's 7B hybrid speed runs of hybrid.sh
#   8. (CUDA_SPEED=1, when DIR/gpu has bench/bench_cuda) issue 14's all-GPU figures: the HBM read floor,
#      d16 / s16 / d4 decode (CUDA_VARIANTS: more "tag:d16|s16|d4:dense|sparse:ENV=V,..." runs) and d16's pp512 with its
#      profile and pp_invariant (PP_VARIANTS: its environments, e.g. "X=1 PINFER_CUDA_MMA_ACT=split")
#   6. issue 13's 7B Q4_K_M against Q4_0: decode on cuda and on the host's CPU (the Q4_K_M file is
#      synthesized in the background from the start: its reference quantizers take minutes)
#
#   bench/gpu/final_check.sh DIR CAL   DIR/gpu: a -Dcuda=enabled build tree (tools/pictl, the stages,
#   tests/*), DIR/rel: a release -Dcuda=disabled tree (tools/pictl, stages, bench/bench_gemv), DIR/lib:
#   .so files; both trees may come packed as DIR/trees.txz (pack_trees.sh). CAL: the calibrated tiny model.
#   env OUT, DEADLINE (seconds, default 330), SKIP_DISK=1 (no step 5), SKIP_TABLE=1 (no step 4),
#   TABLE_F16=1 (step 4 also for the F16 pair d16 / s16).
#   Results: $OUT/final.log and $OUT/final.tgz.
set -u
D=$1
CAL=$2
FINAL=${OUT:-/tmp/final-out}
W=/tmp/final-work
mkdir -p "$FINAL" "$W"
T0=$(date +%s)
DEADLINE=${DEADLINE:-330}
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
log() { echo "[$(date +%T)] $*" | tee -a "$W/final.log"; }
[ -f "$D/trees.txz" ] && tar -xJf "$D/trees.txz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
G=$D/gpu
TINY=models/tiny-relu-llama-f16.gguf
log "start: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
KM=/dev/shm/pinfer-km
mkdir -p "$KM"
# (only with Q4KM=1: even a nice-19 job on every core slows the CPU figures of step 4 2-3x)
KMPID=
if [ -n "${Q4KM:-}" ]; then
    (nice -n 19 "$G/tools/pictl" synth --shape llama-7b --type q4_k_m -t "$(nproc)" -q -o "$KM/dkm.gguf" &&
        echo "q4_k_m synth done at $(date +%T)") >"$W/synth_km.log" 2>&1 &
    KMPID=$!
fi

# 1. CUDA tests
for t in test_cuda_ops test_backend_ops test_backend_ops_random test_cuda_mma test_cuk_traits; do
    [ -x "$G/tests/$t" ] || continue
    timeout 90 "$G/tests/$t" "$TINY" >"$W/$t.log" 2>&1
    log "$t rc=$? ($(tail -1 "$W/$t.log"))"
    grep -m5 "failed:" "$W/$t.log" | tee -a "$W/final.log"
done
# env_tests NAME "VALUES" TEST...: each test again under NAME=VALUE for each value (the tests check
# each path bitwise against the other inside)
env_tests() {
    local name=$1 values=$2 v t l
    shift 2
    for v in $values; do
        for t in "$@"; do
            [ -x "$G/tests/$t" ] || continue
            l=$W/$t-$name-$v.log
            env "$name=$v" timeout 90 "$G/tests/$t" "$TINY" >"$l" 2>&1
            log "$t $name=$v rc=$? ($(tail -1 "$l"))"
            grep -m5 "failed:" "$l" | tee -a "$W/final.log"
        done
    done
}
# the split activation mode of the F16 products (the f16 mode is the default): its invariance, and
# the f32 tolerances against the CPU that it keeps
env_tests PINFER_CUDA_MMA_ACT split test_cuda_mma test_cuda_ops test_backend_ops
# the Q types' products in two launches (PINFER_CUDA_Q1=0; one launch for one token is the default
# run above)
env_tests PINFER_CUDA_Q1 0 test_cuda_ops test_backend_ops
# the attention's merge in clusters (1, the default, beside the streamed F16/BF16 products only; 2 on
# every model, 0 never): the same bits either way
env_tests PINFER_CUDA_ATTN_CLUSTER "0 2" test_cuda_ops test_backend_ops
timeout 60 "$G/tests/test_hybrid" "$CAL" >"$W/test_hybrid.log" 2>&1
log "test_hybrid rc=$? ($(tail -1 "$W/test_hybrid.log"))"
# no device (CUDA_VISIBLE_DEVICES=""): --backend cuda fails at once naming the reason, auto runs on the CPU
timeout 60 python3 tests/test_supervisor.py "$G/tools/pictl" "$TINY" "$G" --cuda-no-device >"$W/cuda_no_device.log" 2>&1
log "cuda_no_device rc=$? ($(tail -1 "$W/cuda_no_device.log"))"
grep -m5 "FAIL" "$W/cuda_no_device.log" | tee -a "$W/final.log"
grep -m5 "failed:" "$W/test_hybrid.log" | tee -a "$W/final.log"

# 2. the pipeline on cuda: greedy vs cpu, kill -9 of each stage
mkdir -p "$W/pc"
OUT="$W/pc" CHECKS="greedy fault" timeout $(($(left) > 200 ? 90 : 45)) bash bench/gpu/pipeline_checks.sh "$G/tools" "$CAL" \
    >"$W/pc.out" 2>&1
log "pipeline_checks rc=$?"
grep -hE "rc=|equal|differ|DIFFER|same|FAIL" "$W/pc/checks.log" 2>/dev/null | tail -15 | tee -a "$W/final.log"

# 3. hybrid on the tiny model: budgets and kills (the stages beside pictl: a flat dir of the tree)
H=$W/hy
mkdir -p "$H/lib" "$W/hyo"
cp "$G/tools/pictl" "$G/gpud/gpud" "$G/cpud/cpud" "$G/predictord/predictord" "$G/loaderd/loaderd" \
    "$G/tests/test_hybrid" "$H/" 2>/dev/null
cp bench/gpu/hybrid_kill.py bench/gpu/hybrid_poll.py "$H/"
cp "$G/bench/bench_kern" "$D/rel/bench/bench_gemv" "$H/" 2>/dev/null # the floors' bandwidths (step 7)
cp "$D"/lib/* "$H/lib/" 2>/dev/null
[ -x "$G/bench/ipc_exit" ] && cp "$G/bench/ipc_exit" "$H/"
OUT="$W/hyo" SKIP_7B=1 DEADLINE=80 timeout 95 bash bench/gpu/hybrid.sh "$H" "$CAL" >"$W/hy.out" 2>&1
log "hybrid tiny rc=$?"
grep -hE "rc=|equal|DIFFERENT|kill|bitwise|FAIL" "$W/hyo/run.log" 2>/dev/null | tail -25 | tee -a "$W/final.log"

# 4. issue 9's CPU table (release binaries; the files in /dev/shm): bench_sparse.py for one weight type,
#    its JSON in W/NAME.jsonl, the figures into the log
R=$D/rel
table() { # NAME TOKENS bench_sparse.py's type arguments...
    local name=$1 n=$2
    shift 2
    timeout $(($(left) - 60)) python3 bench/bench_sparse.py --build "$R" "$@" -t 16 -n "$n" --reps 3 --pipeline \
        --dir /dev/shm --keep >"$W/$name.jsonl" 2>"$W/$name.err"
    log "bench_sparse $name rc=$?"
    grep -E '"decode"|pipeline_ratio|bandwidth|speedup' "$W/$name.jsonl" | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print({k:d[k] for k in ("step","mode","decode_tok_s","all_tok_s","floor_tok_s","of_floor","pipeline_over_inproc","read_gbps","sparse_over_dense") if k in d})' |
        tee -a "$W/final.log"
}
if [ -z "${SKIP_TABLE:-}" ] && [ "$(left)" -gt 100 ]; then
    table table 32 --type q4_0 --pred-type q4_0
    # the F16 pair (d16 / s16) of the same table, when asked and the time allows (~230 s: two 13.5 GB files
    # synthesized, 15 runs of 16 tokens)
    [ -n "${TABLE_F16:-}" ] && [ "$(left)" -gt 300 ] && table table16 16 --type f16
else
    log "bench_sparse skipped: $(left) s left"
fi

# 4b. llama.cpp's dense decode of the same d4 file in the same run (a native build of the dev machine's
#     llama.cpp, DIR/llama.txz holding its bin/; `llama-bench -p 0 -n 32 -t 16 -r 3`)
D4=$(ls /dev/shm/pinfer-bench-sparse-*/synth-llama-7b-q4_0.gguf 2>/dev/null | head -1)
if [ -f "$D/llama.txz" ] && [ -n "$D4" ] && [ "$(left)" -gt 70 ]; then
    mkdir -p "$W/llama" && tar -xJf "$D/llama.txz" -C "$W/llama"
    LD_LIBRARY_PATH="$W/llama/bin:$LD_LIBRARY_PATH" timeout 45 "$W/llama/bin/llama-bench" -m "$D4" -p 0 -n 32 -t 16 -r 3 \
        >"$W/llama-bench.txt" 2>&1
    log "llama-bench d4 rc=$? $(grep -E 'tg32' "$W/llama-bench.txt" | tr -s ' ' | tail -1)"
    D16=$(ls /dev/shm/pinfer-bench-sparse-*/synth-llama-7b-f16.gguf 2>/dev/null | head -1)
    if [ -n "${TABLE_F16:-}" ] && [ -n "$D16" ] && [ "$(left)" -gt 70 ]; then # the F16 pair's dense line
        LD_LIBRARY_PATH="$W/llama/bin:$LD_LIBRARY_PATH" timeout 60 "$W/llama/bin/llama-bench" -m "$D16" -p 0 -n 12 -t 16 \
            -r 2 >"$W/llama-bench16.txt" 2>&1
        log "llama-bench d16 rc=$? $(grep -E 'tg12' "$W/llama-bench16.txt" | tr -s ' ' | tail -1)"
    fi
fi

# 5. the disk tier on this host's disk: bench/disk/gpu_host.sh (25 % and 50 % of the FFN in RAM, the
#    floor measured after each run, tokens against all in RAM; F16 when the time allows)
S4=$(ls /dev/shm/pinfer-bench-sparse-*/synth-llama-7b-q4_0-pwri.gguf 2>/dev/null | head -1)
if [ -z "${SKIP_DISK:-}" ] && [ "$(left)" -gt 50 ]; then
    mkdir -p "$W/disk"
    S4=$S4 DEADLINE=$(($(left) - 20 > 115 ? 115 : $(left) - 20)) timeout $(($(left) - 5)) \
        bash bench/disk/gpu_host.sh "$R/tools/pictl" "$W/disk" >"$W/disk.out" 2>&1
    log "disk tier rc=$?"
    tail -n 14 "$W/disk.out" | tee -a "$W/final.log"
fi

# 6. Q4_K_M vs Q4_0 (d4 of bench_sparse's run), decode on cuda and on the CPU (Q4KM=1)
if [ -n "$KMPID" ]; then
D4=$(ls /dev/shm/pinfer-bench-sparse-*/synth-llama-7b-q4_0.gguf 2>/dev/null | head -1)
if [ "$(left)" -gt 30 ]; then
    W8=$(($(left) - 25))
    timeout $((W8 > 5 ? W8 : 5)) tail --pid=$KMPID -f /dev/null
fi
log "q4_k_m: $(cat "$W/synth_km.log" | tail -1) $(ls -l "$KM" | tail -1)"
kill $KMPID 2>/dev/null
if [ -f "$KM/dkm.gguf" ] && [ -n "$D4" ] && ! kill -0 $KMPID 2>/dev/null; then
    for f in "$D4" "$KM/dkm.gguf"; do
        for be in cuda cpu; do
            [ "$(left)" -lt 12 ] && break
            timeout $(($(left) - 5)) "$G/tools/pictl" run --inproc --backend $be -m "$f" -p "Once upon a time" -n 48                 -c 512 -t 16 --temp 0 --ignore-eos --json-stats "$W/km-$be.json" >/dev/null 2>"$W/km-$be.err"
            log "decode $(basename "$f") $be rc=$? $(grep -h '\[perf\]' "$W/km-$be.err" | tail -1)"
        done
    done
fi
fi

# 7. issue 10's 7B hybrid speed (env HYBRID_RUNS, e.g. "s16-8.39 s4-2.59": hybrid.sh's part 3 only,
#    the s4 file of bench_sparse's run reused, s16 synthesized there)
if [ -n "${HYBRID_RUNS:-}" ] && [ "$(left)" -gt 60 ]; then
    mkdir -p "$W/hy7"
    S4=$(ls /dev/shm/pinfer-bench-sparse-*/synth-llama-7b-q4_0-pwri.gguf 2>/dev/null | head -1) SPEED_ONLY=1 \
        ROUNDS=${HYBRID_ROUNDS:-1} RUNS="$HYBRID_RUNS" OUT="$W/hy7" DEADLINE=$(($(left) - 10)) timeout $(($(left) - 5)) bash bench/gpu/hybrid.sh "$H" "$CAL" \
        >"$W/hy7.out" 2>&1
    log "hybrid 7B rc=$?"
    grep -hE "run s|split|floors:|x_floor" "$W/hy7/run.log" 2>/dev/null | tail -24 | tee -a "$W/final.log"
fi

# 8. issue 14's all-GPU figures (CUDA_SPEED=1): files reused from the steps before where they exist
BC=$G/bench/bench_cuda
if [ -n "${CUDA_SPEED:-}" ] && [ -x "$BC" ] && [ "$(left)" -gt 40 ]; then
    CS=/dev/shm/pinfer-cs
    mkdir -p "$CS"
    pick() { ls $1 2>/dev/null | head -1; }
    D4=$(pick "/dev/shm/pinfer-bench-sparse-*/synth-llama-7b-q4_0.gguf")
    S16=$(pick "/dev/shm/pinfer-hy*/s16.gguf /dev/shm/*/s16.gguf")
    [ -n "$D4" ] || { "$G/tools/pictl" synth --shape llama-7b --type q4_0 -t 16 -q -o "$CS/d4.gguf" && D4=$CS/d4.gguf; }
    [ -n "$S16" ] || { "$G/tools/pictl" synth --shape llama-7b --type f16 --pwri -t 16 -q -o "$CS/s16.gguf" && S16=$CS/s16.gguf; }
    "$G/tools/pictl" synth --shape llama-7b --type f16 -t 16 -q -o "$CS/d16.gguf"
    timeout 20 "$BC" --hbm 8 2>&1 | tail -1 | tee -a "$W/final.log"
    for v in d16:d16:dense:X=1 s16:s16:sparse:X=1 d4:d4:dense:X=1 ${CUDA_VARIANTS:-}; do
        IFS=: read -r tag f mode envs <<<"$v"
        case $f in d16) f=$CS/d16.gguf ;; s16) f=$S16 ;; d4) f=$D4 ;; esac
        [ "$(left)" -lt 20 ] && break
        env ${envs//,/ } timeout 30 "$BC" "$f" --mode "$mode" -n 256 -c 2048 --pp 0 2>"$W/cs-$tag.err" |
            grep '"case":"decode"' | sed "s/^/cuda $tag /" | tee -a "$W/final.log"
    done
    # PP_VARIANTS: the pp512 runs' environments ("X=1 PINFER_CUDA_MMA_ACT=split": the default f16
    # activation mode and the split)
    for envs in ${PP_VARIANTS:-X=1}; do
        [ "$(left)" -gt 25 ] && env ${envs//,/ } timeout $(($(left) - 5)) "$BC" "$CS/d16.gguf" --mode dense -n 16 \
            -c 2048 --pp 512 2>"$W/cs-pp.err" | grep '"case":"prefill"' | sed "s/^/cuda d16-pp $envs /" |
            tee -a "$W/final.log"
    done
    rm -rf "$CS"
fi

log "done in $(($(date +%s) - T0)) s"
cp "$W/final.log" "$FINAL/"
tar -czf "$FINAL/final.tgz" -C "$W" --exclude='*.bin' --exclude='*.gguf' --exclude='*.logits' .
