#!/bin/bash
# bench/gpu/pipeline_checks.sh — on the GPU machine, the engine's contracts with gpud on the CUDA
# backend: test_backend_ops (every backend through the evaluator: CUDA = CPU within 1e-5, a sequence
# in mixed batches = alone), the invariance test (pictl run/start default to cuda there: thread
# counts, pipeline = in-process, kill -9 and outages, batched = alone), and greedy tokens of the
# reference prompts on --backend cuda vs cpu. Logs and a JSON summary under $OUT.
#
#   bench/gpu/pipeline_checks.sh BIN_DIR CAL_MODEL   (BIN_DIR: pictl and the stages side by side,
#                                                    test_backend_ops; .lib/ beside for .so files)
#   env CHECKS: the parts to run (default "backend_ops greedy fault invariance"); FAULT_MODELS: the
#   models of the fault check (default the tiny one); its results as JSON lines in $OUT/checks.jsonl
set -u
BIN=$1
CAL=$2
OUT=${OUT:-/tmp/pinfer-gpu-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/checks.log"; }
TINY=models/tiny-relu-llama-f16.gguf
CHECKS=${CHECKS:-backend_ops greedy fault invariance}
want() { case " $CHECKS " in *" $1 "*) return 0 ;; esac; return 1; }

if want backend_ops; then
log "test_backend_ops"
timeout 120 "$BIN/test_backend_ops" "$TINY" >"$OUT/backend_ops.log" 2>&1
log "test_backend_ops rc=$? ($(grep -c 'backend cuda' "$OUT/backend_ops.log") cuda lines; $(tail -1 "$OUT/backend_ops.log"))"
fi

if want greedy; then
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
fi

if want invariance; then
log "invariance with the cuda backend"
PINFER_INV_CAL="$CAL" timeout "${INV_TIMEOUT:-420}" python3 tests/test_invariance.py "$BIN/pictl" "$TINY" tests/fixtures/calib-shakespeare.txt \
    >"$OUT/invariance.log" 2>&1
log "invariance rc=$? ($(tail -1 "$OUT/invariance.log"))"
grep -E '^FAIL|identical|bitwise|served' "$OUT/invariance.log" | head -40 >>"$OUT/checks.log"
fi

# ---- a CUDA fault in gpud: reported with the failing call, gpud restarts, the request's tokens are
# unchanged (PINFER_CUDA_FAIL_CALL aims at the middle of the generation: the number of checked
# calls at the end of open and at close of gpud in a pipeline run of the same request — gpud's own
# count: its one-token steps are one graph launch each, the in-process run's are op by op; FAIL_ONCE
# makes the restarted gpud run clean). The reference tokens: an in-process run. Also: each gpud start
# logs its weight upload (time, GB/s).
fault_check() { # model prompt n
    local model=$1 prompt=$2 n=$3 tmp
    tmp=$(mktemp -d)
    "$BIN/pictl" run --inproc --backend cuda -m "$model" -p "$prompt" -n "$n" --temp 0 \
        --ignore-eos --json-stats "$tmp/ref.json" >/dev/null 2>"$tmp/ref.log"
    mkdir -p "$tmp/count"
    PINFER_CUDA_COUNT_CALLS=1 PINFER_KEEP_LOGS=1 XDG_RUNTIME_DIR="$tmp/count" "$BIN/pictl" run -m "$model" \
        -p "$prompt" -n "$n" --temp 0 --ignore-eos -t 2 -c 512 --backend cuda >/dev/null 2>"$tmp/count.log"
    cat "$tmp"/count/pinfer/*/logs/gpud.log >>"$tmp/count.log" 2>/dev/null
    local u t
    u=$(sed -n 's/^cuda: \([0-9]*\) checked CUDA calls at the end of open.*/\1/p' "$tmp/count.log" | head -1)
    t=$(sed -n 's/^cuda: \([0-9]*\) checked CUDA calls at close.*/\1/p' "$tmp/count.log" | tail -1)
    local at=$(( ${u:-500} + ( ${t:-4500} - ${u:-500} ) / 3 ))
    log "fault: gpud in a pipeline run: ${u:-?} calls at open, ${t:-?} at close; failing call $at in gpud"
    mkdir -p "$tmp/run"
    XDG_RUNTIME_DIR="$tmp/run" PINFER_CUDA_FAIL_CALL=$at PINFER_CUDA_FAIL_ONCE="$tmp/failed" \
        "$BIN/pictl" start -m "$model" --name fault -t 2 -c 512 --backend cuda >>"$OUT/checks.log" 2>&1
    XDG_RUNTIME_DIR="$tmp/run" timeout 120 "$BIN/pictl" generate --name fault -p "$prompt" -n "$n" --temp 0 \
        --ignore-eos --json-stats "$tmp/got.json" >/dev/null 2>>"$OUT/checks.log"
    local grc=$?
    XDG_RUNTIME_DIR="$tmp/run" "$BIN/pictl" status --name fault --json >"$tmp/status.json" 2>>"$OUT/checks.log"
    cp "$tmp/run/pinfer/fault/logs/gpud.log" "$OUT/fault-gpud.log" 2>/dev/null
    XDG_RUNTIME_DIR="$tmp/run" "$BIN/pictl" stop --name fault >>"$OUT/checks.log" 2>&1
    python3 - "$tmp" "$grc" "$at" "$OUT/fault-gpud.log" "$model" <<'PY' | tee -a "$OUT/checks.log" >>"$OUT/checks.jsonl"
import json, os, re, sys
tmp, grc, at, glog, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
ref, got, st = load(tmp + "/ref.json"), load(tmp + "/got.json"), load(tmp + "/status.json")
text = open(glog, errors="replace").read() if os.path.exists(glog) else ""
up = [dict(gb=float(a), s=float(b), gbps=float(c)) for a, b, c in
      re.findall(r"([0-9.]+) GB of weights uploaded in ([0-9.]+) s \(([0-9.]+) GB/s\)", text)]
r = {"case": "cuda_fault", "model": model, "fail_call": at, "generate_rc": grc,
     "injected": os.path.exists(tmp + "/failed"),
     "reported": "injected fault (PINFER_CUDA_FAIL_CALL=%d" % at in text,
     "failing_call": (re.findall(r"(?:cuda|cublas): (.+?) failed: injected fault", text) or [None])[0],
     "gpud_restarts": st["stages"]["gpud"]["restarts"] if st else None,
     "tokens_equal": bool(ref and got and ref["tokens"] == got["tokens"]), "uploads": up}
r["ok"] = r["injected"] and r["reported"] and grc == 0 and r["tokens_equal"] and (r["gpud_restarts"] or 0) >= 1
print(json.dumps(r))
PY
    rm -rf "$tmp"
}
if want fault; then
    for fm in ${FAULT_MODELS:-$TINY}; do
        log "cuda fault injection: $fm"
        fault_check "$fm" "ROMEO:" 64
    done
fi
