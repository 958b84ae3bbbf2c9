#!/bin/bash
# Run on the GPU machine: `bash bench/cpu_host/threads_levels.sh` with .device/me/{pictl,bench_gemv} (release,
# -Dcuda=disabled) and .device/lib carried; B (the binaries) defaults to .device/me.
# issue 9 diagnostics on the GPU host's CPU: GEMV scaling, decode at -t 16/15/8 with pool stats, per level
B=${B:-.device/me}; export LD_LIBRARY_PATH=$PWD/.device/lib
R=$OUT/r; mkdir -p $R
lscpu | grep -iE "model name|socket|numa|MHz|L3|^CPU\(s\)|Thread" ; cat /proc/loadavg
P=$B/pictl
( $P synth --shape llama-7b --type q4_0 -t 16 -q -o /dev/shm/d4.gguf; $P synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t 16 -q -o /dev/shm/s4.gguf ) 2>&1 | tail -3
for t in 16 8; do echo "== gemv -t $t"; timeout 40 $B/bench_gemv -t $t -n 20 -T q4_0 -L avx2,avx512 2>&1 | tail -4; done
run() { # name model level threads extra...
  local n=$1 m=$2 l=$3 t=$4; shift 4
  PINFER_CPU_LEVEL=$l PINFER_POOL_STATS=1 timeout 40 $P run --inproc -m /dev/shm/$m.gguf -t $t -n 48 -c 256 -p "Once upon a time" --temp 0 --ignore-eos --json-stats $R/$n.json "$@" > $R/$n.out 2> $R/$n.err
  echo "$n rc=$? $(python3 -c "import json;d=json.load(open('$R/$n.json'));print({k:v for k,v in d.items() if not isinstance(v,list)})" 2>&1 | head -c 400) $(grep '\[pool\]' $R/$n.err | tail -1)"
}
for rnd in 1 2; do
 for l in avx2 avx512; do for t in 16 15 8; do run d4-$l-t$t-r$rnd d4 $l $t; done; done
 run s4-avx2-t16-r$rnd s4 avx2 16 --dump-logits $R/s4-t16.logits
 run s4-avx2-t8-r$rnd s4 avx2 8 --dump-logits $R/s4-t8.logits
done
cmp $R/s4-t16.logits $R/s4-t8.logits && echo "s4 -t 8 vs -t 16 logits: identical"
cat /proc/loadavg
tar czf $OUT/diag9.tgz -C $OUT r
