#!/bin/bash
# bench/cpu_host/thp_ab.sh — the weights on 4 KiB pages (the file's mapping, `--mmap`) vs 2 MiB
# transparent huge pages (the file read into anonymous memory, `--no-mmap`, pictl run --inproc's
# default on the CPU backend), on the GPU machine's host: bench_ffn (the sparse FFN alone, 10 % random
# masks) and s4 / d4 decode with phase_ms, interleaved; also llama.cpp's dense rate on d4 when
# DIR/llama/bin/llama-bench exists (its own default: mmap).
#   bench/cpu_host/thp_ab.sh DIR   DIR/tree.txz: a release tree (tools/pictl, bench/bench_ffn,
#   bench/bench_gemv); DIR/lib: .so files. Results in $OUT/thp.log. env N: tokens per decode (64).
set -u
D=$1
[ -f "$D/tree.txz" ] && tar -xJf "$D/tree.txz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
O=${OUT:-/tmp/thp-out}
R=/tmp/thp-work
mkdir -p "$O" "$R"
L=$O/thp.log
log() { echo "[$(date +%T)] $*" | tee -a "$L"; }
log "start: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); thp $(cat /sys/kernel/mm/transparent_hugepage/enabled); shmem $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled); defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
P=$D/rel/tools/pictl
$P synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t 16 -q -o /dev/shm/s4.gguf 2>&1 | tail -1
$P synth --shape llama-7b --type q4_0 -t 16 -q -o /dev/shm/d4.gguf 2>&1 | tail -1
log "synth done"
timeout 60 "$D/rel/bench/bench_gemv" -t 16 -n 3 -T q4_0 2>/dev/null | grep -E '"op":"read' | tee -a "$L"
flag() { [ "$1" = huge ] && echo --no-mmap || echo --mmap; }
for r in 1 2; do for m in page huge; do
    bf=""; [ $m = huge ] && bf=--no-mmap
    timeout 90 "$D/rel/bench/bench_ffn" /dev/shm/s4.gguf -t 16 -n 5 -p 0.1 $bf | sed "s/^/ffn $m r$r /" | tee -a "$L"
done; done
dec() { # file mode round
    local n=$1-$2-r$3
    timeout 90 "$P" run --inproc "$(flag $2)" -m /dev/shm/$1.gguf -t 16 -n "${N:-64}" -c 512 -p "Once upon a time" \
        --temp 0 --ignore-eos --json-stats "$R/$n.json" --dump-logits "$R/$n.logits" >/dev/null 2>"$R/$n.err" &
    local pid=$! hp=0
    while kill -0 $pid 2>/dev/null; do
        h=$(awk '/AnonHugePages/{print $2}' /proc/meminfo); [ "$h" -gt "$hp" ] && hp=$h; sleep 0.5
    done
    wait $pid
    log "$1 decode $n $(python3 -c "import json;d=json.load(open('$R/$n.json'));print(round((d['n_gen']-1)/d['decode_ms']*1e3,2),'tok/s',{k:round(v) for k,v in d.get('phase_ms',{}).items()})" 2>&1 | tail -1) anon_huge_max_kb $hp"
}
LB=$D/llama/bin/llama-bench
for r in 1 2 3; do
    for f in s4 d4; do for m in page huge; do dec $f $m $r; done; done
    [ -x "$LB" ] && log "llama.cpp d4 r$r $(timeout 90 "$LB" -m /dev/shm/d4.gguf -p 0 -n 32 -t 16 -r 1 -o csv 2>/dev/null | tail -1)"
done
for f in s4 d4; do cmp -s "$R/$f-page-r1.logits" "$R/$f-huge-r1.logits" && log "$f logits page = huge" || log "$f logits DIFFER"; done
rm -f /dev/shm/s4.gguf /dev/shm/d4.gguf
log "end: load $(cut -d' ' -f1-3 /proc/loadavg)"
