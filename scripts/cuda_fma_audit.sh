#!/bin/bash
# scripts/cuda_fma_audit.sh — does nvcc fuse a multiply and an add that the source did not fuse?
#
# Why: the CUDA backend's invariance contract (a token's bits do not depend on its batch) rests on every
# rounding being the source's: each multiply-add an explicit __fmaf_rn, other arithmetic explicit or
# plain. A plain `a * b + c` may be contracted into one fma by the compiler, and whether it is can differ
# between a kernel's instantiations. 2026-12-04: the CUDA-core GLU's `1 + expf(-g)` was so fused (the
# tensor-core epilogue's was not); fixed by cuk_act_dev.cuh.
#
# How: each kernel file is compiled to PTX twice, as the build does and with -fmad=false (which forbids
# contraction but leaves explicit fma alone); a kernel whose fma count differs between the two holds an
# implicit contraction. Needs nvcc only (no GPU); about 6 minutes on 2 cores, so it is not in the test
# suite: run it after editing kernel arithmetic.
#   scripts/cuda_fma_audit.sh [FILE.cu ...]   (default: gpud/cuda/cuk*.cu)
# Prints each kernel found, then "N kernels with an implicit contraction"; exits 1 when N > 0.
set -eu
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "cuda_fma_audit: nvcc not found (set NVCC)" >&2; exit 2; }
FILES=("$@")
[ ${#FILES[@]} -gt 0 ] || FILES=(gpud/cuda/cuk*.cu)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
FLAGS=(-arch=sm_90 -std=c++17 -O3 -Icommon -Iengine -Igpud/cuda)
for f in "${FILES[@]}"; do
    b=$(basename "$f" .cu)
    "$NVCC" "${FLAGS[@]}" -ptx "$f" -o "$W/$b.ptx"
    "$NVCC" "${FLAGS[@]}" -fmad=false -ptx "$f" -o "$W/$b.nofma.ptx"
done
python3 - "$W" <<'EOF'
import glob, os, re, sys
w = sys.argv[1]

def kernels(path):
    text = open(path).read()
    out = {}
    for m in re.finditer(r'\.entry (\S+)\(', text):
        end = text.index('\n}\n', m.start())
        out[m.group(1)] = text[m.start():end]
    return out

def fmas(body):
    return len(re.findall(r'\bfma\.rn\.f(32|64)\b', body))

found = checked = 0
for p in sorted(glob.glob(os.path.join(w, '*.nofma.ptx'))):
    name = os.path.basename(p)[:-len('.nofma.ptx')]
    plain, strict = kernels(os.path.join(w, name + '.ptx')), kernels(p)
    for k, body in plain.items():
        checked += 1
        extra = fmas(body) - fmas(strict.get(k, ''))
        if extra:
            found += 1
            print(f'{name}.cu: {k}: {extra} fma the source does not write')
print(f'{checked} kernels checked, {found} kernels with an implicit contraction')
sys.exit(1 if found else 0)
EOF
