#!/usr/bin/env python3
"""test_cli — pictl as a user meets it: run / tokenize / perplexity against the HF reference,
--dump-logits and --json-stats files, seeds, and clear errors for bad input.

usage: test_cli.py PICTL MODEL.gguf FIXTURES_DIR"""
import json, os, struct, subprocess, sys, tempfile

pictl, model, fixtures = sys.argv[1:4]
ref = json.load(open(os.path.join(fixtures, "models/tiny-relu-llama/reference.json")))
failures = 0
checks = 0


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)


def run(*args, ok=True):
    p = subprocess.run([pictl, *args], capture_output=True, timeout=300)
    if ok and p.returncode != 0:
        print(p.stderr.decode(errors="replace"), file=sys.stderr)
    return p


tmp = tempfile.mkdtemp(prefix="pinfer-cli-")
V = 4096
for i, case in enumerate(ref["cases"]):
    n = len(case["greedy_ids"])
    js, lg = os.path.join(tmp, f"s{i}.json"), os.path.join(tmp, f"l{i}.bin")
    p = run("run", "-m", model, "-p", case["prompt"], "--temp", "0", "-n", str(n), "--ignore-eos", "-t", "2",
            "--json-stats", js, "--dump-logits", lg)
    check(p.returncode == 0, f"case {i}: pictl run exited {p.returncode}")
    if p.returncode != 0:
        continue
    stats = json.load(open(js))
    check(stats["tokens"] == case["greedy_ids"], f"case {i}: pipeline tokens differ from HF greedy")
    check(stats["n_prompt"] == len(case["prompt_ids"]), f"case {i}: n_prompt {stats['n_prompt']}")
    raw = open(lg, "rb").read()
    check(len(raw) == n * V * 4, f"case {i}: --dump-logits has {len(raw)} bytes, expected {n * V * 4}")
    first = struct.unpack_from(f"<{V}f", raw, 0)
    md = max(abs(a - b) for a, b in zip(first, case["first_step_logits"]))
    mr = max(abs(b) for b in case["first_step_logits"])
    check(md / mr < 1e-4, f"case {i}: dumped first-step logits differ by {md / mr:.3g} (relative)")
    out = p.stdout.decode()
    check(out.endswith("\n"), f"case {i}: stdout must end with a newline")
    # HF's decode strips the dummy-prefix space of the first token; ours prints the raw continuation
    got = out[:-1]
    check(got == case["greedy_text"] or got[1:] == case["greedy_text"] and got[0] == " ",
          f"case {i}: completion text {got[:60]!r} != {case['greedy_text'][:60]!r}")
    check(b"[perf]" in p.stderr, f"case {i}: no [perf] line on stderr")
    check(case["prompt"] not in out, f"case {i}: stdout must not repeat the prompt")

    p = run("tokenize", "-m", model, "-p", case["prompt"])
    check(p.returncode == 0 and [int(x) for x in p.stdout.split()] == case["prompt_ids"],
          f"case {i}: tokenize gave {p.stdout[:80]!r}")

# seeds: same seed → same text, different seeds → different text, at temperature 1
outs = {}
for seed in (1, 1, 2):
    p = run("run", "-m", model, "-p", "ROMEO:", "-n", "32", "--temp", "1", "--top-k", "0", "--top-p", "1",
            "--min-p", "0", "--seed", str(seed), "--ignore-eos")
    outs.setdefault(seed, []).append(p.stdout)
check(outs[1][0] == outs[1][1], "same seed must give the same completion")
check(outs[1][0] != outs[2][0], "different seeds must give different completions")

# errors: each exits non-zero with a message that names the problem
def expect_error(args, needle, code=None, what=""):
    p = run(*args, ok=False)
    err = p.stderr.decode(errors="replace")
    check(p.returncode != 0 and (code is None or p.returncode == code), f"{what}: exit {p.returncode}")
    check(needle.lower() in err.lower(), f"{what}: stderr {err.strip()[:200]!r} lacks {needle!r}")
    check(p.stdout.strip() == b"", f"{what}: stdout must stay empty on error, got {p.stdout[:80]!r}")

expect_error(["run", "-m", os.path.join(tmp, "nope.gguf"), "-p", "x"], "nope.gguf", what="missing model")
trunc = os.path.join(tmp, "trunc.gguf")
with open(model, "rb") as f, open(trunc, "wb") as g:
    g.write(f.read(100000))
expect_error(["run", "-m", trunc, "-p", "x"], "truncated", what="truncated model")
bad = os.path.join(tmp, "bad.gguf")
with open(bad, "wb") as g:
    g.write(b"NOTAGGUF" + b"\0" * 64)
expect_error(["run", "-m", bad, "-p", "x"], "magic", what="bad magic")
expect_error(["run", "-m", model, "-p", "word " * 200, "-c", "64", "-n", "4"], "context", what="prompt > context")
expect_error(["run", "-m", model, "-p", "x", "--temp", "warm"], "--temp", code=2, what="bad flag value")
expect_error(["run", "-m", model], "prompt", code=2, what="no prompt")
expect_error(["frobnicate"], "unknown command", code=2, what="unknown command")

# perplexity runs and prints the final estimate
text = os.path.join(tmp, "t.txt")
with open(os.path.join(fixtures, "corpus/tinyshakespeare.heldout.txt"), encoding="utf-8") as f:
    open(text, "w").write(f.read()[-6000:])
p = run("perplexity", "-m", model, "-f", text, "-c", "128")
check(p.returncode == 0 and b"PPL = " in p.stdout, f"perplexity: {p.stdout[:200]!r}")
if p.returncode == 0:
    ppl = float(p.stdout.split(b"PPL = ")[1].split()[0])
    check(1.5 < ppl < 500, f"perplexity {ppl} is implausible for held-out Shakespeare")

print(f"cli: {checks} checks, {failures} failed", file=sys.stderr)
sys.exit(1 if failures else 0)
