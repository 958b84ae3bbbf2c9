#!/bin/bash
# bench/cpu_host/cold_ab.sh DIR — the hybrid mode's cold share (ffn_partial, issue 10's critical path)
# old tree vs new, on the GPU machine's host, in well under 100 s:
#   1. s4 (7B Q4_0, Q4_0 predictors) synthesized into /dev/shm with -t 16 if missing (~20 s)
#   2. bench_ffn old/new interleaved, 3 rounds: -p 0.015 (~160 of 11008 neurons: the cold share at
#      --vram-budget 2.59) as cpud runs it beside a GPU (-t 16 gives cpud a pool of 15: one core is
#      gpud's; workers spin 3000 µs between steps, CPUD_WORKER_SPIN_US; a layer's GPU part ~70 µs
#      between steps), and -p 0.1 at -t 16 (the all-CPU path, issue 9's in-process figure); new also
#      with the down_t split it did not pick (-m groups at 0.015, -m cols at 0.1)
#   3. the bytes: y_hash (every y of every iteration) old = new, and new at 16 = 8 = 1 threads
#   DIR/old, DIR/new: release trees with bench/bench_ffn and tools/pictl, DIR/lib: .so files
#   (cold_pack.sh OLD_BUILD NEW_BUILD DIR makes them; or DIR/trees.txz holding them). Results in
#   $OUT/cold_ab.log (OUT defaults to /tmp/cold-ab), medians and the byte checks last.
#   env ROUNDS (3), KEEP_MODEL=1 leaves /dev/shm/s4.gguf in place.
set -u
D=$(cd "$1" && pwd) # absolute: the library path below must not depend on where this runs
[ -f "$D/trees.txz" ] && tar -xJf "$D/trees.txz" -C "$D"
export LD_LIBRARY_PATH="$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
O=${OUT:-/tmp/cold-ab}
mkdir -p "$O"
L=$O/cold_ab.log
J=$O/runs.jsonl
: >"$J"
log() { echo "[$(date +%T)] $*" | tee -a "$L"; }
log "start: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
M=/dev/shm/s4.gguf
if [ ! -f $M ]; then
    "$D/new/tools/pictl" synth --shape llama-7b --type q4_0 --pwri --pred-type q4_0 -t 16 -q -o $M 2>&1 | tail -1
    log "s4 synth done"
fi
# run TREE CASE ARGS...: one bench_ffn line, tagged, into the log and runs.jsonl
run() {
    local tree=$1 case=$2
    shift 2
    local out
    out=$(timeout 60 "$D/$tree/bench/bench_ffn" $M "$@" 2>&1 | tail -1)
    log "$tree $case $* :: $out"
    case $out in
    \{*) echo "{\"tree\":\"$tree\",\"case\":\"$case\",\"r\":$out}" >>"$J" ;;
    esac
}
COLD="-t 15 -n 20 -p 0.015 -g 70 -s 3000" # cpud beside a GPU at -t 16
DENSE="-t 16 -n 10 -p 0.1"                # the all-CPU sparse path
for r in $(seq "${ROUNDS:-3}"); do
    for v in old new; do run $v cold $COLD; done
    run new cold-groups $COLD -m groups
    for v in old new; do run $v dense $DENSE; done
    run new dense-cols $DENSE -m cols
done
# the same masks at other thread counts (-g/-s change no byte): y_hash must not move
run new cold-t8 -t 8 -n 20 -p 0.015
run new cold-t1 -t 1 -n 20 -p 0.015
run new dense-t8 -t 8 -n 10 -p 0.1
run new dense-t1 -t 1 -n 10 -p 0.1
python3 - "$J" <<'PY' | tee -a "$L"
import json, statistics as st, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for x in runs:
    by.setdefault((x["tree"], x["case"]), []).append(x["r"])
print("medians (us per layer, the runs' build included; best = the fastest of the run's iterations, mean = all):")
for (tree, case), rs in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    if len(rs) < 2:
        continue
    med = lambda k: st.median(r[k] for r in rs)
    solo = sum(r["solo_runs"] for r in rs) if all("solo_runs" in r for r in rs) else "n/a"
    extra = ""
    if all("runs_us_mean" in r for r in rs): # trees with the breakdown: what of it is not ffn_partial's own
        extra = f", of which runs build {med('runs_us_mean'):.1f}; an empty job alone {med('noop_job_us_mean'):.1f}"
    print(f"  {case:12s} {tree:4s} best {med('us_per_layer_best'):7.1f} mean {med('us_per_layer_mean'):7.1f}"
          f"  ({len(rs)} runs, pool solo runs {solo}{extra})")
def hashes(keys):
    return {k: sorted({r.get("y_hash", "none") for r in by.get(k, [])}) for k in keys}
for fam in ("cold", "dense"):
    alt = "cold-groups" if fam == "cold" else "dense-cols"
    h = hashes([("old", fam), ("new", fam), ("new", alt), ("new", fam + "-t8"), ("new", fam + "-t1")])
    vals = {v for hs in h.values() for v in hs}
    verdict = "IDENTICAL bytes" if len(vals) == 1 and "none" not in vals else "DIFFER (or a tree without y_hash)"
    print(f"y bytes {fam}: old, new, new {alt.split('-')[1]}, new t8, new t1: {verdict}  {h}")
PY
[ -z "${KEEP_MODEL:-}" ] && rm -f $M
log "end: load $(cut -d' ' -f1-3 /proc/loadavg)"
