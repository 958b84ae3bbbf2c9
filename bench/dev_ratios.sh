#!/bin/bash
# bench/dev_ratios.sh PICTL LLAMA_BENCH D4.gguf S4.gguf [THREADS] — issue 9's ratios in one run on the
# development machine: ROUNDS (3) interleaved rounds of llama.cpp's dense decode of D4 (`llama-bench -p 0
# -n 16`), then pinfer's d4 / s4 in process and through the pipeline (`pictl run [--inproc] -n 17`);
# tok/s = (n - 1) / decode time; then in process vs pipeline logits byte for byte (round 1).
# D4 / S4: `pictl synth --shape llama-7b --type q4_0 [--pwri --pred-type q4_0]`.
set -u
P=$1 L=$2 D4=$3 S4=$4 T=${5:-2}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
rate() { python3 -c "import json;d=json.load(open('$1'));print(round((d['n_gen']-1)/d['decode_ms']*1e3,2))"; }
for r in $(seq "${ROUNDS:-3}"); do
    l=$("$L" -m "$D4" -p 0 -n 16 -t "$T" -r 1 2>/dev/null | grep tg16 | tr -s ' ' | cut -d'|' -f8)
    echo "r$r llama.cpp d4 $l"
    for f in d4 s4; do
        m=$D4
        [ $f = s4 ] && m=$S4
        for mode in in pipe; do
            fl=()
            [ $mode = in ] && fl=(--inproc)
            "$P" run "${fl[@]}" -m "$m" -t "$T" -n 17 -c 256 -p "Once upon a time" --temp 0 --ignore-eos \
                --json-stats "$W/j.json" --dump-logits "$W/$f-$mode-r$r.logits" >/dev/null 2>"$W/err.txt" ||
                { echo "r$r pinfer $f $mode failed: $(tail -1 "$W/err.txt")"; continue; }
            echo "r$r pinfer $f $mode $(rate "$W/j.json")"
        done
    done
done
for f in d4 s4; do
    cmp -s "$W/$f-in-r1.logits" "$W/$f-pipe-r1.logits" && echo "logits $f in process = pipeline" ||
        echo "logits $f in process DIFFER from pipeline"
done
