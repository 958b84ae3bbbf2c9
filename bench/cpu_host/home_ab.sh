#!/bin/bash
# bench/cpu_host/home_ab.sh — issue 9: home-range pool jobs with next-matrix prefetch hints (new) vs
# the shared-claim pool (old), on the GPU machine's host, s4 and d4 of BENCH.md, -t 16:
#   1. the read bandwidth (bench_gemv's STREAM read, with and without prefetch)
#   2. 3 interleaved rounds of: s4 in process old / new / new with PINFER_POOL_PREFETCH_KB=0 (home
#      ranges alone) / =1024 / PINFER_POOL_SLICES=8; s4 pipeline (`pictl run`) old / new; d4 in
#      process old / new / new with PINFER_POOL_PREFETCH_KB=0
#   3. logits byte for byte: new -t 8 vs -t 16, old vs new (s4 in process and pipeline, d4), the
#      prefetch variants vs new
#   bench/cpu_host/home_ab.sh DIR   DIR/trees.txz: old/rel and new/rel, release trees (tools/pictl,
#   the stages, bench/bench_gemv); DIR/lib: .so files. Results in $OUT/home.log. env N: tokens (64);
#   VARIANTS="name:s4|d4:in|pipe:ENV=V,... ...": instead of step 2-3, 3 rounds of those runs of new,
#   each one's logits compared with the first variant's on the same file.
#   Stops itself before ~215 s (a device call of 240 s).
set -u
START=$(date +%s)
left() { echo $((215 - ($(date +%s) - START))); }
D=$1
[ -f "$D/trees.txz" ] && tar -xJf "$D/trees.txz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
O=${OUT:-/tmp/home-out}
R=/tmp/home-work
mkdir -p "$O" "$R"
L=$O/home.log
log() { echo "[$(date +%T) +$(($(date +%s) - START))s] $*" | tee -a "$L"; }
log "start: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
NEW=$D/new/rel OLD=$D/old/rel SHM=${SHM:-/dev/shm}
$NEW/tools/pictl synth --shape ${SHAPE:-llama-7b} --type q4_0 --pwri --pred-type q4_0 -t 16 -q -o $SHM/s4.gguf 2>&1 | tail -1
$NEW/tools/pictl synth --shape ${SHAPE:-llama-7b} --type q4_0 -t 16 -q -o $SHM/d4.gguf 2>&1 | tail -1
log "synth done"
timeout 40 "$NEW/bench/bench_gemv" -t 16 -n 3 -T q4_0 2>/dev/null | grep -E '"op":"read|q4_0' | tee -a "$L"
summary() { # json
    python3 -c "import json;d=json.load(open('$1'));print(round((d['n_gen']-1)/d['decode_ms']*1e3,2),'tok/s',{k:round(v) for k,v in d.get('phase_ms',{}).items()})" 2>&1 | tail -1
}
dec() { # name tree file mode(in|pipe) threads [env...]
    local n=$1 t=$2 f=$3 m=$4 th=$5 fl=()
    shift 5
    [ "$(left)" -lt 12 ] && { log "$n skipped: out of time"; return; }
    [ $m = in ] && fl=(--inproc)
    env "$@" timeout 40 "$t/tools/pictl" run "${fl[@]}" -m $SHM/$f.gguf -t "$th" -n "${N:-64}" -c 512 -p "Once upon a time" \
        --temp 0 --ignore-eos --json-stats "$R/$n.json" --dump-logits "$R/$n.logits" >/dev/null 2>"$R/$n.err"
    log "$n $(summary "$R/$n.json")"
}
if [ -n "${VARIANTS:-}" ]; then # "name:file:in|pipe:ENV=V,ENV=V ...": new's variants only, 3 rounds
    for r in 1 2 3; do
        for v in $VARIANTS; do
            IFS=: read -r n f m envs <<<"$v"
            dec "$n-r$r" $NEW "$f" "$m" 16 ${envs//,/ }
        done
    done
    for v in $VARIANTS; do # each variant's logits against the first variant on the same file
        IFS=: read -r n f m envs <<<"$v"
        for w in $VARIANTS; do
            IFS=: read -r n0 f0 m0 e0 <<<"$w"
            [ "$f0" = "$f" ] || continue
            [ "$n0" = "$n" ] || { cmp -s "$R/$n0-r1.logits" "$R/$n-r1.logits" && log "logits $n = $n0" ||
                log "logits $n DIFFER from $n0"; }
            break
        done
    done
fi
for r in $([ -n "${VARIANTS:-}" ] || echo 1 2 3); do
    dec s4-in-old-r$r $OLD s4 in 16 X=1
    dec s4-in-new-r$r $NEW s4 in 16 X=1
    dec s4-in-pf0-r$r $NEW s4 in 16 PINFER_POOL_PREFETCH_KB=0
    dec s4-in-pf1024-r$r $NEW s4 in 16 PINFER_POOL_PREFETCH_KB=1024
    dec s4-in-sl8-r$r $NEW s4 in 16 PINFER_POOL_SLICES=8
    dec s4-pipe-old-r$r $OLD s4 pipe 16 X=1
    dec s4-pipe-new-r$r $NEW s4 pipe 16 X=1
    dec d4-in-old-r$r $OLD d4 in 16 X=1
    dec d4-in-new-r$r $NEW d4 in 16 X=1
    dec d4-in-pf0-r$r $NEW d4 in 16 PINFER_POOL_PREFETCH_KB=0
done
[ -n "${VARIANTS:-}" ] || dec s4-in-new-t8 $NEW s4 in 8 X=1
[ -n "${VARIANTS:-}" ] || {
same() { cmp -s "$R/$1.logits" "$R/$2.logits" && log "logits $1 = $2" || log "logits $1 DIFFER from $2"; }
same s4-in-new-r1 s4-in-new-t8
same s4-in-old-r1 s4-in-new-r1
same s4-in-new-r1 s4-in-pf0-r1
same s4-in-new-r1 s4-in-pf1024-r1
same s4-in-new-r1 s4-in-sl8-r1
same d4-in-new-r1 d4-in-pf0-r1
same s4-pipe-old-r1 s4-pipe-new-r1
same s4-in-new-r1 s4-pipe-new-r1
same d4-in-old-r1 d4-in-new-r1
}
python3 - "$L" <<'PY' | tee -a "$L"
import re, statistics, sys, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    m = re.search(r'\] (\S+)-r\d (\d+\.\d+) tok/s', l)
    if m: d[m.group(1)].append(float(m.group(2)))
for k, v in d.items(): print('median', k, statistics.median(v), v)
PY
rm -f $SHM/s4.gguf $SHM/d4.gguf
log "end: load $(cut -d' ' -f1-3 /proc/loadavg)"
tar -C "$R" --exclude='*.logits' -czf "$O/home-work.tgz" . 2>/dev/null
