#!/bin/bash
# bench/gpu/hmap_ab.sh — issue 10's per-layer hand-off, old vs new in one call on the GPU machine:
#   1. (TINY given) the tiny calibrated model in the pipeline with the new binaries: hybrid greedy =
#      all-CPU greedy and kill -9 of gpud / predictord / cpud (and a cpud outage) bitwise, at a few
#      neurons per layer and at ~60 % of the activations (hybrid_kill.py); then old vs new at those
#      budgets: tokens and --dump-logits rows byte for byte
#   2. the 7B shapes (pictl synth, BENCH.md's s16 / s4, written while part 1 runs) in interleaved
#      rounds (ORDER, default "old new new old") at issue 10's budgets: decode tok/s, the decode split,
#      cpud's phase line (prep / ffn / publish / the gap to the next step), and the logits of every
#      run against the first old run's, byte for byte
# DIR holds V.txz for every variant V of ORDER (a gpu/ tree in the build layout: pack_trees.sh's
# trees.txz, or its gpu/ part alone), lib/ (.so files), hybrid_kill.py. The tiny part runs the kills
# with variant TNEW (default new) and compares it with old.
#   bash hmap_ab.sh DIR [TINY]   env: OUT (results), DEADLINE (s, default 225), RUNS (default
#   "s4-2.59 s16-8.39"), ORDER, TNEW, NT (tiny tokens, default 320), SKIP_TINY=1
set -u
D=${1:-.device/hmap}
TINY=${2:-}
FINAL=${OUT:-/tmp/hab-out}
W=/tmp/hab
T0=$(date +%s)
DEADLINE=${DEADLINE:-225}
RUNS=${RUNS:-s4-2.59 s16-8.39}
ORDER=${ORDER:-old new new old}
SHM=/dev/shm/hab
TNEW=${TNEW:-new}
VARS=$(echo old $TNEW $ORDER | tr ' ' '\n' | sort -u | tr '\n' ' ')
mkdir -p "$FINAL" "$SHM"
log() { echo "[$(date +%T)] $*" | tee -a "$W/run.log"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PINFER_KEEP_LOGS=1
for v in $VARS; do
    mkdir -p "$W/$v" && xz -dc "$D/$v.txz" | tar -C "$W/$v" -xf -
done
log "start: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
nvidia-smi --query-gpu=name,memory.used,driver_version --format=csv,noheader >>"$W/run.log" 2>&1
P=$W/$TNEW/gpu/tools/pictl
(
    case " $RUNS" in *" s4"*) nice "$P" synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t "$(nproc)" -q -o "$SHM/s4.gguf" && echo s4 ok ;; esac
    case " $RUNS" in *" s16"*) nice "$P" synth --shape llama-7b --type f16 --pwri -t "$(nproc)" -q -o "$SHM/s16.gguf" && echo s16 ok ;; esac
) >"$W/synth.log" 2>&1 &
SYNTH=$!
same() { # a b: "equal" or "DIFFER"
    cmp -s "$1" "$2" && echo equal || echo DIFFER
}

# 1. the tiny model
if [ -n "$TINY" ] && [ -f "$TINY" ] && [ -z "${SKIP_TINY:-}" ]; then
    NT=${NT:-320}
    export HK_TOKENS=$NT
    H=$W/hk
    mkdir -p "$H"
    # the stages beside pictl, as hybrid.sh's flat directory
    for v in old $TNEW; do
        mkdir -p "$W/flat-$v"
        cp "$W/$v/gpu/tools/pictl" "$W/$v/gpu/gpud/gpud" "$W/$v/gpu/cpud/cpud" "$W/$v/gpu/predictord/predictord" \
            "$W/$v/gpu/loaderd/loaderd" "$W/flat-$v/"
    done
    timeout 40 "$W/flat-$TNEW/pictl" run --inproc --backend cpu -m "$TINY" -p "Once upon a time" -n "$NT" --temp 0 \
        --ignore-eos -c 512 -t 8 --json-stats "$H/cpu.json" >"$H/cpu.txt" 2>"$H/cpu.err"
    log "tiny all-CPU rc=$?"
    timeout 40 "$W/flat-$TNEW/pictl" run -m "$TINY" -p "Once upon a time" -n 8 --temp 0 -c 512 -t 8 --backend cuda \
        --vram-budget 0.00001 >/dev/null 2>"$H/fixed.err"
    FIXED=$(cat /tmp/pinfer-*/run*/logs/supervisor.log 2>/dev/null | grep -o 'take [0-9.]* GiB ([0-9]* bytes)' |
        tail -1 | sed 's/.*(\([0-9]*\) bytes)/\1/')
    log "tiny fixed bytes: ${FIXED:-?}"
    if [ -n "$FIXED" ]; then
        for extra in 40000 2000000; do
            g=$(awk -v f="$FIXED" -v e="$extra" 'BEGIN { printf "%.9f", (f + e) / 1073741824 }')
            HK_WANT_BACKEND=cuda timeout 70 python3 "$D/hybrid_kill.py" "$W/flat-$TNEW/pictl" "$TINY" "$g" "b$extra" "$H" \
                "$H/cpu.json" 2>&1 | tee -a "$W/run.log"
            for v in old $TNEW; do
                timeout 40 "$W/flat-$v/pictl" run -m "$TINY" -p "Once upon a time" -n "$NT" --temp 0 --ignore-eos -c 512 \
                    -t 8 --backend cuda --vram-budget "$g" --json-stats "$H/ab-$extra-$v.json" \
                    --dump-logits "$H/ab-$extra-$v.bin" >"$H/ab-$extra-$v.txt" 2>"$H/ab-$extra-$v.err"
                log "tiny $v at fixed+$extra rc=$? $(grep -h '\[perf\]' "$H/ab-$extra-$v.err" | tail -1)"
            done
            log "tiny fixed+$extra old vs $TNEW: text $(same "$H/ab-$extra-old.txt" "$H/ab-$extra-$TNEW.txt"), logits $(same "$H/ab-$extra-old.bin" "$H/ab-$extra-$TNEW.bin") ($(stat -c %s "$H/ab-$extra-$TNEW.bin" 2>/dev/null) B)"
            rm -f "$H"/*.bin
        done
    fi
fi

# 2. 7B rounds
wait $SYNTH
log "synth: $(tr '\n' ' ' <"$W/synth.log") ($(($(date +%s) - T0)) s)"
split() {
    python3 -c 'import json,sys
j=json.load(open(sys.argv[1])); p=j.get("decode_profile") or {}; t=p.get("per_token") or {}
print("  split: %.2f tok/s | per token: gpud compute %.3f + wait %.3f ms, cpud compute %.3f + wait %.3f ms | PCIe %.3f+%.3f MB" % (j["decode_tok_s"], t.get("gpud_compute_ms",0), t.get("gpud_wait_ms",0), t.get("cpud_compute_ms",0), t.get("cpud_wait_ms",0), t.get("pcie_d2h_mb",0), t.get("pcie_h2d_mb",0)))' "$1" 2>&1
}
n=0
for r in $RUNS; do
    f=${r%%-*} b=${r#*-}
    [ -e "$SHM/$f.gguf" ] || { log "no $f.gguf"; continue; }
    for v in $ORDER; do
        n=$((n + 1))
        [ "$(left)" -lt 20 ] && { log "skip $r $v: $(left) s left"; continue; }
        tag=$n-$r-$v
        rm -rf /tmp/pinfer-*/run* 2>/dev/null
        timeout $(($(left) - 5)) "$W/$v/gpu/tools/pictl" run -m "$SHM/$f.gguf" -p "Once upon a time" -n 128 --temp 0 \
            --ignore-eos -c 512 -t 16 --backend cuda --vram-budget "$b" --json-stats "$W/$tag.json" \
            --dump-logits "$SHM/$tag.bin" >"$W/$tag.txt" 2>"$W/$tag.err"
        log "run $tag rc=$? $(grep -h '\[perf\]' "$W/$tag.err" | tail -1)"
        split "$W/$tag.json" | tee -a "$W/run.log"
        L=$(ls -td /tmp/pinfer-*/*/logs 2>/dev/null | head -1)
        [ -n "$L" ] && grep -h "one-token steps\|workers spin" "$L"/*.log 2>/dev/null | sed 's/^/  /' | tee -a "$W/run.log"
        [ -n "$L" ] && mkdir -p "$W/logs/$tag" && cp "$L"/*.log "$W/logs/$tag/" 2>/dev/null
        md5sum "$SHM/$tag.bin" | cut -c1-12 >"$W/$tag.md5"
    done
    a=$(ls "$W"/*-"$r"-old.txt 2>/dev/null | head -1)
    for t in "$W"/*-"$r"-*.txt; do
        log "$r: $(basename "$t" .txt) vs $(basename "$a" .txt): text $(same "$a" "$t"), logits $(cmp -s "${a%.txt}.md5" "${t%.txt}.md5" && echo equal || echo DIFFER) ($(cat "${t%.txt}.md5"))"
    done
    rm -f "$SHM"/*.bin
done
log "done in $(($(date +%s) - T0)) s"
cp "$W/run.log" "$FINAL/"
tar -czf "$FINAL/results.tgz" -C "$W" $(for v in $VARS; do echo --exclude=$v; done) --exclude='flat-*' --exclude='*.bin' .
