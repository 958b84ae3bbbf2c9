#!/bin/bash
# bench/gpu/cpud_ab.sh — issue 10's hybrid decode speed, cpud's per-layer fixed cost old vs new, one call
# on the GPU machine. DIR holds old.txz / new.txz (stripped gpu/ trees in the build layout, as
# pack_trees.sh writes them), lib/ (.so files), and optionally cal.gguf's path as TINY for test_hybrid.
#   bash cpud_ab.sh DIR [TINY]   env: OUT (results), DEADLINE (s, default 185), RUNS (default
#   "s16-8.39 s4-2.59"), ORDER (default "old new base new old": base = the new binary with
#   PINFER_CPUD_SPIN_US=0, the short spin; its first call also set PINFER_FFN_TWO_JOBS=1, the two
#   pool jobs a layer, a switch removed on 2026-12-02 once the one job had measured faster)
# Every 7B run: pictl run -n 128 --temp 0 --ignore-eos -c 512 -t 16 (pipeline, one sequence), as hybrid.sh.
# Prints per run: [perf], the decode split (--json-stats' decode_profile), cpud's phase line and pool stats.
set -u
D=${1:-.device/cpud}
TINY=${2:-}
FINAL=${OUT:-/tmp/cab-out}
W=/tmp/cab
T0=$(date +%s)
DEADLINE=${DEADLINE:-185}
RUNS=${RUNS:-s16-8.39 s4-2.59}
ORDER=${ORDER:-old new base new old}
SHM=/dev/shm/cab
mkdir -p "$W/old" "$W/new" "$FINAL" "$SHM"
log() { echo "[$(date +%T)] $*" | tee -a "$W/run.log"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PINFER_KEEP_LOGS=1 PINFER_POOL_STATS=1
xz -dc "$D/old.txz" | tar -C "$W/old" -xf - && xz -dc "$D/new.txz" | tar -C "$W/new" -xf -
log "start: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
P=$W/new/gpu/tools/pictl
(
    case " $RUNS" in *" s16"*) "$P" synth --shape llama-7b --type f16 --pwri -t "$(nproc)" -q -o "$SHM/s16.gguf" && echo s16 ok ;; esac
    case " $RUNS" in *" s4"*) "$P" synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t "$(nproc)" -q -o "$SHM/s4.gguf" && echo s4 ok ;; esac
) >"$W/synth.log" 2>&1 &
SYNTH=$!
if [ -n "$TINY" ] && [ -f "$TINY" ]; then
    timeout 40 "$W/new/gpu/tests/test_hybrid" "$TINY" >"$W/test_hybrid.log" 2>&1
    log "test_hybrid (new) rc=$? ($(tail -1 "$W/test_hybrid.log"))"
fi
wait $SYNTH
log "synth: $(tr '\n' ' ' <"$W/synth.log") ($(($(date +%s) - T0)) s)"
split() {
    python3 -c 'import json,sys
j=json.load(open(sys.argv[1])); p=j.get("decode_profile") or {}; t=p.get("per_token") or {}
print("  split: %.2f tok/s | per token: gpud compute %.3f + wait %.3f ms, cpud compute %.3f + wait %.3f ms" % (j["decode_tok_s"], t.get("gpud_compute_ms",0), t.get("gpud_wait_ms",0), t.get("cpud_compute_ms",0), t.get("cpud_wait_ms",0)))' "$1" 2>&1
}
n=0
for r in $RUNS; do
    f=${r%%-*} b=${r#*-}
    for v in $ORDER; do
        n=$((n + 1))
        [ "$(left)" -lt 20 ] && { log "skip $r $v: $(left) s left"; continue; }
        bin=$W/$v/gpu/tools/pictl env=
        [ "$v" = base ] && bin=$W/new/gpu/tools/pictl env="PINFER_CPUD_SPIN_US=0"
        tag=$n-$r-$v
        env $env timeout $(($(left) - 5)) "$bin" run -m "$SHM/$f.gguf" -p "Once upon a time" -n 128 --temp 0 --ignore-eos \
            -c 512 -t 16 --backend cuda --vram-budget "$b" --json-stats "$W/$tag.json" >"$W/$tag.txt" 2>"$W/$tag.err"
        log "run $tag rc=$? $(grep -h '\[perf\]' "$W/$tag.err" | tail -1)"
        split "$W/$tag.json" | tee -a "$W/run.log"
        L=$(ls -td /tmp/pinfer-*/*/logs 2>/dev/null | head -1)
        [ -n "$L" ] && grep -h "one-token steps\|\[pool\] threads 15\|workers spin\|not parked" "$L"/*.log 2>/dev/null | sed 's/^/  /' | tee -a "$W/run.log"
        [ -n "$L" ] && mkdir -p "$W/logs/$tag" && cp "$L"/*.log "$W/logs/$tag/" 2>/dev/null
    done
    a=$(ls "$W"/*-"$r"-old.txt 2>/dev/null | head -1)
    for t in "$W"/*-"$r"-*.txt; do
        cmp -s "$a" "$t" && s=equal || s=DIFFER
        log "$r: $(basename "$t") vs $(basename "$a"): $s"
    done
done
log "done in $(($(date +%s) - T0)) s"
cp "$W/run.log" "$FINAL/"
tar -czf "$FINAL/results.tgz" -C "$W" --exclude=old --exclude=new .
