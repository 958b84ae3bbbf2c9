#!/bin/bash
# bench/cpu_host/cold_pack.sh OLD_BUILD NEW_BUILD DEST — what cold_ab.sh runs, from two release build
# trees (meson -Dcuda=disabled): DEST/old and DEST/new with bench/bench_ffn and tools/pictl, stripped,
# and DEST/lib with the .so files they link that a bare host may lack. Run on the development machine.
set -eu
. "$(dirname "$0")/../pack_lib.sh"
pack_strip "$1" "$3/old" bench/bench_ffn tools/pictl
pack_strip "$2" "$3/new" bench/bench_ffn tools/pictl
pack_libs "$3/lib"
du -sh "$3"
