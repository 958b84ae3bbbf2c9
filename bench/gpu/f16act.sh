#!/bin/bash
# bench/gpu/f16act.sh — the f16-activation mode's GPU call (issue 14, branch f16act): the CUDA tests
# with PINFER_CUDA_MMA_ACT=f16 (test_cuda_mma also under PINFER_CUDA_MMA_TILE=7, test_cuda_ops,
# test_backend_ops), then d16 (7B F16) pp512 + decode in 3 interleaved rounds of split (default) /
# f16 / f16 + tiling 7, then the tiny model's reference cases (reference.json: greedy ids, first-step
# logits) through pictl run --inproc on cpu, cuda split and cuda f16 with the logits NMSE of f16
# against split, then the tests again in the default (split) mode.
# Stops itself before LIMIT seconds (default 225) so that partial results come back.
#
#   bash bench/gpu/f16act.sh KIT     KIT: b.txz (build tree: tests/, bench/, tools/), lib/ optional
#   env: LIMIT, LIB (a folder of .so files, default .device/lib)
# Results: $OUT/f16act.tgz (logs, bench.jsonl, tiny.json), $OUT/summary.txt, key figures on stdout.
set -u
KIT=$1
OUT=${OUT:-/tmp/f16act-out}
LIMIT=${LIMIT:-225}
LIB=${LIB:-.device/lib}
T0=$(date +%s)
W=/tmp/f16act-kit
mkdir -p "$W" "$OUT/r"
xz -dc "$KIT/b.txz" | tar -C "$W" -xf -
export LD_LIBRARY_PATH="$PWD/$KIT/lib:$PWD/$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SHM=/dev/shm/pinfer-f16act
TINY=models/tiny-relu-llama-f16.gguf
mkdir -p "$SHM"
RUNDIR=$OUT/r
. "$(dirname "$0")/call_lib.sh"
log "start: $(nproc) cores; $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"
("$W/tools/pictl" synth --shape llama-7b --type f16 -t 12 -q -o "$SHM/d16.gguf" >"$OUT/r/synth.log" 2>&1
    touch "$SHM/.done") &
A16="PINFER_CUDA_MMA_ACT=f16"
step 40 test_cuda_mma-f16 env $A16 "$W/tests/test_cuda_mma"
grep "f16 activations" "$OUT/r/test_cuda_mma-f16.log" | head -5
step 30 test_cuda_mma-f16-tile7 env $A16 PINFER_CUDA_MMA_TILE=7 "$W/tests/test_cuda_mma"
step 80 test_cuda_ops-f16 env $A16 "$W/tests/test_cuda_ops" "$TINY"
grep "tiny model" "$OUT/r/test_cuda_ops-f16.log"
while [ ! -f "$SHM/.done" ] && [ "$(left)" -gt 60 ]; do sleep 1; done
log "synth: $(ls -s "$SHM" | tr '\n' ' ')"
bench() { # name env...
    local name=$1
    shift
    [ -f "$SHM/d16.gguf" ] || return
    step 35 "bench-$name" env "$@" "$W/bench/bench_cuda" "$SHM/d16.gguf" --mode dense -n 64 -c 2048 --pp 512
    sed "s/^{/{\"run\":\"$name\",/" "$OUT/r/bench-$name.log" | grep '^{' >>"$OUT/r/bench.jsonl"
    python3 - "$OUT/r/bench-$name.log" "$name" <<'EOF'
import json, sys
pp = dec = None
for l in open(sys.argv[1]):
    if not l.startswith('{'):
        continue
    r = json.loads(l)
    if r.get('case') == 'prefill' and r.get('path') == 'own':
        pp = r
    if r.get('case') == 'decode':
        dec = r
print(sys.argv[2], 'pp512', pp and pp['tok_s'], 'inv', pp and pp['pp_invariant'], 'prof', pp and pp['profile_ms'],
      '| decode', dec and dec['tok_s'], dec and dec['first_ids'][:4])
EOF
}
for r in 1 2 3; do
    bench "split-r$r" PINFER_NONE=1
    bench "f16-r$r" $A16
    bench "f16t7-r$r" $A16 PINFER_CUDA_MMA_TILE=7
done
rm -f "$SHM/d16.gguf"
# the tiny model's reference cases: pictl run in-process, cpu / cuda split / cuda f16
REF=tests/fixtures/models/tiny-relu-llama/reference.json
timeout $(($(left) > 70 ? 50 : 20)) python3 - "$W/tools/pictl" "$TINY" "$REF" "$OUT/r" <<'EOF' 2>&1 | tee "$OUT/r/tiny.log"
import json, os, struct, subprocess, sys
pictl, model, ref, out = sys.argv[1:5]
cases = json.load(open(ref))["cases"]
V = 4096
res = []
for i, c in enumerate(cases):
    n = len(c["greedy_ids"])
    got = {}
    for tag, be, env in (("cpu", "cpu", {}), ("split", "cuda", {}), ("f16", "cuda", {"PINFER_CUDA_MMA_ACT": "f16"})):
        js, lg = f"{out}/tiny{i}-{tag}.json", f"{out}/tiny{i}-{tag}.bin"
        p = subprocess.run([pictl, "run", "--inproc", "--backend", be, "-m", model, "-p", c["prompt"], "--temp", "0",
                            "-n", str(n), "--ignore-eos", "-t", "4", "--json-stats", js, "--dump-logits", lg],
                           env={**os.environ, **env}, capture_output=True, timeout=20)
        if p.returncode:
            print(f"case {i} {tag}: rc {p.returncode} {p.stderr.decode(errors='replace')[-300:]}")
            continue
        raw = open(lg, "rb").read()
        got[tag] = (json.load(open(js))["tokens"], [struct.unpack_from(f"<{V}f", raw, 4 * V * k) for k in range(len(raw) // (4 * V))])
        os.remove(lg)
    row = {"case": i, "n_prompt": len(c["prompt_ids"])}
    for tag, (toks, lgs) in got.items():
        row[tag + "_ids_eq_ref"] = toks == c["greedy_ids"]
        row[tag + "_first_div"] = next((k for k, (a, b) in enumerate(zip(toks, c["greedy_ids"])) if a != b), len(toks))
        md = max(abs(a - b) for a, b in zip(lgs[0], c["first_step_logits"]))
        row[tag + "_first_rel"] = md / max(abs(b) for b in c["first_step_logits"])
    if "split" in got and "f16" in got:  # logits NMSE of f16 against split, while the tokens agree
        (ta, la), (tb, lb) = got["split"], got["f16"]
        k = next((k for k, (a, b) in enumerate(zip(ta, tb)) if a != b), len(ta))
        k = min(k + 1, len(la), len(lb))  # the step whose argmax differs is still the same context
        num = sum((b - a) ** 2 for s in range(k) for a, b in zip(la[s], lb[s]))
        den = sum(a * a for s in range(k) for a in la[s])
        row["f16_vs_split_nmse"] = num / den
        row["f16_vs_split_steps"] = k
    res.append(row)
    print(json.dumps(row))
json.dump(res, open(f"{out}/tiny.json", "w"))
EOF
step 40 test_cuda_mma "$W/tests/test_cuda_mma"
step 80 test_cuda_ops "$W/tests/test_cuda_ops" "$TINY"
step 30 test_backend_ops-f16 env $A16 "$W/tests/test_backend_ops" "$TINY"
step 30 test_backend_ops "$W/tests/test_backend_ops" "$TINY"
log "done"
python3 - "$OUT/r/bench.jsonl" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get('case') in ('prefill', 'decode'):
        keep = {k: r[k] for k in ('run', 'case', 'path', 'tok_s', 'pp_invariant', 'profile_ms', 'first_ids') if k in r}
        print(json.dumps(keep))
EOF
cat "$OUT/r/tiny.log" >>"$OUT/summary.txt" 2>/dev/null
tar -C "$OUT/r" -czf "$OUT/f16act.tgz" .
rm -rf "$SHM" "$W"
