#!/bin/bash
# bench/gpu/hybrid.sh — hybrid GPU + CPU under a VRAM budget, one call on the GPU machine (issue 10):
#   1. tests/test_hybrid on the calibrated tiny model (placements vs all-CPU greedy, allocator = plan)
#   2. the pipeline (pictl run: gpud on cuda + cpud + predictord) on the tiny model at budgets from
#      below the fixed bytes (whole-layer fallback) to a few neurons per layer to most of the model,
#      and -ngl 3: greedy tokens against the in-process all-CPU run
#   3. 7B shapes (pictl synth, BENCH.md's s16 / s4): sparse hybrid at 8.9 and 12 GiB (F16) and
#      3.1 GiB (Q4_0), -ngl at llama.cpp's layer counts, all-GPU for reference: decode tok/s
#   all the while nvidia-smi polls every process's device memory (poll.log: time, pid, name, MiB),
#   so that each run's peak can be checked against its budget + CUDA context afterwards.
#
#   bench/gpu/hybrid.sh [DIR]   DIR: pictl + stages + test_hybrid + lib/ + tiny-cal.gguf (.device/hybrid)
#   env: OUT (results), DEADLINE (seconds of the whole script, default 225)
#   Results: $OUT/run.log, $OUT/poll.log and everything else packed in $OUT/results.tgz (the device
#   tool returns only a few files: the first call of 2026-12-01 lost the per-run JSON to that limit).
set -u
D=${1:-.device/hybrid}
FINAL=${OUT:-/tmp/hybrid-out}
OUT=/tmp/hybrid-work
mkdir -p "$OUT" "$FINAL"
export PINFER_KEEP_LOGS=1 # the ephemeral instances' logs stay for the copy at the end
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$D/pictl
TINY=$D/tiny-cal.gguf
SHM=/dev/shm/pinfer-hybrid
T0=$(date +%s)
DEADLINE=${DEADLINE:-225}
log() { echo "[$(date +%T.%N | cut -c1-12)] $*" | tee -a "$OUT/run.log"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
mkdir -p "$SHM"

log "start: $(nproc) cores"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv >>"$OUT/run.log" 2>&1
(while :; do
    echo "$(date +%s.%N) $(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null | tr '\n' ';')"
    sleep 0.1
done) >"$OUT/poll.log" 2>&1 &
POLL=$!

# the 7B files, written while the tiny tests run
(
    "$P" synth --shape llama-7b --type f16 --pwri -t "$(nproc)" -q -o "$SHM/s16.gguf" && echo s16 ok
    "$P" synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t "$(nproc)" -q -o "$SHM/s4.gguf" && echo s4 ok
) >"$OUT/synth.log" 2>&1 &
SYNTH=$!

# 1. in-process placements
log "test_hybrid"
timeout 60 "$D/test_hybrid" "$TINY" >"$OUT/test_hybrid.log" 2>&1
log "test_hybrid rc=$? ($(tail -1 "$OUT/test_hybrid.log"))"

# 2. the pipeline on the tiny model
PROMPT="Once upon a time"
tiny_run() { # tag args...
    local tag=$1
    shift
    log "run $tag: $*"
    timeout 40 "$P" run -m "$TINY" -p "$PROMPT" -n 48 --temp 0 --ignore-eos -c 256 -t 8 --json-stats "$OUT/$tag.json" "$@" \
        >"$OUT/$tag.txt" 2>"$OUT/$tag.err"
    log "run $tag rc=$? $(grep -h '\[perf\]' "$OUT/$tag.err" | tail -1)"
}
tiny_run tiny-cpu --inproc --backend cpu
tiny_run tiny-gpu-all --backend cuda
# the fixed bytes on this machine (with the driver reserve): a budget of ~0 makes the supervisor say them
tiny_run tiny-fallback0 --backend cuda --vram-budget 0.00001
FIXED=$(cat /tmp/pinfer-*/run*/logs/supervisor.log 2>/dev/null | grep -o 'take [0-9.]* GiB ([0-9]* bytes)' | tail -1 |
    sed 's/.*(\([0-9]*\) bytes)/\1/')
log "fixed bytes: ${FIXED:-?}"
if [ -n "$FIXED" ]; then
    for extra in 40000 2000000 6000000; do # ~25 neurons (a few per layer), ~1300, ~3900 of 6144
        g=$(awk -v f="$FIXED" -v e="$extra" 'BEGIN { printf "%.9f", (f + e) / 1073741824 }')
        tiny_run "tiny-budget-$extra" --backend cuda --vram-budget "$g"
    done
    g=$(awk -v f="$FIXED" 'BEGIN { printf "%.9f", (f - 3000000) / 1073741824 }') # whole-layer fallback
    tiny_run tiny-fallback --backend cuda --vram-budget "$g"
fi
tiny_run tiny-ngl3 --backend cuda -ngl 3 --dense
tiny_run tiny-cpu-dense --inproc --backend cpu --dense

# 3. 7B speed
wait $SYNTH
log "synth: $(tr '\n' ' ' <"$OUT/synth.log")"
ls -l "$SHM" >>"$OUT/run.log"
big_run() { # tag file args...
    local tag=$1 f=$2
    shift 2
    [ -f "$SHM/$f.gguf" ] || return 0
    if [ "$(left)" -lt 25 ]; then
        log "skip $tag: $(left) s left"
        return 0
    fi
    log "run $tag: $*"
    timeout $(($(left) - 5)) "$P" run -m "$SHM/$f.gguf" -p "$PROMPT" -n 64 --temp 0 --ignore-eos -c 512 -t 16 \
        --json-stats "$OUT/$tag.json" "$@" >"$OUT/$tag.txt" 2>"$OUT/$tag.err"
    log "run $tag rc=$? $(grep -h '\[perf\]' "$OUT/$tag.err" | tail -1)"
}
big_run s16-8.9 s16 --backend cuda --vram-budget 8.9
big_run s4-3.1 s4 --backend cuda --vram-budget 3.1
big_run s16-ngl20 s16 --backend cuda -ngl 20 --dense
big_run s4-ngl17 s4 --backend cuda -ngl 17 --dense
big_run s16-12 s16 --backend cuda --vram-budget 12
big_run s16-gpu s16 --backend cuda

kill $POLL 2>/dev/null
mkdir -p "$OUT/logs"
for d in /tmp/pinfer-*/*/logs; do
    [ -d "$d" ] && cp -r "$d" "$OUT/logs/$(basename "$(dirname "$d")")" 2>/dev/null
done
log "done in $(($(date +%s) - T0)) s"
cp "$OUT/run.log" "$OUT/poll.log" "$FINAL/"
tar -czf "$FINAL/results.tgz" -C "$OUT" .
