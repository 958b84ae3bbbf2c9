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
# the pipeline with the masks in predictord and in gpud against in-process (packs $OUT/o.tgz)
SKIP_BATCH=1 bash bench/cpu_host/predict_in.sh
