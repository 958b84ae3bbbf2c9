#!/bin/bash
# bench/gpu/run.sh — the GPU machine's one call (DEVICE.md, BENCH.md): builds nothing (the build
# directory travels with the tree), runs the CUDA tests, writes the four 7B-shape model files to
# /dev/shm, measures the HBM read floor and each decode product alone (bench_kern), then decode /
# prefill of every file in interleaved rounds. Results: $OUT/bench.jsonl (one JSON line per case),
# $OUT/tests.log, $OUT/run.log.
#
#   bench/gpu/run.sh [BUILD_DIR]     env: ROUNDS (3), N_GEN (256), PP (512), MODELS ("d16 s16 d4 s4"),
#                                         SKIP_TESTS=1, BATCH ("1,4,8"), EAGER (64),
#     OLD_BENCH=FILE  another bench_cuda (e.g. an earlier build) run beside in every round, its
#                     lines tagged "<name>-old": a change's cost measured in the same run
#     PIPELINE_BIN=DIR  pipeline_checks.sh (with CAL, the calibrated tiny model): its greedy and
#                     fault checks after the tests, its invariance test after the benchmarks
#     SCRIPTS=DIR     where pipeline_checks.sh is (default: beside this script)
#     ALT_ENV="VAR=V ..."  the tests and every round's bench once more under this environment,
#                     lines tagged "<name>-alt" (e.g. PINFER_CUDA_WIDE_R=8, another prefill tiling);
#                     ALT_MODELS: the files it runs on (default MODELS)
#     FAULT_7B=1      with PIPELINE_BIN: the fault check also on the d4 file (a 7B gpud's restart:
#                     its weight upload time and GB/s, twice)
set -u
B=${1:-build-gpu}
OUT=${OUT:-/tmp/pinfer-gpu-out}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}
N_GEN=${N_GEN:-256}
PP=${PP:-512}
MODELS=${MODELS-d16 s16 d4 s4} # MODELS="" for the tests alone
BATCH=${BATCH:-1,4,8}
EAGER=${EAGER:-64}
SHM=/dev/shm/pinfer-bench
export LD_LIBRARY_PATH="$PWD/.lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SCRIPTS=${SCRIPTS:-$(dirname "$0")}
export OUT
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/run.log"; }

log "start: $(nproc) cores, build $B"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv >>"$OUT/run.log" 2>&1

if [ -z "${SKIP_TESTS:-}" ]; then
    log "test_cuda_ops"
    timeout "${TEST_TIMEOUT:-300}" "$B/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf >"$OUT/tests.log" 2>&1
    log "test_cuda_ops rc=$? ($(tail -1 "$OUT/tests.log"))"
    # the backend interface's own test: every backend through the evaluator against the CPU engine
    timeout "${TEST_TIMEOUT:-120}" "$B/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf >>"$OUT/tests.log" 2>&1
    log "test_backend_ops rc=$? ($(tail -1 "$OUT/tests.log"))"
    # every backend op alone on random models of every type and architecture
    timeout "${TEST_TIMEOUT:-120}" "$B/tests/test_backend_ops_random" >>"$OUT/tests.log" 2>&1
    log "test_backend_ops_random rc=$? ($(tail -1 "$OUT/tests.log"))"
    if [ -n "${ALT_ENV:-}" ]; then
        env $ALT_ENV timeout "${TEST_TIMEOUT:-300}" "$B/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf \
            >"$OUT/tests-alt.log" 2>&1
        log "test_cuda_ops ($ALT_ENV) rc=$? ($(tail -1 "$OUT/tests-alt.log"))"
        env $ALT_ENV timeout "${TEST_TIMEOUT:-120}" "$B/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf \
            >>"$OUT/tests-alt.log" 2>&1
        log "test_backend_ops ($ALT_ENV) rc=$? ($(tail -1 "$OUT/tests-alt.log"))"
    fi
fi

if [ -n "${PIPELINE_BIN:-}" ]; then
    CHECKS="greedy fault" bash "$SCRIPTS/pipeline_checks.sh" "$PIPELINE_BIN" "${CAL:-}"
fi

mkdir -p "$SHM"
synth() { # name args...
    local name=$1
    shift
    [ -f "$SHM/$name.gguf" ] && return 0
    log "synth $name: $*"
    "$B/tools/pictl" synth --shape llama-7b "$@" -t "$(nproc)" -q -o "$SHM/$name.gguf" >>"$OUT/run.log" 2>&1 ||
        log "synth $name failed"
}
for name in $MODELS; do
    case $name in
    d16) synth d16 --type f16 ;;
    s16) synth s16 --type f16 --pwri ;;
    d4) synth d4 --type q4_0 ;;
    s4) synth s4 --type q4_0 --pwri --pred-type q4_0 ;;
    esac
done
ls -l "$SHM" >>"$OUT/run.log"

if [ -n "${NCU:-}" ]; then # per-kernel counters of a few decode kernels (Nsight Compute, clocks untouched)
    NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    # skip the prompt's kernels (7 matching per layer, 11 for Q types, + output): profile the first
    # decode step's first layer
    for name in $NCU; do
        log "ncu $name"
        timeout 150 "$NCU_BIN" --clock-control none -k 'regex:k_gemv|k_glu|k_rope|k_attn|k_axpy|k_chunk|k_quant' \
            --launch-skip "$( [ "$name" = d4 ] && echo 354 || echo 225)" --launch-count 8 \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread \
            "$B/bench/bench_cuda" "$SHM/$name.gguf" --mode "$( [ "${name#s}" != "$name" ] && echo sparse || echo dense)" -n 4 --pp 0 \
            >"$OUT/ncu_$name.txt" 2>&1
        log "ncu $name rc=$?"
    done
fi

log "hbm floor"
"$B/bench/bench_cuda" --hbm 8 >>"$OUT/bench.jsonl" 2>>"$OUT/run.log"
# each one-token F16 product of a decode step alone against the floor (bench_kern: ~5 s)
[ -x "$B/bench/bench_kern" ] && timeout 60 "$B/bench/bench_kern" --reps 40 >>"$OUT/bench.jsonl" 2>>"$OUT/run.log"

for r in $(seq 1 "$ROUNDS"); do
    for name in $MODELS; do
        f="$SHM/$name.gguf"
        [ -f "$f" ] || continue
        extra=()
        [ "$r" = 1 ] && extra=(--eager "$EAGER" --batch "$BATCH")
        log "round $r $name"
        "$B/bench/bench_cuda" "$f" -n "$N_GEN" -c 2048 --pp "$PP" "${extra[@]}" |
            sed "s/^{/{\"round\":$r,\"file\":\"$name\",/" >>"$OUT/bench.jsonl" 2>>"$OUT/run.log"
        if [ -n "${ALT_ENV:-}" ] && [[ " ${ALT_MODELS:-$MODELS} " == *" $name "* ]]; then
            log "round $r $name ($ALT_ENV)"
            env $ALT_ENV "$B/bench/bench_cuda" "$f" -n "$N_GEN" -c 2048 --pp "$PP" |
                sed "s/^{/{\"round\":$r,\"file\":\"$name-alt\",/" >>"$OUT/bench.jsonl" 2>>"$OUT/run.log"
        fi
        if [ -n "${OLD_BENCH:-}" ]; then
            log "round $r $name (old bench_cuda)"
            "$OLD_BENCH" "$f" -n "$N_GEN" -c 2048 --pp "$PP" |
                sed "s/^{/{\"round\":$r,\"file\":\"$name-old\",/" >>"$OUT/bench.jsonl" 2>>"$OUT/run.log"
        fi
    done
done
"$B/bench/bench_cuda" --hbm 8 >>"$OUT/bench.jsonl" 2>>"$OUT/run.log"
if [ -n "${PIPELINE_BIN:-}" ] && [ -n "${FAULT_7B:-}" ] && [ -f "$SHM/d4.gguf" ]; then
    CHECKS="fault" FAULT_MODELS="$SHM/d4.gguf" bash "$SCRIPTS/pipeline_checks.sh" "$PIPELINE_BIN" "${CAL:-}"
fi
if [ -n "${PIPELINE_BIN:-}" ] && [ -z "${SKIP_INVARIANCE:-}" ]; then
    CHECKS="invariance" bash "$SCRIPTS/pipeline_checks.sh" "$PIPELINE_BIN" "${CAL:-}"
fi
log "done"
python3 - "$OUT/bench.jsonl" <<'EOF' | tee -a "$OUT/run.log"
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
hbm = [r['best_gbps'] for r in rows if r['case'] == 'hbm_read']
print('hbm read GB/s:', hbm)
for case, key in (('decode', 'tok_s'), ('prefill', 'tok_s')):
    groups = {}
    for r in rows:
        if r['case'] == case:
            groups.setdefault((r.get('file'), r['mode'] + ('/' + r['path'] if 'path' in r else '')), []).append(r[key])
    for (f, m), v in sorted(groups.items()):
        extra = ''
        if case == 'decode':
            g = [r for r in rows if r['case'] == 'decode' and r.get('file') == f and r['mode'] == m]
            if not g:
                continue
            extra = ' GB/s %.0f  active %.3f  eager %.1f' % (st.median(x['achieved_gbps'] for x in g),
                                                              g[0]['active_frac'], g[0]['eager_tok_s'])
        if case == 'prefill':
            inv = [r.get('pp_invariant') for r in rows if r['case'] == case and r.get('file') == f
                   and r['mode'] + ('/' + r['path'] if 'path' in r else '') == m]
            extra = '  invariant %s' % inv[0] if inv and inv[0] is not None else ''
        print('%-8s %-4s %-6s min %.1f med %.1f max %.1f%s' % (case, f, m, min(v), st.median(v), max(v), extra))
for r in rows:
    if r['case'] == 'batch':
        print('batch    %-4s %-6s B=%d agg %.1f tok/s' % (r.get('file'), r['mode'], r['batch'], r['agg_tok_s']))
EOF
