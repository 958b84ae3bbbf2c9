#!/bin/sh
# bench_load.sh — model load throughput: loaderd's reader (bench_load) against
# `dd bs=4M iflag=direct` on the same ~1 GiB GGUF, in one run. One JSON line per case.
#   bench/bench_load.sh [BUILD_DIR] [MIB] [DIR]   (defaults: build, 1024, /tmp)
# The file is created in DIR and deleted afterwards. The buffered cases read from the page cache
# (the file was just written); the O_DIRECT cases and dd read the device.
set -eu
build=${1:-build}
mib=${2:-1024}
dir=${3:-/tmp}
reps=3
bench="$build/bench/bench_load"
f=$(mktemp "$dir/pinfer-bench-load-XXXXXX")
trap 'rm -f "$f"' EXIT INT TERM
"$bench" --make "$f" "$mib"
sync
bytes=$(stat -c %s "$f")

secs=""
i=0
while [ $i -lt $reps ]; do
    # last line: "N bytes (...) copied, S s, R GB/s"
    s=$(LC_ALL=C dd if="$f" of=/dev/null bs=4M iflag=direct 2>&1 | tail -n 1 | awk -F', ' '{split($3, a, " "); print a[1]}')
    secs="$secs $s"
    i=$((i + 1))
done
med=$(printf '%s\n' $secs | sort -g | sed -n "$(( (reps + 1) / 2 ))p")
awk -v b="$bytes" -v m="$med" -v n="$reps" 'BEGIN { printf "{\"bench\":\"load\",\"case\":\"dd_direct_bs4M\",\"qd\":1,\"chunk_mib\":4,\"bytes\":%d,\"n\":%d,\"median_s\":%.4f,\"median_gbps\":%.3f,\"unit\":\"GB/s\"}\n", b, n, m, b / m * 1e-9 }'

"$bench" "$f" "$reps"
