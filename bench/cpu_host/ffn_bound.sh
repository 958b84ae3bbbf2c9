#!/bin/bash
# bench/cpu_host/ffn_bound.sh BENCH_FFN MODEL.gguf — what bounds the hybrid mode's cold share on this
# host (issue 10's critical path): bench_ffn at the live size of hybrid s4 at --vram-budget 2.59
# (-p 0.025: ~1.6 MB a layer, by columns) with the live rows cache-resident (-L 1 -r: one layer, the
# same masks every iteration) against streaming 32 layers from DRAM (fresh masks), at -t 15 (cpud's
# pool beside a GPU, workers spinning between steps as cpud's do) and one thread, AVX2 and
# AVX-512 (PINFER_CPU_LEVEL), ROUNDS rounds (default 2). Cache-resident close to DRAM: the cores bound
# it (kernels, the job's scaling); far below: memory. MODEL: BENCH.md's s4 (`pictl synth --shape
# llama-7b --type q4_0 --pwri --pred-type q4_0`). One line per case: best and mean µs a layer, MB a
# layer, the empty job's µs, y_hash (equal within a level: the same bytes).
# First run: 2026-12-03, the GPU host (docs/BENCHMARKS.md, "Is cpud's FFN bound by memory or by its
# cores?"): 38.5 µs cache-resident vs 56-59 from DRAM at 15 threads, 260-277 µs on one thread.
set -u
B=$1 M=$2
run() { # label env... -- args
    local label=$1
    shift
    timeout 60 env "$@" 2>&1 | tail -1 | python3 -c 'import json,sys
try:
    j = json.loads(sys.stdin.read())
except ValueError:
    print("%s: no result" % sys.argv[1]); sys.exit(0)
print("%-28s best %6.1f mean %6.1f us/layer, %.2f MB, empty job %.1f us, y %s" % (sys.argv[1],
      j["us_per_layer_best"], j["us_per_layer_mean"], j["mb_per_layer"], j.get("noop_job_us_mean", -1), j.get("y_hash")))' "$label"
}
LIVE="-p 0.025 -m cols"
for r in $(seq "${ROUNDS:-2}"); do
    echo "round $r"
    run "15 threads, cache" PINFER_CPU_LEVEL=avx2 "$B" "$M" -t 15 $LIVE -n 200 -L 1 -r -s 3000 -g 60
    run "15 threads, DRAM" PINFER_CPU_LEVEL=avx2 "$B" "$M" -t 15 $LIVE -n 30 -s 3000 -g 60
    run "1 thread, cache" PINFER_CPU_LEVEL=avx2 "$B" "$M" -t 1 $LIVE -n 100 -L 1 -r
    run "15 threads, cache, avx512" PINFER_CPU_LEVEL=avx512 "$B" "$M" -t 15 $LIVE -n 200 -L 1 -r -s 3000 -g 60
    run "1 thread, cache, avx512" PINFER_CPU_LEVEL=avx512 "$B" "$M" -t 1 $LIVE -n 100 -L 1 -r
done
