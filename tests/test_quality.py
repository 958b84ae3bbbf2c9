#!/usr/bin/env python3
"""test_quality — quantization quality: perplexity of the tiny model on held-out text (the last 5 %
of each corpus file, which training never saw: tests/fixtures/corpus/NAME.heldout.txt holds its
start) at f32, q8_0 and q4_0. q8_0 must stay within 1 % of f32 and q4_0 within 6 %. Prints all three.

usage: test_quality.py PICTL F32.gguf Q8_0.gguf Q4_0.gguf FIXTURES_DIR [MAX_CHARS]"""
import os, subprocess, sys, tempfile

pictl, f32, q8, q4, fixtures = sys.argv[1:6]
max_chars = int(sys.argv[6]) if len(sys.argv) > 6 else 40000
CTX = 256

tmp = tempfile.mkdtemp(prefix="pinfer-ppl-")
text_path = os.path.join(tmp, "heldout.txt")
parts = []
for name in ("tinyshakespeare", "fortunes"):
    tail = open(os.path.join(fixtures, "corpus", name + ".heldout.txt"), encoding="utf-8").read()
    tail = tail[tail.find("\n") + 1:]          # start at a line boundary
    parts.append(tail[:max_chars // 2])
open(text_path, "w", encoding="utf-8").write("\n".join(parts))


def ppl(model):
    p = subprocess.run([pictl, "perplexity", "-m", model, "-f", text_path, "-c", str(CTX), "-t", "2"],
                       capture_output=True, timeout=1200)
    if p.returncode != 0:
        sys.exit(f"perplexity failed for {model}: {p.stderr.decode(errors='replace')[-500:]}")
    line = p.stdout.decode()
    return float(line.split("PPL = ")[1].split()[0]), line.strip()


base, line = ppl(f32)
print(f"f32 : {line}")
failed = 0
for label, path, limit in (("q8_0", q8, 0.01), ("q4_0", q4, 0.06)):
    v, line = ppl(path)
    rel = v / base - 1
    ok = abs(rel) <= limit
    failed += not ok
    print(f"{label}: {line}  ({rel * 100:+.2f} % vs f32, limit {limit * 100:.0f} %) {'ok' if ok else 'FAIL'}")
sys.exit(1 if failed else 0)
