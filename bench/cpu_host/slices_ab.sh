#!/bin/bash
# Run on the GPU machine with .device/me/pictl-old (the baseline) and .device/me/pictl (the candidate),
# release builds, and .device/lib carried: 3 interleaved rounds of d4 and s4, -t 16, PINFER_POOL_SLICES 1/4/8.
# issue 9: old (5f96c10) vs new (sliced pool jobs, fused qkv/gate-up) at -t 16, slices per thread 1/4/8
B=${B:-.device/me}; export LD_LIBRARY_PATH=$PWD/.device/lib
R=$OUT/r; mkdir -p $R; cat /proc/loadavg
( $B/pictl synth --shape llama-7b --type q4_0 -t 16 -q -o /dev/shm/d4.gguf; $B/pictl synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t 16 -q -o /dev/shm/s4.gguf ) 2>&1 | tail -2
run() { # name bin model spt
  local n=$1 b=$2 m=$3 s=$4
  PINFER_POOL_SLICES=$s timeout 40 $B/$b run --inproc -m /dev/shm/$m.gguf -t 16 -n 48 -c 256 -p "Once upon a time" --temp 0 --ignore-eos --json-stats $R/$n.json --dump-logits $R/$n.logits > /dev/null 2> $R/$n.err
  echo "$n $(python3 -c "import json;d=json.load(open('$R/$n.json'));print(round((d['n_gen']-1)/d['decode_ms']*1e3,2))" 2>&1)"
}
for r in 1 2 3; do for m in d4 s4; do
  run $m-old-r$r pictl-old $m 4; run $m-new1-r$r pictl $m 1; run $m-new4-r$r pictl $m 4; run $m-new8-r$r pictl $m 8
done; done 2>&1 | tee $R/rates.txt
for m in d4 s4; do for v in new1 new4 new8; do cmp -s $R/$m-old-r1.logits $R/$m-$v-r1.logits && echo "$m $v logits = old" || echo "$m $v logits DIFFER from old"; done; done
python3 - $R/rates.txt <<'PY'
import sys,statistics,collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    n,v=l.split(); m,b,_=n.split('-'); d[(m,b)].append(float(v))
for (m,b),v in sorted(d.items()): print(m,b,'median',statistics.median(v),'all',v)
PY
cat /proc/loadavg; rm -f $R/*.logits; tar czf $OUT/ab9.tgz -C $OUT r
