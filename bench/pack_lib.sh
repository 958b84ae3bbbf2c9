# bench/pack_lib.sh — sourced by the scripts that pack binaries for the GPU machine (bench/gpu/pack_trees.sh,
# bench/cpu_host/cold_pack.sh): pack_strip copies build outputs stripped, in the build-tree layout;
# pack_libs copies the .so files our binaries link that a bare host may lack.

# pack_strip BUILD DEST FILE...: BUILD/FILE stripped to DEST/FILE
pack_strip() {
    local b=$1 d=$2 f
    shift 2
    for f in "$@"; do
        mkdir -p "$d/$(dirname "$f")"
        strip -o "$d/$f" "$b/$f"
    done
}

# pack_libs DEST: the libraries into DEST (created)
pack_libs() {
    local l p
    mkdir -p "$1"
    for l in libnanomsg.so.5 libjansson.so.4 libpcre2-8.so.0; do
        p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
        [ -n "$p" ] && cp -L "$p" "$1/"
    done
    return 0
}
