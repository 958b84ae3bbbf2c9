#!/usr/bin/env python3
"""test_cli — pictl as a user meets it: run / tokenize / perplexity against the HF reference,
--dump-logits and --json-stats files, seeds, and clear errors for bad input.

usage: test_cli.py PICTL MODEL.gguf FIXTURES_DIR"""
import json, os, shutil, struct, subprocess, sys, tempfile

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
# -c 0: the model's trained context (llama.cpp's meaning), in process, through the pipeline and for a
# started instance; 1..7 refused naming 0
for how in (["--inproc"], []):
    p = run("run", *how, "-m", model, "-p", "ROMEO:", "-n", "2", "--temp", "0", "-c", "0", "-t", "1")
    check(p.returncode == 0 and p.stdout.strip(), f"run {how} -c 0: {p.stderr[-300:]!r}")
# -c N past the model's trained context (1024 here): a warning on stderr, as llama.cpp's, and the run goes
# on; none for the default (2048 too, but not asked for) or for -c 0
WARN = b"beyond the model's trained context of 1024"
for how in (["--inproc"], []):
    p = run("run", *how, "-m", model, "-p", "ROMEO:", "-n", "2", "--temp", "0", "-c", "2048", "-t", "1")
    check(p.returncode == 0 and p.stdout.strip() and WARN in p.stderr and b"-c 2048" in p.stderr,
          f"run {how} -c 2048 warns: {p.stderr[-300:]!r}")
    for args in ([], ["-c", "0"], ["-c", "1024"]):
        p = run("run", *how, "-m", model, "-p", "ROMEO:", "-n", "2", "--temp", "0", "-t", "1", *args)
        check(p.returncode == 0 and WARN not in p.stderr, f"run {how} {args}: no warning: {p.stderr[-300:]!r}")
expect_error(["run", "-m", model, "-p", "x", "-c", "5"], "-c (0: the model's context) expects an integer in [8,",
             code=2, what="-c 5")
expect_error(["run", "-m", model], "prompt", code=2, what="no prompt")
expect_error(["frobnicate"], "unknown command", code=2, what="unknown command")
# an output file that is an input (directly or through a link) is refused, and the input kept
mcopy, mlink, pfile = (os.path.join(tmp, n) for n in ("m.gguf", "m-link.gguf", "prompt.txt"))
shutil.copy(model, mcopy)
os.symlink(mcopy, mlink)
open(pfile, "w").write("ROMEO:")
size = os.path.getsize(mcopy)
for args, what in (([ "--dump-logits", mlink], "--dump-logits = the model"), (["--json-stats", mcopy], "--json-stats = the model"),
                   (["-f", pfile, "--json-stats", pfile], "--json-stats = the -f file")):
    for how in (["--inproc"], []):
        a = ["run", *how, "-m", mcopy, "-n", "2", *args] + ([] if "-f" in args else ["-p", "x"])
        expect_error(a, "refusing to overwrite an input", code=2, what=f"{what} {how}")
check(os.path.getsize(mcopy) == size and open(pfile).read() == "ROMEO:", "the inputs are kept")

# invalid UTF-8 in a prompt (issue 7, item 5): one behaviour everywhere, refused with the offset of the
# bad byte and the command's own name; before, the pipeline said "out of memory" and --inproc took it
bad_prompt = b"x\xff"
for args in (["run", "--inproc", "-m", model], ["run", "-m", model], ["tokenize", "-m", model], ["generate"]):
    expect_error([*args, "-p", os.fsdecode(bad_prompt)],
                 f"pictl {args[0]}: -p: byte 0xff at offset 1 is not UTF-8", code=2, what=f"{args[0]} invalid UTF-8")
badf = os.path.join(tmp, "bad.txt")
open(badf, "wb").write(b"ok \xc3\x28 no")
expect_error(["run", "--inproc", "-m", model, "-f", badf], "byte 0xc3 at offset 3 is not UTF-8", code=2,
             what="-f invalid UTF-8")
p = run("tokenize", "-m", model, "-p", "caf\u00e9 \u2014 \U0001f600")
check(p.returncode == 0 and p.stdout.strip(), f"valid multi-byte UTF-8 must be accepted: {p.stderr[-200:]!r}")

# pictl generate refuses the flags its instance fixed, naming itself (issue 7, item 10)
for flag, value in (("-m", model), ("-c", "64"), ("-t", "2"), ("-b", "8"), ("--inproc", None), ("--vram-budget", "1")):
    args = ["generate", "-p", "x", flag] + ([value] if value else [])
    expect_error(args, f"pictl generate: {flag}", code=2, what=f"generate {flag}")
    p = run(*args, ok=False)
    check(b"does not apply to generate" in p.stderr and b"pictl run" not in p.stderr.replace(b"'pictl run --inproc'", b""),
          f"generate {flag}: {p.stderr[:200]!r}")
expect_error(["generate"], "pictl generate: a prompt is required", code=2, what="generate without a prompt")
expect_error(["generate", "-p", "x", "--bogus"], "pictl generate: unknown option '--bogus'", code=2, what="generate --bogus")
p = run("generate", "--help")
check(p.returncode == 0 and b"--name" in p.stdout and b"--ctx-size" not in p.stdout and b"--dense" in p.stdout,
      f"generate --help lists its own flags: {p.stdout[:300]!r}")
expect_error(["tokenize", "-m", model, "-p", "x", "-n", "4"], "pictl tokenize: -n/--n-predict does not apply", code=2,
             what="tokenize -n")

expect_error(["run", "-m", model, "-p", "x", "--predict-in", "cpud"], "--predict-in expects gpud or predictord",
             code=2, what="run --predict-in cpud")
expect_error(["start", "-m", model, "--predict-in", ""], "--predict-in expects gpud or predictord", code=2,
             what="start --predict-in ''")

# --seed (issue 7, item 11): -1 means random as in llama.cpp; the drawn seed is printed and repeats the
# run; any other negative number is refused (it used to wrap to 2^64-1)
expect_error(["run", "--inproc", "-m", model, "-p", "x", "--seed", "-5"], "--seed expects an integer in [0, 2^64-1]",
             code=2, what="--seed -5")
expect_error(["run", "--inproc", "-m", model, "-p", "x", "--seed", "+5"], "--seed expects", code=2, what="--seed +5")
sample = ["-p", "Once upon", "-n", "24", "--temp", "1", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--ignore-eos"]
for mode in (["--inproc"], []):
    drawn = []
    for _ in range(2):
        p = run("run", *mode, "-m", model, *sample, "--seed", "-1")
        line = [l for l in p.stderr.decode().splitlines() if l.startswith("[seed] ")]
        check(p.returncode == 0 and len(line) == 1, f"--seed -1 {mode}: no [seed] line: {p.stderr[-200:]!r}")
        if line:
            drawn.append((int(line[0].split()[1]), p.stdout))
    if len(drawn) == 2:
        check(drawn[0][0] != drawn[1][0], f"--seed -1 {mode}: the same seed drawn twice")
        p = run("run", *mode, "-m", model, *sample, "--seed", str(drawn[0][0]))
        check(p.returncode == 0 and p.stdout == drawn[0][1] and b"[seed]" not in p.stderr,
              f"--seed {drawn[0][0]} {mode} does not repeat the --seed -1 run")
p = run("run", "--inproc", "-m", model, "-p", "x", "-n", "2", "--temp", "0")
check(b"[seed]" not in p.stderr, "greedy runs print no seed")

# --mmap / --no-mmap (in process): the weights from the file's mapping (the default) or read into huge
# pages give the same logits, byte for byte; --json-stats says how they were held; the flags are
# refused where they do not apply; a truncated file is refused in either mode
held = {}
for flag in ("--mmap", "--no-mmap", None):
    js, lg = os.path.join(tmp, f"w{flag}.json"), os.path.join(tmp, f"w{flag}.bin")
    p = run("run", "--inproc", "-m", model, "-p", "ROMEO:", "-n", "12", "--temp", "0", "--ignore-eos",
            "--json-stats", js, "--dump-logits", lg, *([flag] if flag else []))
    check(p.returncode == 0, f"run --inproc {flag}: exit {p.returncode}")
    if p.returncode == 0:
        held[flag] = (json.load(open(js))["weights"], open(lg, "rb").read())
if len(held) == 3:
    check(held["--mmap"][1] == held["--no-mmap"][1] == held[None][1], "--mmap / --no-mmap / default logits differ")
    check(held["--mmap"][0]["held"] == "mapped (--mmap)" and held["--mmap"][0]["huge_mib"] == 0,
          f"--mmap: {held['--mmap'][0]}")
    check(held["--no-mmap"][0]["held"].startswith("read into huge pages"), f"--no-mmap: {held['--no-mmap'][0]}")
    check(held[None][0]["held"] == "mapped" and held[None][0]["huge_mib"] == 0, f"default: {held[None][0]}")
expect_error(["run", "-m", model, "-p", "x", "--no-mmap"], "--no-mmap applies in process (--inproc)", code=2,
             what="pipeline --no-mmap")
expect_error(["run", "--inproc", "-m", model, "-p", "x", "--mmap", "--no-mmap"], "give --mmap or --no-mmap, not both",
             code=2, what="--mmap --no-mmap")
expect_error(["run", "--inproc", "-m", trunc, "-p", "x", "--no-mmap"], "truncated", what="truncated model, --no-mmap")
expect_error(["run", "--inproc", "-m", model, "-p", "x", "--no-mmap", "--ram-budget", "1"],
             "--no-mmap reads the whole file into memory, --ram-budget streams", code=2, what="--no-mmap --ram-budget")

# --version (issue 7, item 12)
p = run("--version")
check(p.returncode == 0 and p.stdout.startswith(b"pictl (pinfer) ") and len(p.stdout.split()) == 3,
      f"--version: {p.stdout!r}")

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
