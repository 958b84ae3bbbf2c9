#!/bin/bash
# Run on the GPU machine with release binaries (-Dcuda=disabled) built here and carried in .device/me
# (pictl, gpud, cpud, predictord, loaderd, bench_batch), .device/ab/pictl-old = 2c7605c, .device/lib.
# lead's CPU-host call: issue 8 single-sequence A/B (old vs new), batching 1/2/4/8, issue 9 pipeline vs in-process at -t 16
set -u
D=.device/me
export LD_LIBRARY_PATH="$PWD/.device/lib"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SHM=/dev/shm/pb; mkdir -p $SHM
T=$(nproc)
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/run.log"; }
log "cores $T; $(grep -m1 'model name' /proc/cpuinfo)"
$D/pictl synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t $T -q -o $SHM/s4.gguf >>"$OUT/run.log" 2>&1
$D/pictl synth --shape llama-7b --type q4_0 -t $T -q -o $SHM/d4.gguf >>"$OUT/run.log" 2>&1
log "synth done"; ls -l $SHM >> "$OUT/run.log"
# 1. single-sequence decode, old (2c7605c) vs new, in-process, interleaved
timeout 150 python3 bench/bench_ab.py --a .device/ab/pictl-old --b $D/pictl -m $SHM/s4.gguf -m $SHM/d4.gguf \
  --rounds 7 -n 32 -t $T -c 512 > "$OUT/ab.jsonl" 2>>"$OUT/run.log"; log "ab rc=$?"
# 2. pipeline vs in-process (sparse s4, dense d4), 3 interleaved rounds each, + profile
for m in s4 d4; do
  $D/pictl start -m $SHM/$m.gguf --name p$m -t $T -c 512 >>"$OUT/run.log" 2>&1 || log "start $m failed"
  for r in 1 2 3; do
    $D/pictl run --inproc -m $SHM/$m.gguf -t $T -c 512 -p "Once upon a time" -n 32 --temp 0 --ignore-eos --json-stats $OUT/in-$m-$r.json >/dev/null 2>>"$OUT/run.log"
    $D/pictl generate --name p$m -p "Once upon a time" -n 32 --temp 0 --ignore-eos --json-stats $OUT/pipe-$m-$r.json >/dev/null 2>>"$OUT/run.log"
  done
  $D/pictl profile --name p$m --json > $OUT/profile-$m.json 2>>"$OUT/run.log"
  $D/pictl profile --name p$m --trace $OUT/trace-$m.json >/dev/null 2>>"$OUT/run.log"
  $D/pictl status --name p$m --json > $OUT/status-$m.json 2>>"$OUT/run.log"
  $D/pictl stop --name p$m >>"$OUT/run.log" 2>&1
  log "pipeline $m done"
done
# 3. batching 1/2/4/8 in-process
for m in s4 d4; do
  timeout 60 $D/bench_batch -m $SHM/$m.gguf -t $T -n 24 --seqs 1,2,4,8 --rounds 3 > "$OUT/batch-$m.jsonl" 2>>"$OUT/run.log"
  log "batch $m rc=$?"
done
log end
