#!/bin/bash
# bench/gpu/types.sh [DIR] — the weight types on the GPU host (issue 13; first run 2026-12-01, see
# NOTES.md "The 10 new weight types on cuda"). DIR holds bin/ (stripped pictl, test_cuda_ops,
# test_backend_ops_random, bench_gemv, bench_cuda) and lib/ (libjansson, libnanomsg, libpcre2);
# results under $OUT/r and $OUT/cudaq.tgz. Run from the repository root (models/ for the tiny model):
#   bash bench/gpu/types.sh .device/NAME   (device call timeout >= 200 s; the Q4_K_M synth needs ~150)
# The 15 weight types on cuda (test_cuda_ops,
# test_backend_ops_random), decode tok/s of the 7B-shape synthetic at Q4_0 vs Q4_K_M (pictl synth
# --type q4_k_m writes the mixture directly) on cuda (bench_cuda) and on the CPU (pictl run -t 16),
# CPU GEMV GB/s per type (bench_gemv -t 16). Each step under its own timeout; results printed as
# they come; steps skipped past the deadline (LIMIT s, default 170).
D=${1:-$(cd "$(dirname "$0")" && pwd)}; B=$D/bin; export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH
O=${OUT:-/tmp/cudaq-out}; R=$O/r; mkdir -p "$R"; S=/dev/shm; T0=$(date +%s); M=$PWD/models/tiny-relu-llama-f16.gguf
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/steps.log"; }
LIMIT=${LIMIT:-170}; SYNTH_S=${SYNTH_S:-100}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader; nproc; lscpu | grep -m1 "Model name"
( timeout 60 "$B/test_cuda_ops" "$M" > "$R/cuda_ops.log" 2>&1; echo "rc $?" >> "$R/cuda_ops.log"
  timeout 75 "$B/test_backend_ops_random" > "$R/be_ops.log" 2>&1; echo "rc $?" >> "$R/be_ops.log" ) &
TP=$!
el "synth d4"; timeout 35 "$B/pictl" synth --shape llama-7b --type q4_0 -t 16 -q -o $S/d4.gguf > "$R/synth.log" 2>&1; el "synth d4 rc $?"
el "synth k4m"; timeout "$SYNTH_S" "$B/pictl" synth --shape llama-7b --type q4_k_m -t 16 -q -o $S/k4m.gguf >> "$R/synth.log" 2>&1 &
SP=$!
timeout 30 "$B/bench_cuda" $S/d4.gguf --mode dense -n 64 -c 2048 --pp 0 > "$R/cuda_d4.jsonl" 2>"$R/cuda_d4.err"; el "cuda d4 rc $?"; cut -c1-420 "$R/cuda_d4.jsonl"
wait $TP; el "tests done"
echo "== cuda_ops"; grep -E "checks|FAIL|failed|rc " "$R/cuda_ops.log" | tail -12
echo "== be_ops"; grep -E "worst|runs|skipped|failed|rc " "$R/be_ops.log" | tail -20
wait $SP; el "synth k4m rc $?"; ls -la $S/*.gguf
if [ -f $S/k4m.gguf ] && [ "$(left)" -gt 12 ]; then
  timeout "$(left)" "$B/bench_cuda" $S/k4m.gguf --mode dense -n 64 -c 2048 --pp 0 > "$R/cuda_k4m.jsonl" 2>"$R/cuda_k4m.err"; el "cuda k4m rc $?"; cut -c1-420 "$R/cuda_k4m.jsonl"; fi
for m in d4 k4m; do [ -f $S/$m.gguf ] && [ "$(left)" -gt 10 ] || continue
  timeout 20 "$B/pictl" run --inproc --backend cpu -m $S/$m.gguf -t 16 -c 256 -p "Once upon a time" -n 16 --temp 0 --ignore-eos > /dev/null 2> "$R/cpu_$m.log"; el "cpu $m rc $?"; grep -h "perf" "$R/cpu_$m.log"; done
rm -f $S/d4.gguf $S/k4m.gguf
if [ "$(left)" -gt 10 ]; then
  timeout "$(left)" "$B/bench_gemv" -t 16 -n 10 -T q4_0,q4_K,q5_K,q6_K,q4_1,q5_0,q5_1,iq4_nl,iq4_xs,q8_0,q3_K,q2_K > "$R/gemv.jsonl" 2>"$R/gemv.err"; el "gemv rc $?"
  grep -E '"stream"' "$R/gemv.jsonl" | cut -c1-160; grep -E '"gemv"' "$R/gemv.jsonl" | sed -E 's/.*"type":"([^"]*)".*"median_us":([0-9.]+).*"gbps":([0-9.]+),"frac_of_read_bw":([0-9.]+),"level":"([a-z0-9]+)".*"max_rel_err_vs_ref":([0-9.e+-]+).*/\1 \2us \3GB\/s frac \4 \5 err \6/'; fi
tail -2 "$R"/*.err 2>/dev/null | cut -c1-200
tar czf "$O/cudaq.tgz" -C "$O" r
