#!/bin/bash
# bench/cpu_host/cold_pack.sh OLD_BUILD NEW_BUILD DEST — what cold_ab.sh runs, from two release build
# trees (meson -Dcuda=disabled): DEST/old and DEST/new with bench/bench_ffn and tools/pictl, stripped,
# and DEST/lib with the .so files they link that a bare host may lack. Run on the development machine.
set -eu
OLD=$1 NEW=$2 DEST=$3
for t in old new; do
    B=$OLD
    [ $t = new ] && B=$NEW
    for f in bench/bench_ffn tools/pictl; do
        mkdir -p "$DEST/$t/$(dirname $f)"
        strip -o "$DEST/$t/$f" "$B/$f"
    done
done
mkdir -p "$DEST/lib"
for l in libnanomsg.so.5 libjansson.so.4 libpcre2-8.so.0; do
    p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
    [ -n "$p" ] && cp -L "$p" "$DEST/lib/"
done
du -sh "$DEST"
