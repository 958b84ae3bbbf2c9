#!/bin/bash
# bench/gpu/hybrid.sh — hybrid GPU + CPU under a VRAM budget, one call on the GPU machine (issue 10):
#   1. tests/test_hybrid on the calibrated tiny model (placements vs all-CPU greedy, allocator = plan)
#   2. the pipeline (gpud on cuda + cpud + predictord) on the tiny model at budgets from below the
#      fixed bytes (whole-layer fallback) to a few neurons per layer to most of the model: greedy
#      tokens against the in-process all-CPU run, and kill -9 of each stage leaves tokens and logits
#      unchanged (hybrid_kill.py); all-GPU and -ngl 3 against all-CPU too; kill -9 with all on the GPU
#      and no logits dump (gpud decodes through the whole-step graphs): tokens unchanged
#   1b. ipc_exit: what a CUDA IPC importer sees when the exporting process is killed
#   3. 7B shapes (pictl synth, BENCH.md's s16 / s4): sparse hybrid at 8.9 and 12 GiB (F16) and
#      3.1 GiB (Q4_0), -ngl at llama.cpp's layer counts, all-GPU for reference: decode tok/s
#   all the while nvidia-smi polls every process's device memory (poll.log: time, pid, name, MiB),
#   so that each run's peak can be checked against its budget + CUDA context afterwards; each sparse
#   hybrid run's critical-path floor (hybrid_floor.py) from the device's and the host's read bandwidth
#   measured in this call (DIR/bench_kern's hbm_read, DIR/bench_gemv's better read at 16 threads:
#   the call puts them beside pictl; without them no floor is printed).
#
#   bench/gpu/hybrid.sh [DIR [TINY]]   DIR: pictl + stages + test_hybrid + ipc_exit + hybrid_kill.py +
#   lib/ (.device/hybrid2); TINY: the calibrated tiny model (.device/cal.gguf)
#   env: OUT (results), DEADLINE (seconds of the whole script, default 225), SKIP_7B=1: parts 1-2 only;
#   ROUNDS=N: part 3's runs N times, interleaved. VARIANTS="A=1 A=2,B=3 ...": each round runs every
#   part-3 run once per variant, with that variant's comma-separated environment (tags -v1, -v2, ...).
#   SPEED_ONLY=1: part 3 only, RUNS="TAG ..." (e.g. "s16-8.39 s4-2.59"): only those 7B runs, S4=FILE: an
#   existing s4 file instead of synthesizing one
#   Results: $OUT/run.log, $OUT/poll.log and everything else packed in $OUT/results.tgz (the device
#   tool returns only a few files: the first call of 2026-12-01 lost the per-run JSON to that limit).
set -u
D=${1:-.device/hybrid2}
FINAL=${OUT:-/tmp/hybrid-out}
OUT=/tmp/hybrid-work
rm -rf "$OUT" # a warm machine keeps it between calls: a second run must not read the first's logs and polls
mkdir -p "$OUT" "$FINAL"
export PINFER_KEEP_LOGS=1 # the ephemeral instances' logs stay for the copy at the end
export PINFER_POOL_STATS=1 # each stage's thread pool says at exit whether it went solo (oversubscribed)
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
P=$D/pictl
TINY=${2:-.device/cal.gguf}
SHM=/dev/shm/pinfer-hybrid
T0=$(date +%s)
DEADLINE=${DEADLINE:-185}
log() { echo "[$(date +%T.%N | cut -c1-12)] $*" | tee -a "$OUT/run.log"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
mkdir -p "$SHM"

log "start: $(nproc) cores"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv >>"$OUT/run.log" 2>&1
(renice -n 19 $BASHPID >/dev/null; while :; do
    echo "$(date +%s.%N) $(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null | tr '\n' ';')"
    sleep 0.1
done) >"$OUT/poll.log" 2>&1 &
POLL=$!

# the 7B files, written while the tiny tests run
RUNS=${RUNS:-s16-8.39 s4-2.59 s16-12 s16-ngl20 s4-ngl17 s16-gpu-dense s16-gpu s4-gpu}
[ -n "${S4:-}" ] && [ -f "$S4" ] && ln -sf "$S4" "$SHM/s4.gguf"
[ -n "${SKIP_7B:-}" ] || (
    case " $RUNS" in *" s16"*)
        "$P" synth --shape llama-7b --type f16 --pwri -t "$(nproc)" -q -o "$SHM/s16.gguf" && echo s16 ok ;; esac
    [ -e "$SHM/s4.gguf" ] ||
        "$P" synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t "$(nproc)" -q -o "$SHM/s4.gguf" && echo s4 ok
) >"$OUT/synth.log" 2>&1 &
SYNTH=$!
[ -n "${SKIP_7B:-}" ] && SYNTH=

PROMPT="Once upon a time"
if [ -z "${SPEED_ONLY:-}" ]; then
# 1. in-process placements
log "test_hybrid"
timeout 40 "$D/test_hybrid" "$TINY" >"$OUT/test_hybrid.log" 2>&1
log "test_hybrid rc=$? ($(tail -1 "$OUT/test_hybrid.log"))"
grep -E "FAIL|fail" "$OUT/test_hybrid.log" | head -20 | tee -a "$OUT/run.log"

# 1b. CUDA IPC: the importer after the exporter's SIGKILL (after test_hybrid: its device-wide used bytes
# must not see the dead exporter's memory)
log "ipc_exit"
timeout 20 "$D/ipc_exit" 512 >"$OUT/ipc_exit.log" 2>&1
log "ipc_exit rc=$?"
grep -E "summary|again|context after|close handle|round after 0|round before 0|open handle|importer context" "$OUT/ipc_exit.log" | tee -a "$OUT/run.log"


# 2. the pipeline on the tiny model
NT=480 # tokens per tiny run (hybrid_kill.py's HK_TOKENS): long enough to kill a stage mid-request
export HK_TOKENS=$NT
tiny_run() { # tag args...
    local tag=$1
    shift
    log "run $tag: $*"
    timeout 40 "$P" run -m "$TINY" -p "$PROMPT" -n $NT --temp 0 --ignore-eos -c 512 -t 8 --json-stats "$OUT/$tag.json" "$@" \
        >"$OUT/$tag.txt" 2>"$OUT/$tag.err"
    log "run $tag rc=$? $(grep -h '\[perf\]' "$OUT/$tag.err" | tail -1)"
}
same_tokens() { # a.json b.json: the first difference, or "equal"
    python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["tokens"]; b=json.load(open(sys.argv[2]))["tokens"]; d=[i for i,(x,y) in enumerate(zip(a,b)) if x!=y]; print("equal (%d tokens)" % len(a) if a==b else "DIFFERENT at %s of %d/%d" % (d[0] if d else min(len(a),len(b)), len(a), len(b)))' "$1" "$2" 2>&1
}
tiny_run tiny-cpu --inproc --backend cpu
tiny_run tiny-cpu-dense --inproc --backend cpu --dense
tiny_run tiny-gpu-all --backend cuda
log "tiny all-GPU vs all-CPU: $(same_tokens "$OUT/tiny-cpu.json" "$OUT/tiny-gpu-all.json")"
tiny_run tiny-ngl3 --backend cuda -ngl 3 --dense
log "tiny -ngl 3 dense vs all-CPU dense: $(same_tokens "$OUT/tiny-cpu-dense.json" "$OUT/tiny-ngl3.json")"
# the fixed bytes on this machine (with the driver reserve): a budget of ~0 makes the supervisor say them
tiny_run tiny-fallback0 --backend cuda --vram-budget 0.00001
FIXED=$(cat /tmp/pinfer-*/run*/logs/supervisor.log 2>/dev/null | grep -o 'take [0-9.]* GiB ([0-9]* bytes)' | tail -1 |
    sed 's/.*(\([0-9]*\) bytes)/\1/')
log "fixed bytes: ${FIXED:-?}"
if [ -n "$FIXED" ]; then
    # ~25 neurons (a few per layer), ~1300 of 6144, and below the fixed bytes (whole-layer fallback)
    for extra in 40000 2000000 -3000000; do
        g=$(awk -v f="$FIXED" -v e="$extra" 'BEGIN { printf "%.9f", (f + e) / 1073741824 }')
        log "hybrid_kill budget fixed+$extra = $g GiB"
        want=cuda
        [ "$extra" -lt 0 ] && want=cuda-ngl
        HK_WANT_BACKEND=$want timeout 45 python3 "$D/hybrid_kill.py" "$P" "$TINY" "$g" "b$extra" "$OUT" "$OUT/tiny-cpu.json" 2>&1 |
            tee -a "$OUT/run.log"
    done
fi
# all on the GPU, no logits dump: gpud's decode steps are the backend's whole-step graphs
log "hybrid_kill all-GPU (8 GiB), tokens only"
HK_WANT_BACKEND=cuda HK_LOGITS=0 timeout 45 python3 "$D/hybrid_kill.py" "$P" "$TINY" 8 all-gpu "$OUT" "$OUT/tiny-cpu.json" 2>&1 |
    tee -a "$OUT/run.log"

fi # SPEED_ONLY

# 3. 7B speed
[ -n "$SYNTH" ] && wait $SYNTH
log "synth: $(tr '\n' ' ' <"$OUT/synth.log")"
# the floors' bandwidths, in this call (BENCH.md: floors measured in the same run)
HBM= HOST=
[ -x "$D/bench_kern" ] && HBM=$(timeout 60 "$D/bench_kern" --only hbm_read 2>/dev/null |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["GBs"])' 2>/dev/null)
[ -x "$D/bench_gemv" ] && HOST=$(timeout 60 "$D/bench_gemv" -t 16 -n 5 -T q4_0 2>/dev/null | python3 -c 'import json,sys
b=[json.loads(l)["gbps"] for l in sys.stdin if l.startswith("{") and "\"op\":\"read" in l]
print(max(b) if b else "")' 2>/dev/null)
log "floors: HBM read ${HBM:-not measured} GB/s, host read ${HOST:-not measured} GB/s"
ls -l "$SHM" >>"$OUT/run.log"
big_run() { # tag file args...
    local tag=$1 f=$2
    shift 2
    [ -e "$SHM/$f.gguf" ] || return 0
    case " $RUNS " in *" $tag "*) ;; *) return 0 ;; esac
    if [ "$(left)" -lt 25 ]; then
        log "skip $tag: $(left) s left"
        return 0
    fi
    local n=$tag$RSUF$VSUF
    log "run $n: ${VENV:+$VENV }$*"
    env ${VENV//,/ } timeout $(($(left) - 5)) "$P" run -m "$SHM/$f.gguf" -p "$PROMPT" -n 128 --temp 0 --ignore-eos -c 512 -t 16 \
        --json-stats "$OUT/$n.json" "$@" >"$OUT/$n.txt" 2>"$OUT/$n.err"
    log "run $n rc=$? $(grep -h '\[perf\]' "$OUT/$n.err" | tail -1)"
}
# PowerInfer's 8.9 / 3.1 GiB are what its process had in use, CUDA context included: our budget
# excludes the context (0.51 GiB as NVML counts it here), so equal VRAM in use is 8.39 / 2.59
# ROUNDS=N: the whole list N times, interleaved (the runs of round k named TAG-rk)
for k in $(seq "${ROUNDS:-1}"); do
    RSUF=""; [ "${ROUNDS:-1}" -gt 1 ] && RSUF=-r$k
    vi=0
    for VENV in ${VARIANTS:-none}; do
        VSUF=""; [ -n "${VARIANTS:-}" ] && vi=$((vi + 1)) && VSUF=-v$vi
        [ "$VENV" = none ] && VENV=
        big_run s16-8.39 s16 --backend cuda --vram-budget 8.39
        big_run s4-2.59 s4 --backend cuda --vram-budget 2.59
        big_run s16-12 s16 --backend cuda --vram-budget 12
        big_run s16-ngl20 s16 --backend cuda -ngl 20 --dense
        big_run s4-ngl17 s4 --backend cuda -ngl 17 --dense
        big_run s16-gpu-dense s16 --backend cuda --dense
        big_run s16-gpu s16 --backend cuda
        big_run s4-gpu s4 --backend cuda
    done
done
# the per-layer split of each hybrid run (decode only: --json-stats' decode_profile)
for j in "$OUT"/s*.json; do
    python3 -c 'import json,sys
j=json.load(open(sys.argv[1])); p=j.get("decode_profile") or {}; t=p.get("per_token") or {}; v=j.get("vram") or {}
L=p.get("per_layer") or []; cold=sum(r["cpud_mb"]*r["cpud_share_of_gpud_items"] for r in L)
print("split %s: %.2f tok/s | per token: wall %.3f ms, gpud compute %.3f + wait %.3f ms, cpud compute %.3f + wait %.3f ms | cold %.2f MB/token, PCIe %.3f+%.3f MB/token %.2f GB/s | hot %s neurons cover %s" % (sys.argv[1].split("/")[-1], j["decode_tok_s"], t.get("wall_ms",0), t.get("gpud_compute_ms",0), t.get("gpud_wait_ms",0), t.get("cpud_compute_ms",0), t.get("cpud_wait_ms",0), cold, t.get("pcie_d2h_mb",0), t.get("pcie_h2d_mb",0), p.get("pcie_gb_s",0), v.get("hot_neurons"), v.get("hot_coverage")))' "$j" 2>&1 | tee -a "$OUT/run.log"
done

# each sparse hybrid run against its critical-path floor (the budgeted runs: TAG-BUDGET[-rK].json)
if [ -n "$HBM" ] && [ -n "$HOST" ]; then
    for j in "$OUT"/s*-[0-9]*.json; do
        [ -e "$j" ] || continue
        f=$SHM/$(basename "$j" | cut -d- -f1).gguf
        python3 "$(dirname "$0")/hybrid_floor.py" "$f" "$j" --hbm "$HBM" --host "$HOST" 2>&1 | tee -a "$OUT/run.log"
    done
fi

kill $POLL 2>/dev/null
mkdir -p "$OUT/logs"
for d in /tmp/pinfer-*/*/logs; do
    [ -d "$d" ] && cp -r "$d" "$OUT/logs/$(basename "$(dirname "$d")")" 2>/dev/null
done
# did cpud's pool go solo (one thread for the cold share)? one line per cpud exit
python3 "$D/hybrid_poll.py" "$OUT/run.log" "$OUT/poll.log" 2>&1 | tee -a "$OUT/run.log"
grep -rh "\[pool\]\|cpud: gpud runs on\|cpud: mapped" "$OUT/logs" 2>/dev/null | sort | uniq -c | head -20 | tee -a "$OUT/run.log"
log "done in $(($(date +%s) - T0)) s"
cp "$OUT/run.log" "$OUT/poll.log" "$FINAL/"
# the tarball stays under the device's size limit: the logits dumps (.bin) stay behind
tar -czf "$FINAL/results.tgz" -C "$OUT" --exclude='*.bin' .
ls -l "$FINAL"
