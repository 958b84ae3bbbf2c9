#!/bin/bash
# bench/gpu/pack_ab.sh new|old BUILD DEST — ab_call.sh's trees from a -Dcuda=enabled build, stripped:
# new → DEST/trees.txz (gpu/: pictl for the 7B files, the CUDA tests, bench_cuda, bench_kern) and
# DEST/lib; old → DEST/old.txz (gpu/bench: bench_cuda, bench_kern). Pack the old tree before the
# change is built into the same directory. Run on the development machine.
set -eu
. "$(dirname "$0")/../pack_lib.sh"
WHICH=$1 B=$2 DEST=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$DEST"
case $WHICH in
new)
    pack_strip "$B" "$T/gpu" tools/pictl tests/test_cuda_ops tests/test_backend_ops tests/test_backend_ops_random \
        tests/test_cuda_mma bench/bench_cuda bench/bench_kern
    pack_libs "$DEST/lib"
    tar -C "$T" -cf - gpu | xz -9 -T2 >"$DEST/trees.txz" ;;
old)
    pack_strip "$B" "$T/gpu" bench/bench_cuda bench/bench_kern
    tar -C "$T" -cf - gpu | xz -9 -T2 >"$DEST/old.txz" ;;
*) echo "pack_ab.sh: new or old, not '$WHICH'" >&2; exit 2 ;;
esac
du -sh "$DEST"/*
