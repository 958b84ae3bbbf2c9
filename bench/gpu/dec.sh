#!/bin/bash
# bench/gpu/dec.sh — the decode kernels' GPU call (issue 14, branch gdec): the CUDA tests, then the
# decode rates of d16 / s16 / d4, each also in the A/B variants of VARIANTS (below; e.g.
# PINFER_CUDA_PDL=0, PINFER_CUDA_MMV=0 = cuk_mma.cu's decode kernel), with the HBM read floor before
# and after. Stops itself before LIMIT seconds (default 240) so that partial results come back.
#
#   bash bench/gpu/dec.sh KIT     KIT: b.txz (build tree: tests/, bench/, tools/) and lib/ (shared libs)
#   env: MODELS ("d16 s16 d4": the files written), VARIANTS (the decode runs, below), LIMIT, SKIP_TESTS=1
# Results: $OUT/dec.tgz (logs, bench.jsonl) and the key figures on stdout.
set -u
KIT=$1
OUT=${OUT:-/tmp/dec-out}
LIMIT=${LIMIT:-240}
MODELS=${MODELS-d16 s16 d4}
T0=$(date +%s)
W=/tmp/dec-kit
mkdir -p "$W" "$OUT/r"
xz -dc "$KIT/b.txz" | tar -C "$W" -xf -
export LD_LIBRARY_PATH="$PWD/$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SHM=/dev/shm/pinfer-dec
mkdir -p "$SHM"
RUNDIR=$OUT/r
. "$(dirname "$0")/call_lib.sh"
log "start: $(nproc) cores; $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"
synth() {
    local name=$1
    shift
    "$W/tools/pictl" synth --shape llama-7b "$@" -t 14 -q -o "$SHM/$name.gguf" >"$OUT/r/synth-$name.log" 2>&1
}
(for name in $MODELS; do
    case $name in
    d16) synth d16 --type f16 ;;
    d4) synth d4 --type q4_0 ;;
    s16) synth s16 --type f16 --pwri ;;
    esac
done; touch "$SHM/.done") &
if [ -z "${SKIP_TESTS:-}" ]; then
    step 40 test_cuda_mma "$W/tests/test_cuda_mma"
    grep -m5 "failed\|FAIL" "$OUT/r/test_cuda_mma.log"
    step 100 test_cuda_ops "$W/tests/test_cuda_ops" models/tiny-relu-llama-f16.gguf
    grep "mmv\|pdl" "$OUT/r/test_cuda_ops.log" | head -8
    grep -m8 "failed\|FAIL" "$OUT/r/test_cuda_ops.log"
    step 40 test_backend_ops "$W/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
    grep -m5 "failed\|FAIL" "$OUT/r/test_backend_ops.log"
    step 60 test_backend_ops_random "$W/tests/test_backend_ops_random"
    grep -m5 "failed\|FAIL" "$OUT/r/test_backend_ops_random.log"
    # the streamed kernel only where it was first used (PINFER_CUDA_MMV=1): batch = alone, bitwise
    step 40 test_cuda_mma-mmv1 env PINFER_CUDA_MMV=1 "$W/tests/test_cuda_mma"
    step 40 test_backend_ops-mmv1 env PINFER_CUDA_MMV=1 "$W/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
    grep -m5 "failed\|FAIL" "$OUT/r/test_backend_ops-mmv1.log"
    # the decode chain in plain stream order (PDL is the default)
    step 40 test_backend_ops-nopdl env PINFER_CUDA_PDL=0 "$W/tests/test_backend_ops" models/tiny-relu-llama-f16.gguf
    grep -m5 "failed\|FAIL" "$OUT/r/test_backend_ops-nopdl.log"
    step 60 test_backend_ops_random-nopdl env PINFER_CUDA_PDL=0 "$W/tests/test_backend_ops_random"
    grep -m5 "failed\|FAIL" "$OUT/r/test_backend_ops_random-nopdl.log"
fi
while [ ! -f "$SHM/.done" ] && [ "$(left)" -gt 30 ]; do sleep 1; done
log "synth: $(ls -s "$SHM" | tr '\n' ' ')"
"$W/bench/bench_cuda" --hbm 8 >>"$OUT/r/bench.jsonl" 2>>"$OUT/r/run.log"
run() { # tag file mode batches env...
    local tag=$1 f=$2 mode=$3 bt=$4
    shift 4
    step 40 "bench-$tag" env "$@" "$W/bench/bench_cuda" "$f" --mode "$mode" -n 256 -c 2048 --pp 0 ${bt:+--batch $bt}
    sed "s/^{/{\"file\":\"$tag\",/" "$OUT/r/bench-$tag.log" | grep '^{' >>"$OUT/r/bench.jsonl"
}
# VARIANTS: "tag:file:VAR=V,VAR=V ..." (default: each file as is and without programmatic dependent
# launch and the streamed kernel everywhere, PINFER_CUDA_PDL=0 PINFER_CUDA_MMV=1)
VARIANTS=${VARIANTS-"d16:d16:X=1 d16-plain:d16:PINFER_CUDA_PDL=0,PINFER_CUDA_MMV=1 s16:s16:X=1 s16-plain:s16:PINFER_CUDA_PDL=0,PINFER_CUDA_MMV=1 d4:d4:X=1 d4-plain:d4:PINFER_CUDA_PDL=0"}
for v in $VARIANTS; do
    IFS=: read -r tag name envs <<<"$v"
    f=$SHM/$name.gguf
    [ -f "$f" ] || continue
    mode=dense
    [ "${name#s}" != "$name" ] && mode=sparse
    bt=
    [ "$tag" = d16 ] && bt=1,8
    run "$tag" "$f" "$mode" "$bt" ${envs//,/ }
done
# the prefill of d16 after the decode kernels: pp_invariant (decode = one-token prefill, bitwise)
[ -f "$SHM/d16.gguf" ] && step 40 bench-d16-pp "$W/bench/bench_cuda" "$SHM/d16.gguf" --mode dense -n 16 -c 2048 --pp 512
[ -f "$OUT/r/bench-d16-pp.log" ] && sed 's/^{/{"file":"d16-pp",/' "$OUT/r/bench-d16-pp.log" | grep '^{' >>"$OUT/r/bench.jsonl"
"$W/bench/bench_cuda" --hbm 8 >>"$OUT/r/bench.jsonl" 2>>"$OUT/r/run.log"
log "done"
python3 - "$OUT/r/bench.jsonl" <<'EOF' | tee "$OUT/r/summary.txt"
import json, sys
for l in open(sys.argv[1]):
    if not l.startswith('{'):
        continue
    r = json.loads(l)
    keep = {k: r[k] for k in ('file', 'case', 'mode', 'path', 'tok_s', 'agg_tok_s', 'batch', 'best_gbps',
                              'achieved_gbps', 'pp_invariant', 'first_ids', 'profile_ms') if k in r}
    print(json.dumps(keep))
EOF
tar -C "$OUT/r" -czf "$OUT/dec.tgz" .
