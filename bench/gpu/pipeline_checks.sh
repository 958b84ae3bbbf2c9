#!/bin/bash
# bench/gpu/pipeline_checks.sh — on the GPU machine, the engine's contracts with gpud on the CUDA
# backend: test_backend_ops (every backend through the evaluator: CUDA = CPU within 1e-5, a sequence
# in mixed batches = alone), the invariance test (pictl run/start default to cuda there: thread
# counts, pipeline = in-process, kill -9 and outages, batched = alone), and greedy tokens of the
# reference prompts on --backend cuda vs cpu. Logs and a JSON summary under $OUT.
#
#   bench/gpu/pipeline_checks.sh BIN_DIR CAL_MODEL   (BIN_DIR: pictl and the stages side by side,
#                                                    test_backend_ops; .lib/ beside for .so files)
set -u
BIN=$1
CAL=$2
OUT=${OUT:-/tmp/pinfer-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/checks.log"; }
TINY=models/tiny-relu-llama-f16.gguf

log "test_backend_ops"
timeout 120 "$BIN/test_backend_ops" "$TINY" >"$OUT/backend_ops.log" 2>&1
log "test_backend_ops rc=$? ($(grep -c 'backend cuda' "$OUT/backend_ops.log") cuda lines; $(tail -1 "$OUT/backend_ops.log"))"

log "cuda vs cpu greedy tokens"
agree=0
total=0
for p in "ROMEO:" "First Citizen:" "To be, or not" "KING HENRY:"; do
    for be in cpu cuda; do
        "$BIN/pictl" run --inproc --backend $be -m "$TINY" -p "$p" -n 48 --temp 0 --ignore-eos \
            --json-stats "$OUT/tok-$be.json" >/dev/null 2>>"$OUT/checks.log"
    done
    total=$((total + 1))
    python3 -c "import json,sys; a=json.load(open('$OUT/tok-cpu.json'))['tokens']; b=json.load(open('$OUT/tok-cuda.json'))['tokens']; n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), len(a)); print(n); sys.exit(0 if a==b else 1)" \
        >>"$OUT/checks.log" && agree=$((agree + 1))
done
log "greedy cuda = cpu on $agree of $total prompts (48 tokens each)"

log "invariance with the cuda backend"
PINFER_INV_CAL="$CAL" timeout 420 python3 tests/test_invariance.py "$BIN/pictl" "$TINY" tests/fixtures/calib-shakespeare.txt \
    >"$OUT/invariance.log" 2>&1
log "invariance rc=$? ($(tail -1 "$OUT/invariance.log"))"
grep -E '^FAIL|identical|bitwise|served' "$OUT/invariance.log" | head -40 >>"$OUT/checks.log"
