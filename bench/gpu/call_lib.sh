# bench/gpu/call_lib.sh — sourced by the GPU call scripts (dec.sh, f16act.sh, mma.sh, prefill.sh,
# gsparse.sh): a call must end inside its device limit with what it measured so far, so every step runs
# under a timeout cut to the time left. The caller sets T0 (start, seconds), LIMIT (seconds the call
# may take), RUNDIR (where run.log and each step's log go) and, optionally, RESERVE (seconds a step
# leaves for what follows it; default 5). A script copied into a call's folder (.device/NAME/) takes
# this file along beside it.
left() { echo $((LIMIT - ($(date +%s) - T0))); }
log() { echo "[$(date +%T) +$(($(date +%s) - T0))s] $*" | tee -a "$RUNDIR/run.log"; }
step() { # seconds name cmd...: cmd under timeout min(seconds, time left - RESERVE), its log RUNDIR/name.log
    local s=$1 name=$2 l
    shift 2
    l=$(($(left) - ${RESERVE:-5}))
    [ "$l" -lt "$s" ] && s=$l
    if [ "$s" -le 3 ]; then log "$name: no time left"; return 1; fi
    timeout "$s" "$@" >"$RUNDIR/$name.log" 2>&1
    local rc=$?
    log "$name rc=$rc ($(tail -1 "$RUNDIR/$name.log"))"
    grep -m6 "failed:\|FAIL" "$RUNDIR/$name.log"
    return $rc
}
