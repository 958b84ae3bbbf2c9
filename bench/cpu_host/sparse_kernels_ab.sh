#!/bin/bash
# bench/cpu_host/sparse_kernels_ab.sh — the sparse FFN's CPU kernels, old tree vs new, in one run on the
# GPU machine's host (issue 9's s4 and the hybrid's F16 cold rows):
#   1. the read bandwidth (bench_gemv's STREAM read, -t 16)
#   2. bench_ffn (ffn_partial alone over the 32 layers, 10 % random masks) old/new, q4_0 and F16, -t 16 and -t 8
#   3. decode of s4 (7B q4_0, q4_0 predictors), `pictl run --inproc -t 16`, 3 interleaved rounds old/new,
#      and whether the logits of old and new are the same bytes (the new kernels change no operation)
#   bench/cpu_host/sparse_kernels_ab.sh DIR   DIR/old, DIR/new: release trees (tools/pictl, bench/bench_ffn,
#   bench/bench_gemv), DIR/lib: .so files (all may come packed as DIR/trees.txz). Results in $OUT/ab.log.
#   env VARIANTS: more trees (bench/bench_ffn only) timed beside old and new; N: tokens per decode (64);
#   PINFER_POOL_STATS=1 puts the pool's straggle / solo counts of each decode in the log; DECODE_VARIANTS:
#   more trees (tools/pictl) decoded beside old and new; SKIP_FFN: no bench_ffn; SKIP_DECODE: no decode; PERF=1: a perf profile of
#   one decode per tree (if the host has perf), its top symbols in the log; F16S_FRACS: the mask
#   fractions of the s16 part (default 0.1).
set -u
D=$1
[ -f "$D/trees.txz" ] && tar -xJf "$D/trees.txz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
O=${OUT:-/tmp/ab-out}
R=/tmp/ab-work
mkdir -p "$O" "$R"
L=$O/ab.log
log() { echo "[$(date +%T)] $*" | tee -a "$L"; }
log "start: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
P=$D/new/tools/pictl
$P synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t 16 -q -o /dev/shm/s4.gguf 2>&1 | tail -1
log "s4 synth done"
timeout 60 "$D/new/bench/bench_gemv" -t 16 -n 3 -T q4_0 2>/dev/null | grep -E '"read|"op":"read' | tee -a "$L"
ffn() { # tree model threads [fraction]
    timeout 60 "$D/$1/bench/bench_ffn" "/dev/shm/$2.gguf" -t "$3" -n 5 -p "${4:-0.1}" | sed "s/^/$1 /" | tee -a "$L"
}
[ -z "${SKIP_FFN:-}" ] && for r in 1 2; do for t in 16 8; do for v in old new ${VARIANTS:-}; do ffn $v s4 $t; done; done; done
dec() { # tree round
    local n=$1-r$2
    timeout 60 "$D/$1/tools/pictl" run --inproc -m /dev/shm/s4.gguf -t 16 -n "${N:-64}" -c 512 -p "Once upon a time" --temp 0 \
        --ignore-eos --json-stats "$R/$n.json" --dump-logits "$R/$n.logits" >/dev/null 2>"$R/$n.err"
    log "s4 decode $n $(python3 -c "import json;d=json.load(open('$R/$n.json'));print(round((d['n_gen']-1)/d['decode_ms']*1e3,2),'tok/s',{k:round(v) for k,v in d.get('phase_ms',{}).items()})" 2>&1 | tail -1) $(grep -h '\[pool\]' "$R/$n.err" | head -1)"
}
[ -z "${SKIP_DECODE:-}" ] && for r in 1 2 3; do for v in old new ${DECODE_VARIANTS:-}; do dec $v $r; done; done
if [ -n "${PERF:-}" ] && command -v perf >/dev/null; then
    for v in old new ${DECODE_VARIANTS:-}; do
        perf record -q -o "$R/perf.$v" "$D/$v/tools/pictl" run --inproc -m /dev/shm/s4.gguf -t 16 -n "${N:-64}" -c 512 \
            -p "Once upon a time" --temp 0 --ignore-eos >/dev/null 2>&1
        log "perf $v:"
        perf report -i "$R/perf.$v" --stdio -n 2>/dev/null | grep -v '^#' | grep -v '^$' | head -12 | tee -a "$L"
    done
elif [ -n "${PERF:-}" ]; then
    log "no perf on this host"
fi
[ -z "${SKIP_DECODE:-}" ] && { cmp -s "$R/old-r1.logits" "$R/new-r1.logits" && log "s4 logits old = new (bytes)" ||
    log "s4 logits DIFFER old vs new"; }
rm -f /dev/shm/s4.gguf
if [ -z "${SKIP_F16:-}" ]; then
    $P synth --shape llama-7b --type f16 --pwri -t 16 -q -o /dev/shm/s16.gguf 2>&1 | tail -1
    log "s16 synth done"
    # F16S_FRACS: the fractions timed on s16 (0.016: the cold share of a hybrid decode at 8.9 GiB)
    for p in ${F16S_FRACS:-0.1}; do for r in 1 2; do for v in old new ${VARIANTS:-}; do ffn $v s16 16 "$p"; done; done; done
    rm -f /dev/shm/s16.gguf
fi
log "end: load $(cut -d' ' -f1-3 /proc/loadavg)"
