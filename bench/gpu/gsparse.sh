#!/bin/bash
# bench/gpu/gsparse.sh DIR — issue 14's sparse decode (branch gsparse) in one GPU call: the CUDA tests
# of this tree, then interleaved rounds of bench_cuda (256 tokens, --pp 0) over VARIANTS, "old" being
# DIR/old_bench_cuda.xz (main's build) and "new" this tree's; the HBM read floor first. Stops before
# LIMIT seconds (default 228) so that what ran comes back.
#   DIR: trees.txz (pack_trees.sh: gpu/, rel/), lib/, old_bench_cuda.xz
#   env: OUT, LIMIT, ROUNDS (2), VARIANTS ("tag:file:bin:ENV=V,ENV=V ...", bin old|new, X=1 for none),
#        TESTS (1: run them), TEST_ENVS (NAME=V ...: the tests again under each), MODELS (the files
#        synthesized: d16 s16 d4 s4)
set -u
D=$1
OUT=${OUT:-/tmp/gsparse-out}
LIMIT=${LIMIT:-228}
T0=$(date +%s)
RUNDIR=$OUT RESERVE=100 # the benches start at 100 s left
. "$(dirname "$0")/call_lib.sh"
mkdir -p "$OUT"
tar -xJf "$D/trees.txz" -C "$D"
xz -dc "$D/old_bench_cuda.xz" >"$D/old_bench_cuda" && chmod +x "$D/old_bench_cuda"
export LD_LIBRARY_PATH="$PWD/$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
G=$D/gpu S=/dev/shm/gsparse
mkdir -p "$S"
log "start: $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"
(for f in ${MODELS:-s16 s4 d16}; do
    case $f in
    d16) a=(--type f16) ;; s16) a=(--type f16 --pwri) ;;
    d4) a=(--type q4_0) ;; s4) a=(--type q4_0 --pwri --pred-type q4_0) ;;
    esac
    "$G/tools/pictl" synth --shape llama-7b "${a[@]}" -t 16 -q -o "$S/$f.gguf.tmp" >"$OUT/synth-$f.log" 2>&1 &&
        mv "$S/$f.gguf.tmp" "$S/$f.gguf"
done; touch "$S/.done") &
if [ "${TESTS:-1}" = 1 ]; then
    step 80 test_cuda_ops "$G/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf
    grep "sparse ffn\|pdl type" "$OUT/test_cuda_ops.log"
    step 40 test_cuda_mma "$G/tests/test_cuda_mma"
    step 40 test_backend_ops "$G/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
    step 40 test_backend_ops_random "$G/tests/test_backend_ops_random"
    for e in ${TEST_ENVS:-}; do # NAME=V: test_cuda_ops and test_backend_ops again under it
        step 40 "test_cuda_ops-$e" env "$e" "$G/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf
        step 40 "test_backend_ops-$e" env "$e" "$G/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
    done
fi
while [ ! -f "$S/.done" ] && [ "$(left)" -gt 100 ]; do sleep 1; done
log "models: $(ls -s "$S" | tr '\n' ' ')"
"$G/bench/bench_cuda" --hbm 8 2>/dev/null | tail -1 | tee -a "$OUT/bench.jsonl"
VARIANTS=${VARIANTS:-"s16-old:s16:old:X=1 s16:s16:new:X=1 s4-old:s4:old:X=1 s4:s4:new:X=1 d16-old:d16:old:X=1
    d16:d16:new:X=1"}
for r in $(seq "${ROUNDS:-2}"); do
    for v in $VARIANTS; do
        IFS=: read -r tag f bin envs <<<"$v"
        [ -f "$S/$f.gguf" ] || continue
        if [ "$(left)" -lt 14 ]; then log "r$r $tag: no time left"; continue; fi
        b="$G/bench/bench_cuda"
        [ "$bin" = old ] && b="$D/old_bench_cuda"
        mode=dense
        [ "${f#s}" != "$f" ] && mode=sparse
        env ${envs//,/ } timeout 25 "$b" "$S/$f.gguf" --mode "$mode" -n 256 -c 2048 --pp 0 2>>"$OUT/bench.err" |
            grep '^{' | sed "s/^{/{\"tag\":\"$tag\",\"round\":$r,/" >>"$OUT/bench.jsonl"
        python3 -c 'import json,sys
for l in open(sys.argv[1]).read().splitlines()[-1:]:
    d=json.loads(l)
    if d.get("tag")==sys.argv[2] and d.get("round")==int(sys.argv[3]):
        p=d.get("profile_ms",{})
        print("r%s %-10s %7.2f tok/s ids %s active %.4f | %s" % (sys.argv[3], sys.argv[2], d["tok_s"], d["first_ids"][:4], d.get("active_frac",0),
              " ".join("%s %.3f" % (k, v) for k, v in p.items())))' "$OUT/bench.jsonl" "$tag" "$r" | tee -a "$OUT/run.log"
    done
done
rm -rf "$S"
log done
(cd "$OUT" && tar -czf logs.tgz --remove-files ./*.log ./bench.err 2>/dev/null; cp -f logs.tgz /dev/null)
tar -xzf "$OUT/logs.tgz" -C "$OUT" ./run.log 2>/dev/null # run.log stays beside the archive
