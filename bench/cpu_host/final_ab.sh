#!/bin/bash
# Run on the GPU machine with release binaries (-Dcuda=disabled) built here and carried in .device/me
# (pictl, gpud, cpud, predictord, loaderd), .device/ab/pictl-old = 2c7605c, .device/lib.
# Single-sequence decode old vs new (tiny, s4, d4; 7 interleaved rounds) and the pipeline on s4 with the
# masks in gpud and in predictord against in-process; results packed into $OUT/o.tgz.
set -u
D=.device/me
export LD_LIBRARY_PATH="$PWD/.device/lib"
O=/tmp/o; mkdir -p $O
SHM=/dev/shm/pb; mkdir -p $SHM
T=$(nproc)
log() { echo "[$(date +%T)] $*" | tee -a "$O/run.log"; }
$D/pictl synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t $T -q -o $SHM/s4.gguf >>"$O/run.log" 2>&1
$D/pictl synth --shape llama-7b --type q4_0 -t $T -q -o $SHM/d4.gguf >>"$O/run.log" 2>&1
log synth
timeout 60 python3 bench/bench_ab.py --a .device/ab/pictl-old --b $D/pictl -m models/tiny-relu-llama-f16.gguf \
  --rounds 7 -n 128 -t $T -c 512 > "$O/ab-tiny.jsonl" 2>>"$O/run.log"; log "ab tiny rc=$?"
timeout 150 python3 bench/bench_ab.py --a .device/ab/pictl-old --b $D/pictl -m $SHM/s4.gguf -m $SHM/d4.gguf \
  --rounds 7 -n 32 -t $T -c 512 > "$O/ab.jsonl" 2>>"$O/run.log"; log "ab rc=$?"
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
  $D/pictl stop --name p$mode >>"$O/run.log" 2>&1
done
log pipeline
tar czf $OUT/o.tgz -C /tmp o
