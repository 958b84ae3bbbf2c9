# bench/gpu/bench_files.sh — sourced by the GPU scripts that run BENCH.md's 7B files.
# bench_file PICTL DIR NAME: DIR/NAME.gguf, synthesized with PICTL when it is not there yet; NAME is
# one of d16 (F16 dense), s16 (F16 with predictors), d4 (Q4_0), s4 (Q4_0 with Q4_0 predictors).
bench_file() {
    local pictl=$1 dir=$2 f=$3 a
    case $f in
        d16) a=(--type f16) ;; s16) a=(--type f16 --pwri) ;;
        d4) a=(--type q4_0) ;; s4) a=(--type q4_0 --pwri --pred-type q4_0) ;;
        *) echo "bench_file: unknown file '$f' (d16 s16 d4 s4)" >&2; return 1 ;;
    esac
    [ -f "$dir/$f.gguf" ] || "$pictl" synth --shape llama-7b "${a[@]}" -t 16 -q -o "$dir/$f.gguf"
}
