#!/bin/bash
# bench/disk/gpu_host.sh — the disk tier (issue 12) on the GPU host's disk, in under 120 s: a 7B
# q4_0 PowerInfer synthetic and its bundle on the host's disk (/var/tmp: O_DIRECT needs a real file
# system, /dev/shm is tmpfs), in process on the CPU (-t = all cores), all in RAM and with
# --ram-budget at 25 % and 50 % of the FFN (--disk-floor: the random-record O_DIRECT bandwidth at
# the reader's size and queue depth, measured right after each run); then, if the time left allows
# it, the F16 file at 25 %; at 25 % also with PINFER_STREAM_ASYNC=1 --stream-qd 1024. Prints one line per case and a summary (decode tok/s, ms/token, disk
# MiB/token, hit rate, misses, disk wait, the floor and the ratio to it, tokens against all in RAM).
#
#   bash bench/disk/gpu_host.sh PICTL [OUTDIR]
#   PICTL: a pictl binary (release, -Dcuda=disabled or enabled; only `pictl run --inproc` is used).
#   env: DEADLINE (seconds, default 115), DIR (default /var/tmp/pinfer-disk: removed at the end),
#        S4 (an existing q4_0 --pwri 7B synthetic to copy instead of synthesizing one; default: the one
#        bench_sparse.py leaves in /dev/shm/pinfer-bench-sparse-*, if any), N (tokens, 24),
#        T (threads, nproc), F16 (0: skip the F16 part), FRACS (the q4_0 fractions, "0.25 0.5"),
#        ASYNC_FRACS (those also run with PINFER_STREAM_ASYNC=1 --stream-qd 1024, "0.25").
# Results: OUTDIR (default $OUT or /tmp/disk-out)/disk.log, *.json (--json-stats of every run).
set -u
PICTL=$1
RES=${2:-${OUT:-/tmp/disk-out}}
DEADLINE=${DEADLINE:-115}
DIR=${DIR:-/var/tmp/pinfer-disk}
N=${N:-24}
T=${T:-$(nproc)}
T0=$(date +%s)
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
mkdir -p "$RES" "$DIR"
LOG=$RES/disk.log
: >"$LOG"
log() { echo "[$(date +%T) +$(($(date +%s) - T0))s] $*" | tee -a "$LOG"; }
trap 'rm -rf "$DIR"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
# a q4_0 --pwri 7B that bench_sparse.py (final_check.sh part 4) left in /dev/shm saves the synth
[ -z "${S4:-}" ] && S4=$(ls /dev/shm/pinfer-bench-sparse-*/synth-llama-7b-q4_0-pwri.gguf 2>/dev/null | head -1)

log "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(free -g | awk '/Mem:/{print $2" GiB RAM, "$7" available"}')"
log "disk: $(df -h "$DIR" | tail -1 | awk '{print $1" "$2" size, "$4" free"}') ($(findmnt -no FSTYPE -T "$DIR" 2>/dev/null))"

# a model + its bundle in $DIR: synth (or copy $S4) then pictl bundle; $1 = tag, $2 = type
make_model() {
    local tag=$1 type=$2 t=$3
    if [ "$type" = q4_0 ] && [ -n "${S4:-}" ] && [ -f "$S4" ]; then
        cp "$S4" "$DIR/$tag.gguf"
    else
        timeout "$t" "$PICTL" synth --shape llama-7b --type "$type" --pwri --pred-type q4_0 -t "$T" -q \
            -o "$DIR/$tag.gguf" >"$RES/synth-$tag.log" 2>&1 || { log "synth $tag failed rc=$?: $(tail -1 "$RES/synth-$tag.log")"; return 1; }
    fi
    timeout "$(left)" "$PICTL" bundle "$DIR/$tag.gguf" >"$RES/bundle-$tag.log" 2>&1 ||
        { log "bundle $tag failed: $(tail -1 "$RES/bundle-$tag.log")"; return 1; }
    log "$tag: $(du -h --apparent-size "$DIR/$tag.gguf" | cut -f1) file, $(du -h --apparent-size "$DIR/$tag.gguf.ffnbundle" | cut -f1) bundle"
}

# the budget at a fraction of the FFN: what is always resident (dense weights + the cache window, as
# pictl says for a budget of 0) + that fraction of the bundle's FFN records (bench/bench_disk.py's rule)
budget() {
    "$PICTL" run --inproc -m "$DIR/$1.gguf" -p x -n 1 --ram-budget 0 2>&1 | python3 -c '
import struct, sys
msg = sys.stdin.read(); dense = float(msg.split("resident: ")[1].split(" GiB")[0]); cache = float(msg.split("+ ")[1].split(" GiB")[0])
hdr = open(sys.argv[1], "rb").read(4096); nl, nf = struct.unpack_from("<II", hdr, 8); st = struct.unpack_from("<Q", hdr, 64)[0]
print("%.4f" % (dense + cache + float(sys.argv[2]) * nl * nf * st / 2**30))' "$DIR/$1.gguf.ffnbundle" "$2"
}

# one in-process run: $1 = model tag, $2 = case tag, $3 = time limit, rest = pictl args
run_case() {
    local m=$1 tag=$2 t=$3
    shift 3
    [ "$t" -lt 5 ] && { log "$tag: skipped (no time left)"; return 1; }
    timeout "$t" "$PICTL" run --inproc -m "$DIR/$m.gguf" -p "Once upon a time" -n "$N" --temp 0 --ignore-eos -c 256 \
        -t "$T" --json-stats "$RES/$tag.json" "$@" >"$RES/$tag.txt" 2>"$RES/$tag.err"
    local rc=$?
    log "$tag rc=$rc $(grep -h '\[perf\]' "$RES/$tag.err" | tail -1 | sed 's/.*| decode/decode/')"
    grep -h '\[disk\]' "$RES/$tag.err" | tail -1 | tee -a "$LOG"
    return $rc
}

if make_model s4 q4_0 45; then
    run_case s4 q4_0-ram 20
    for f in ${FRACS:-0.25 0.5}; do
        B=$(budget s4 $f)
        log "q4_0 budget at $f of the FFN: ${B:-?} GiB"
        [ -n "$B" ] && run_case s4 "q4_0-$f" 25 --ram-budget "$B" --disk-floor
        # the same with the reads issued by the kernel's workers and the whole prefetch in flight:
        # the submitting thread does not block on the device's queue (loaderd/stream.h)
        case " ${ASYNC_FRACS:-0.25} " in *" $f "*) ;; *) continue ;; esac
        [ -n "$B" ] && [ "$(left)" -gt 70 ] &&
            PINFER_STREAM_ASYNC=1 run_case s4 "q4_0-$f-async" 25 --ram-budget "$B" --stream-qd 1024 --disk-floor
    done
    rm -f "$DIR/s4.gguf" "$DIR/s4.gguf.ffnbundle"
fi

# F16 (13.5 GB + an 8.1 GB bundle): only with the time for synth, bundle and two runs
if [ "${F16:-1}" != 0 ] && [ "$(left)" -gt 75 ] && [ "$(df -k --output=avail "$DIR" | tail -1)" -gt 25000000 ]; then
    if make_model f16 f16 $(($(left) - 45)); then
        B=$(budget f16 0.25)
        log "f16 budget at 0.25 of the FFN: ${B:-?} GiB"
        run_case f16 f16-ram $((($(left) - 5) / 2))
        [ -n "$B" ] && run_case f16 f16-0.25 $(($(left) - 3)) --ram-budget "$B" --disk-floor
    fi
else
    log "f16: skipped ($(left) s left, $(df -h --output=avail "$DIR" | tail -1) free)"
fi

python3 "$here/summary.py" "$RES" | tee -a "$LOG"
log "done"
