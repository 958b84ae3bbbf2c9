#!/bin/bash
# Run on the GPU machine with release binaries (-Dcuda=disabled) built here and carried in .device/me
# (pictl, gpud, cpud, predictord, loaderd, bench_batch), .device/ab/pictl-old = 2c7605c, .device/lib.
# (The 12:21 run of docs/BENCHMARKS.md chose the mode with an environment variable, since replaced by --predict-in.)
# (env SKIP_BATCH=1: the pipeline part only, as final_ab.sh runs it.) lead's call 2: pipeline vs in-process at -t 16 on s4 (predictor in predictord with 16 threads, or in gpud), d4 batching
set -u
D=.device/me
export LD_LIBRARY_PATH="$PWD/.device/lib"
O=/tmp/o; mkdir -p $O
SHM=/dev/shm/pb; mkdir -p $SHM
T=$(nproc)
log() { echo "[$(date +%T)] $*" | tee -a "$O/run.log"; }
[ -f $SHM/s4.gguf ] || $D/pictl synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t $T -q -o $SHM/s4.gguf >>"$O/run.log" 2>&1
[ -f $SHM/d4.gguf ] || $D/pictl synth --shape llama-7b --type q4_0 -t $T -q -o $SHM/d4.gguf >>"$O/run.log" 2>&1
log synth
for mode in predictord gpud; do
  $D/pictl start -m $SHM/s4.gguf --name p$mode -t $T -c 512 --predict-in $mode >>"$O/run.log" 2>&1 || log "start $mode failed"
done
for r in 1 2 3; do
  $D/pictl run --inproc -m $SHM/s4.gguf -t $T -c 512 -p "Once upon a time" -n 32 --temp 0 --ignore-eos >/dev/null 2>>"$O/perf.log"
  for mode in predictord gpud; do
    echo "mode $mode" >> $O/perf.log
    $D/pictl generate --name p$mode -p "Once upon a time" -n 32 --temp 0 --ignore-eos >/dev/null 2>>"$O/perf.log"
  done
done
for mode in predictord gpud; do
  $D/pictl profile --name p$mode > $O/profile-$mode.txt 2>&1
  $D/pictl profile --name p$mode --trace $O/trace-$mode.json >/dev/null 2>>"$O/run.log"
  $D/pictl stop --name p$mode >>"$O/run.log" 2>&1
done
log pipeline
[ -n "${SKIP_BATCH:-}" ] || timeout 90 $D/bench_batch -m $SHM/d4.gguf -t $T -n 16 --seqs 1,2,4,8 --rounds 2 > "$O/batch-d4.jsonl" 2>>"$O/run.log"
log "batch d4 rc=$?"
tar czf $OUT/o.tgz -C /tmp o
