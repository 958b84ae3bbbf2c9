#!/bin/bash
# Run on the GPU machine with release binaries (-Dcuda=disabled) in .device/me, .device/ab/pictl-old = 2c7605c, .device/lib.
export LD_LIBRARY_PATH="$PWD/.device/lib"
D=.device/me; SHM=/dev/shm/pb; mkdir -p $SHM; T=$(nproc)
cat /proc/loadavg; grep -o -m1 'avx512[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
$D/pictl synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t $T -q -o $SHM/s4.gguf
$D/pictl synth --shape llama-7b --type q4_0 -t $T -q -o $SHM/d4.gguf
cat /proc/loadavg
run() { # tag bin env...
  local tag=$1 bin=$2 m=$3; shift 3
  env "$@" $bin run --inproc -m $SHM/$m.gguf -t $T -c 512 -p "Once upon a time" -n 32 --temp 0 --ignore-eos 2>&1 >/dev/null | grep -o "decode 32 tok, [0-9.]* ms, [0-9.]* tok/s" | sed "s/^/$m $tag /"
}
for r in 1 2 3 4; do for m in s4 d4; do
  run old .device/ab/pictl-old $m X=1
  run new $D/pictl $m X=1
  run avx2 $D/pictl $m PINFER_CPU_LEVEL=avx2
done; done
cat /proc/loadavg
