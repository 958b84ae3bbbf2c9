#!/bin/bash
# bench/gpu/pack_trees.sh GPU_BUILD REL_BUILD DEST — the binaries final_check.sh needs, stripped and
# packed into DEST/trees.txz (gpu/ and rel/ in the build-tree layout, so pictl finds its stages; xz
# with its large window stores the CUDA kernels that every CUDA binary links once: 63 MB → 7 MB),
# with DEST/lib holding the .so files the GPU machine lacks. Run on the development machine.
set -eu
. "$(dirname "$0")/../pack_lib.sh"
G=$1 R=$2 DEST=$3
T=$(mktemp -d)
STAGES="tools/pictl gpud/gpud cpud/cpud predictord/predictord loaderd/loaderd"
for f in $STAGES tests/test_cuda_ops tests/test_backend_ops tests/test_backend_ops_random tests/test_cuda_mma \
    tests/test_cuk_traits tests/test_hybrid bench/bench_cuda bench/bench_kern; do
    [ -f "$G/$f" ] || continue
    mkdir -p "$T/gpu/$(dirname "$f")"
    strip -o "$T/gpu/$f" "$G/$f"
done
pack_strip "$R" "$T/rel" $STAGES bench/bench_gemv bench/bench_ffn
pack_libs "$DEST/lib"
tar -C "$T" -cf - gpu rel | xz -9 -T2 >"$DEST/trees.txz"
rm -rf "$T"
du -sh "$DEST"/*
