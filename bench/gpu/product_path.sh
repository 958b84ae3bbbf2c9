#!/bin/bash
# bench/gpu/product_path.sh DIR — the product's path against the benchmark's on the GPU machine:
# `pictl run --backend cuda` (the pipeline: gpud drives the layers through be_cuda) and, with
# INPROC=1, `pictl run --inproc --backend cuda`, against bench_cuda (the in-process decode graph),
# on BENCH.md's files, in ROUNDS (2) interleaved rounds. FILES: which of d16 s16 d4 s4 (default
# "d16 s16"; synthesized into /dev/shm when missing). PROD_ENVS: the pipeline's environments, one
# run each per round (comma-separated NAME=VALUE, X=1 for none; default "X=1"). Every run: 256
# tokens of "Once upon a time", --temp 0 --ignore-eos -c 2048 -t 16, as bench_cuda's -n 256 -c 2048;
# SAMPLING replaces "--temp 0" in the pipeline's and in-process runs (e.g. "--seed 1": llama.cpp's
# defaults, temperature 0.8 with the 40 best candidates).
# A pipeline line ends with the text's md5 and gpud's own account of a decode step (its log's
# "decode steps" line: the host around the evaluator, the layers' enqueueing, the output's wait).
# PAR=N (2..8) adds, per file and environment, N requests at once through an instance started with
# --parallel N (decode steps of N tokens): their summed decode rate, and N × 256 over the wall time
# from the first request's start to the last one's end (prefills included).
# DIR/trees.txz: pack_trees.sh's (gpu/bench/bench_cuda, gpu/tools/pictl and the stages), DIR/lib.
set -u
D=$1
[ -f "$D/trees.txz" ] && [ ! -d "$D/gpu" ] && tar -xJf "$D/trees.txz" -C "$D"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
G=$D/gpu S=/dev/shm/pinfer-rounds
mkdir -p "$S"
. "$(dirname "$0")/bench_files.sh"
for f in ${FILES:-d16 s16}; do
    bench_file "$G/tools/pictl" "$S" "$f"
done
"$G/bench/bench_cuda" --hbm 8 2>/dev/null | tail -1
read -r -a SAMP <<<"${SAMPLING:---temp 0}"
RUN=(-p "Once upon a time" -n 256 "${SAMP[@]}" --ignore-eos -c 2048 -t 16 --backend cuda)
rate() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["decode_tok_s"])' "$1" 2>/dev/null; }
for r in $(seq "${ROUNDS:-2}"); do
    for f in ${FILES:-d16 s16}; do
        case $f in s16 | s4) mode=sparse ;; *) mode=dense ;; esac
        t=$(timeout 60 "$G/bench/bench_cuda" "$S/$f.gguf" --mode "$mode" -n 256 -c 2048 2>/dev/null |
            python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("case")=="decode": print(d["tok_s"], d["first_ids"][:3])')
        echo "r$r $f bench_cuda $t"
        for envs in ${PROD_ENVS:-X=1}; do
            X=$S/xdg-$r-$f; rm -rf "$X"; mkdir -p "$X" # the instance's logs are kept there: gpud's step line
            env ${envs//,/ } PINFER_KEEP_LOGS=1 XDG_RUNTIME_DIR="$X" timeout 90 "$G/tools/pictl" run -m "$S/$f.gguf" \
                "${RUN[@]}" --json-stats "$S/p.json" >"$S/p.txt" 2>"$S/p.err"
            step=$(cat "$X"/pinfer/*/logs/gpud.log 2>/dev/null | grep -o 'decode steps .*\|decode graphs captured.*' |
                tail -2 | tr '\n' ' ')
            echo "r$r $f pipeline $envs $(rate "$S/p.json") text $(md5sum <"$S/p.txt" | cut -c1-8) | gpud $step"
            [ -s "$S/p.json" ] || tail -3 "$S/p.err"
            rm -f "$S/p.json"
            rm -rf "$X"
        done
        for envs in ${PAR:+${PROD_ENVS:-X=1}}; do
            X=$S/xdg-par; rm -rf "$X"; mkdir -p "$X"
            env ${envs//,/ } XDG_RUNTIME_DIR="$X" timeout 60 "$G/tools/pictl" start -m "$S/$f.gguf" --name par \
                -t 16 -c 2048 --parallel "$PAR" --backend cuda >/dev/null 2>"$S/par.err" || tail -3 "$S/par.err"
            t0=$(date +%s.%N)
            for i in $(seq "$PAR"); do
                XDG_RUNTIME_DIR="$X" timeout 90 "$G/tools/pictl" generate --name par -p "Once upon a time $i" -n 256 \
                    --temp 0 --ignore-eos --json-stats "$S/par-$i.json" >/dev/null 2>>"$S/par.err" &
            done
            wait
            t1=$(date +%s.%N)
            XDG_RUNTIME_DIR="$X" timeout 30 "$G/tools/pictl" stop --name par >/dev/null 2>&1
            echo "r$r $f parallel $PAR $envs $(python3 -c 'import json,sys
n, t = int(sys.argv[1]), float(sys.argv[3]) - float(sys.argv[2])
r = [json.load(open(sys.argv[4] + "/par-%d.json" % i)).get("decode_tok_s", 0) for i in range(1, n + 1)]
print("sum %.1f wall %.1f" % (sum(r), n * 256 / t))' "$PAR" "$t0" "$t1" "$S" 2>&1 | tail -1)"
            rm -f "$S"/par-*.json
            rm -rf "$X"
        done
        if [ -n "${INPROC:-}" ]; then
            timeout 90 "$G/tools/pictl" run --inproc -m "$S/$f.gguf" "${RUN[@]}" --json-stats "$S/p.json" \
                >"$S/p.txt" 2>"$S/p.err"
            echo "r$r $f inproc $(rate "$S/p.json") text $(md5sum <"$S/p.txt" | cut -c1-8)"
            [ -s "$S/p.json" ] || tail -3 "$S/p.err"
            rm -f "$S/p.json"
        fi
    done
done
