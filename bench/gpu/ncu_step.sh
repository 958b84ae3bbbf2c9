#!/bin/bash
# bench/gpu/ncu_step.sh KIT — where one decode step's time goes, kernel by kernel (issue 14): Nsight
# Compute (clocks untouched) over bench_cuda -n 2 on each file of FILES, every kernel of the run;
# ncu_summary.py keeps the last decode step (the graph's kernels repeat in the warm-up and the timed
# step) and sums per kernel name: launches, µs, DRAM bytes read, TB/s, grid.
# Kernels run one at a time under ncu (no PDL overlap): the sum is an eager step's, not the graph's.
#
#   bash bench/gpu/ncu_step.sh KIT     KIT: trees.txz (pack_trees.sh: gpu/bench/bench_cuda,
#                                      gpu/tools/pictl) and lib/; env FILES ("d16 s16 d4"), LIMIT (240)
# Results: $OUT/ncu_FILE.csv (raw), $OUT/ncu_summary.txt; the summary on stdout.
set -u
KIT=$1
OUT=${OUT:-/tmp/ncu-out}
LIMIT=${LIMIT:-240}
FILES=${FILES:-d16 s16 d4}
T0=$(date +%s)
W=/tmp/ncu-kit
mkdir -p "$W" "$OUT"
xz -dc "$KIT/trees.txz" | tar -C "$W" -xf -
export LD_LIBRARY_PATH="$PWD/$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
G=$W/gpu SHM=/dev/shm/pinfer-ncu
mkdir -p "$SHM"
left() { echo $((LIMIT - ($(date +%s) - T0))); }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU; $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"
for f in $FILES; do
    case $f in
        d16) a=(--type f16) m=dense ;; s16) a=(--type f16 --pwri) m=sparse ;;
        d4) a=(--type q4_0) m=dense ;; s4) a=(--type q4_0 --pwri --pred-type q4_0) m=sparse ;;
    esac
    "$G/tools/pictl" synth --shape llama-7b "${a[@]}" -t 16 -q -o "$SHM/$f.gguf" || { echo "synth $f failed"; continue; }
    l=$(($(left) - 10))
    [ "$l" -lt 20 ] && { echo "$f: no time left"; break; }
    timeout "$l" "$NCU" --clock-control none --csv --page raw --print-units base \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic \
        "$G/bench/bench_cuda" "$SHM/$f.gguf" --mode "$m" -n 2 -c 2048 --pp 0 >"$OUT/ncu_$f.csv" 2>"$OUT/ncu_$f.err"
    echo "$f rc=$? $(wc -l <"$OUT/ncu_$f.csv") lines, $(($(date +%s) - T0)) s"
    rm -f "$SHM/$f.gguf"
done
python3 "$(dirname "$0")/ncu_summary.py" "$OUT"/ncu_*.csv | tee "$OUT/ncu_summary.txt"
rm -rf "$SHM"
