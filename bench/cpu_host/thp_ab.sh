#!/bin/bash
# bench/cpu_host/thp_ab.sh — the weights on 4 KiB pages (the file's mapping, `--mmap`) vs 2 MiB
# transparent huge pages (the file read into anonymous memory, `--no-mmap`, opt-in), on the GPU
# machine's host, issue 9's files (s4, d4 of BENCH.md), -t 16:
#   1. the read bandwidth (bench_gemv's STREAM read)
#   2. bench_ffn (the sparse FFN alone, 10 % random masks), page vs huge, 2 rounds
#   3. 3 interleaved rounds of: s4 and d4 decode in process, page and huge (phase_ms, huge MiB), the
#      pipeline (`pictl run`, weights in loaderd's shared memory) on s4 and d4, and llama.cpp's dense
#      rate on d4 when DIR/llama.txz holds its bin/ (its default: mmap)
#   4. -t 8 vs -t 16 logits of s4 (huge), and page vs huge logits, compared byte for byte
#   bench/cpu_host/thp_ab.sh DIR   DIR/tree.txz: a release tree rel/ (tools/pictl and the stages,
#   bench/bench_ffn, bench/bench_gemv); DIR/lib: .so files. Results in $OUT/thp.log. env N: tokens (64).
set -u
D=$1
[ -f "$D/tree.txz" ] && tar -xJf "$D/tree.txz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
O=${OUT:-/tmp/thp-out}
R=/tmp/thp-work
mkdir -p "$O" "$R"
L=$O/thp.log
log() { echo "[$(date +%T)] $*" | tee -a "$L"; }
T=/sys/kernel/mm/transparent_hugepage
log "start: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); thp $(cat $T/enabled); shmem $(cat $T/shmem_enabled); defrag $(cat $T/defrag)"
P=$D/rel/tools/pictl
$P synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t 16 -q -o /dev/shm/s4.gguf 2>&1 | tail -1
$P synth --shape llama-7b --type q4_0 -t 16 -q -o /dev/shm/d4.gguf 2>&1 | tail -1
log "synth done"
timeout 60 "$D/rel/bench/bench_gemv" -t 16 -n 3 -T q4_0 2>/dev/null | grep -E '"op":"read' | tee -a "$L"
for r in 1 2; do for m in page huge; do
    bf=""; [ $m = huge ] && bf=--no-mmap
    timeout 90 "$D/rel/bench/bench_ffn" /dev/shm/s4.gguf -t 16 -n 5 -p 0.1 $bf | sed "s/^/ffn $m r$r /" | tee -a "$L"
done; done
summary() { # json
    python3 -c "import json;d=json.load(open('$1'));print(round((d['n_gen']-1)/d['decode_ms']*1e3,2),'tok/s',{k:round(v) for k,v in d.get('phase_ms',{}).items()},'huge_mib',d.get('weights',{}).get('huge_mib'))" 2>&1 | tail -1
}
dec() { # file mode(page|huge|pipe) round [threads]
    local n=$1-$2-r$3-t${4:-16} fl=()
    case $2 in page) fl=(--inproc --mmap);; huge) fl=(--inproc --no-mmap);; pipe) fl=();; esac
    timeout 120 "$P" run "${fl[@]}" -m /dev/shm/$1.gguf -t "${4:-16}" -n "${N:-64}" -c 512 -p "Once upon a time" \
        --temp 0 --ignore-eos --json-stats "$R/$n.json" --dump-logits "$R/$n.logits" >/dev/null 2>"$R/$n.err"
    log "$1 $n $(summary "$R/$n.json")"
}
LB=""
if [ -f "$D/llama.txz" ]; then mkdir -p "$R/llama" && tar -xJf "$D/llama.txz" -C "$R/llama" && LB=$R/llama/bin/llama-bench; fi
for r in 1 2 3; do
    for f in s4 d4; do for m in page huge pipe; do dec $f $m $r; done; done
    [ -n "$LB" ] && log "llama.cpp d4 r$r $(LD_LIBRARY_PATH="$R/llama/bin:$LD_LIBRARY_PATH" timeout 60 "$LB" -m /dev/shm/d4.gguf -p 0 -n 32 -t 16 -r 1 -o csv 2>/dev/null | tail -1)"
done
dec s4 huge 1 8
for f in s4 d4; do
    cmp -s "$R/$f-page-r1-t16.logits" "$R/$f-huge-r1-t16.logits" && log "$f logits page = huge" || log "$f logits page DIFFER from huge"
    cmp -s "$R/$f-huge-r1-t16.logits" "$R/$f-pipe-r1-t16.logits" && log "$f logits in-process = pipeline" || log "$f logits in-process DIFFER from pipeline"
done
cmp -s "$R/s4-huge-r1-t16.logits" "$R/s4-huge-r1-t8.logits" && log "s4 logits -t 8 = -t 16" || log "s4 logits -t 8 DIFFER from -t 16"
rm -f /dev/shm/s4.gguf /dev/shm/d4.gguf
log "end: load $(cut -d' ' -f1-3 /proc/loadavg)"
