#!/usr/bin/env bash
# bench_levels.sh — the CPU kernel levels (scalar, AVX2, AVX-512) side by side on one machine, within
# a time budget: the quant tests at every level, test_backend_ops per level and model type,
# bench_gemv per level and type (GB/s against the read bandwidth of the same run), and decode tok/s
# of the 7B-shape synthetics of ../shared/BENCH.md (d4, s4, d16) and of d16 quantized to Q4_K_M, per
# level, interleaved; then -t 8 vs -t 16 logits on s4 (the thread-count invariance).
#
#   bench/bench_levels.sh BIN_DIR OUT_DIR [BUDGET_S]
#
# BIN_DIR: pictl, bench_gemv, test_quant, test_quant_types, test_backend_ops (and lib/ with the
# shared libraries they need). Env: T (threads, 16), N (decode tokens, 16), SHM (model folder,
# /dev/shm/kern), TINY (the tiny F16 model, models/tiny-relu-llama-f16.gguf), SHAPE (llama-7b),
# Q4KM=0 to skip quantizing d16 to Q4_K_M (over 100 s at 16 threads on the GPU host: last, and
# best in a call of its own).
# Every step's stdout/stderr goes to <step>.out/.err in a work folder, one JSON line per step to
# steps.jsonl; a step that no longer fits the budget is skipped (and says so). The device returns at
# most 8 files from $OUT, so OUT_DIR gets only steps.jsonl, summary.md (bench_levels_summary.py,
# also printed) and results.tgz (every log); the GEMV lines and decode [perf] lines are also printed
# as they come, so the output alone carries the figures.
set -u
B=$(cd "$1" && pwd)
OUT=$2
BUDGET=${3:-190}
T=${T:-16}
N=${N:-16}
SHM=${SHM:-/dev/shm/kern}
TINY=${TINY:-models/tiny-relu-llama-f16.gguf}
SHAPE=${SHAPE:-llama-7b}
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" "$SHM"
FINAL=$(cd "$OUT" && pwd)
OUT=$(mktemp -d)
START_MS=$(($(date +%s%N) / 1000000))

left_s() { echo $((BUDGET - ($(date +%s%N) / 1000000 - START_MS) / 1000)); }

# step NAME NEED_S [ENV=V ...] CMD ARGS...: run if NEED_S seconds are left, bounded by what is left
step() {
    local name=$1 need=$2
    shift 2
    local l
    l=$(left_s)
    if ((l < need)); then
        echo "{\"step\":\"$name\",\"skipped\":\"budget\",\"left_s\":$l}" | tee -a "$OUT/steps.jsonl"
        return 99
    fi
    local t0=$(($(date +%s%N) / 1000000))
    timeout $((l - 3)) env "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    local rc=$?
    local ms=$(($(date +%s%N) / 1000000 - t0))
    echo "{\"step\":\"$name\",\"rc\":$rc,\"ms\":$ms}" | tee -a "$OUT/steps.jsonl"
    grep -h '"bench":"gemv"\|"op":"read' "$OUT/$name.out" 2>/dev/null | cut -c1-260
    grep -ho '\[perf\].*' "$OUT/$name.err" 2>/dev/null
    return $rc
}

{
    date -u +%FT%TZ
    nproc
    grep -m1 'model name' /proc/cpuinfo
    grep -m1 -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '
    echo
    free -g | head -2
} >"$OUT/machine.txt" 2>&1
grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' >>"$OUT/machine.txt"

# 1. correctness at every level (test_quant forces each level itself; the others take the env's)
step test_quant 5 "$B/test_quant"
for L in scalar avx2 avx512; do
    step "test_quant_types_$L" 3 PINFER_CPU_LEVEL=$L "$B/test_quant_types"
done
step tiny_q4_0 5 "$B/pictl" quantize "$TINY" "$SHM/tiny-q4_0.gguf" q4_0 "$T"
step tiny_q4_k_m 5 "$B/pictl" quantize "$TINY" "$SHM/tiny-q4_k_m.gguf" q4_k_m "$T"
for L in scalar avx2 avx512; do
    step "backend_ops_f16_$L" 3 PINFER_CPU_LEVEL=$L "$B/test_backend_ops" "$TINY"
    step "backend_ops_q4_0_$L" 3 PINFER_CPU_LEVEL=$L "$B/test_backend_ops" "$SHM/tiny-q4_0.gguf"
    step "backend_ops_q4_k_m_$L" 3 PINFER_CPU_LEVEL=$L "$B/test_backend_ops" "$SHM/tiny-q4_k_m.gguf"
done

# 2. GEMV per type and level, the read bandwidth measured first in the same process
step gemv 30 "$B/bench_gemv" -t "$T" -n 10 -T f16,bf16,q8_0,q4_0,q4_1,q5_0,q4_K,q5_K,q6_K -L scalar,avx2,avx512
# the GEMM tile: 16 tokens per matmul (a prefill chunk), per token against one GEMV
step gemm_b16 10 "$B/bench_gemv" -t "$T" -n 5 -B 16 -T q8_0,q4_0 -L avx2,avx512

# 3. the 7B-shape files (BENCH.md), then decode per level, interleaved
step synth_d4 15 "$B/pictl" synth --shape "$SHAPE" --type q4_0 -q -t "$T" -o "$SHM/d4.gguf"
step synth_s4 15 "$B/pictl" synth --shape "$SHAPE" --type q4_0 --pwri --pred-type q4_0 -q -t "$T" -o "$SHM/s4.gguf"
step synth_d16 15 "$B/pictl" synth --shape "$SHAPE" --type f16 -q -t "$T" -o "$SHM/d16.gguf"

decode() { # NAME MODEL LEVEL TOKENS [extra]
    local name=$1 model=$2 level=$3 n=$4
    shift 4
    step "decode_${name}_$level" 6 PINFER_CPU_LEVEL="$level" "$B/pictl" run -m "$model" -p "Once upon a time" \
        -n "$n" --temp 0 --ignore-eos -t "$T" -c 512 --inproc --json-stats "$OUT/decode_${name}_$level.json" "$@"
}

for m in d4 s4 d16; do
    [ -f "$SHM/$m.gguf" ] || continue
    decode "$m" "$SHM/$m.gguf" avx512 "$N"
    decode "$m" "$SHM/$m.gguf" avx2 "$N"
done
# a second round of the fast levels where time allows (medians of two)
for m in d4 s4 d16; do
    [ -f "$SHM/$m.gguf" ] || continue
    decode "${m}_r2" "$SHM/$m.gguf" avx512 "$N"
    decode "${m}_r2" "$SHM/$m.gguf" avx2 "$N"
done

# 4. thread-count invariance at the AVX-512 level on s4: -t 8 vs -t 16, logits bit for bit
if [ -f "$SHM/s4.gguf" ]; then
    for t in 8 16; do
        step "logits_s4_t$t" 8 PINFER_CPU_LEVEL=avx512 "$B/pictl" run -m "$SHM/s4.gguf" -p "Once upon a time" -n 8 \
            --temp 0 --ignore-eos -t $t -c 512 --inproc --dump-logits "$SHM/s4_t$t.logits"
    done
    if [ -f "$SHM/s4_t8.logits" ] && [ -f "$SHM/s4_t16.logits" ]; then
        cmp "$SHM/s4_t8.logits" "$SHM/s4_t16.logits" >"$OUT/logits_cmp.txt" 2>&1
        echo "{\"step\":\"logits_cmp_s4_t8_t16\",\"identical\":$([ $? = 0 ] && echo true || echo false),\"bytes\":$(stat -c %s "$SHM/s4_t16.logits")}" | tee -a "$OUT/steps.jsonl"
    fi
fi

# 5. the scalar reference level, few tokens (it is the oracle, not a contender)
[ -f "$SHM/d4.gguf" ] && decode d4 "$SHM/d4.gguf" scalar 4

# 6. Q4_K_M: d16 quantized (slow: last), then decode per level
if [ "${Q4KM:-1}" != 0 ] && [ -f "$SHM/d16.gguf" ]; then
    step quantize_q4km 60 "$B/pictl" quantize -q "$SHM/d16.gguf" "$SHM/q4km.gguf" q4_k_m "$T"
    if [ -f "$SHM/q4km.gguf" ]; then
        decode q4km "$SHM/q4km.gguf" avx512 "$N"
        decode q4km "$SHM/q4km.gguf" avx2 "$N"
        decode q4km_r2 "$SHM/q4km.gguf" avx512 "$N"
        decode q4km_r2 "$SHM/q4km.gguf" avx2 "$N"
        decode q4km "$SHM/q4km.gguf" scalar 4
    fi
fi
ls -la "$SHM" >"$OUT/shm.txt" 2>&1
echo "{\"step\":\"end\",\"left_s\":$(left_s)}" | tee -a "$OUT/steps.jsonl"

# what comes back: three files
cp "$OUT/steps.jsonl" "$FINAL/"
python3 "$HERE/bench_levels_summary.py" "$OUT" >"$FINAL/summary.md" 2>&1 && cat "$FINAL/summary.md"
tar czf "$FINAL/results.tgz" -C "$OUT" .
