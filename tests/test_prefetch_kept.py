#!/usr/bin/env python3
"""test_prefetch_kept.py LIB.a — the AVX2 kernels' software prefetches survive compilation.

GCC 12 at -O1 and above deleted every prefetch that sat in a small `static inline` helper of
quant_avx2.c (prefetch_ahead, prefetch_row_head, gather_prefetch): the helpers are side-effect free
in its model, so their calls were dropped before they were inlined, and the dense GEMV, the
gathered sparse rows and the single dots ran on the hardware prefetchers alone; on the GPU host's
Xeon the prefetch is worth +27 % (q4_0 GEMV) to +47 % (F16) (docs/BENCHMARKS.md, "The AVX2
kernels' software prefetch, restored"). The helpers are now
always_inline; this test reads the object code (objdump) and fails if the prefetches are gone
again. Exit 77 (skip) without objdump or without the object."""
import re
import shutil
import subprocess
import sys

MIN_PREFETCHES = 40  # 83 with the helpers inlined (GCC 12, -O3), 11 when they were dropped


def main():
    lib = sys.argv[1]
    if not shutil.which("objdump"):
        print("SKIP: no objdump")
        return 77
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, text=True).stdout
    counts = {}
    member = None
    for line in out.splitlines():
        m = re.match(r"^(\S+\.o):\s+file format", line)
        if m:
            member = m.group(1).rsplit("/", 1)[-1]
            counts.setdefault(member, 0)
        elif member and "\tprefetch" in line:
            counts[member] += 1
    if "quant_avx2.c.o" not in counts:
        print("SKIP: quant_avx2.c.o not in", lib)
        return 77
    n = counts.get("quant_avx2.c.o", 0)
    print(f"quant_avx2.c.o: {n} prefetch instructions (at least {MIN_PREFETCHES} expected)")
    if n < MIN_PREFETCHES:
        print("FAIL: the compiler dropped the AVX2 kernels' software prefetches (see this file's docstring)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
