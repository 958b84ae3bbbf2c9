#!/usr/bin/env python3
"""test_quantize_cli — pictl quantize's command line: --help, the dry-run plan (one line per tensor,
the summary, no file), the flags reaching the plan (--output-tensor-type, --token-embedding-type,
--leave-output-tensor, --pure), llama-quantize's positional thread count, refusals (unknown TYPE or
type, re-quantizing without --allow-requantize, an output that is the input) with exit codes and
messages, and a written file
that quantizes again to the same bytes (deterministic), and ^C in the middle of the write leaving
no OUT.tmp behind.

usage: test_quantize_cli.py PICTL MODEL.gguf"""
import hashlib, os, signal, subprocess, sys, tempfile

from interrupt_write import interrupt_while_writing

pictl, model = sys.argv[1:3]
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", file=sys.stderr)


def q(*args):
    p = subprocess.run([pictl, "quantize", *args], capture_output=True, timeout=300)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def plan(*args):
    rc, _, err = q("--dry-run", *args)
    types = {}
    for line in err.splitlines():
        if line.startswith("[") and " - " in line:
            name = line.split("]", 1)[1].split(" - ")[0].strip()
            types[name] = line.split("plan")[1].split("..")[0].strip() if " plan " in line else line.split("type =")[1].split(",")[0].strip()
    return rc, types, err


tmp = tempfile.mkdtemp(prefix="pinfer-qcli-")
rc, out, _ = q("--help")
check(rc == 0 and "q4_k_m" in out and "--keep-predictors" in out, "--help lists mixtures and flags")

rc, types, err = plan(model, "q4_k_m")
check(rc == 0 and len(types) == 57 and "dry run" in err, f"dry-run plan: rc {rc}, {len(types)} lines")
check(types.get("output.weight") == "q6_K" and types.get("blk.0.attn_q.weight") == "q4_K", "q4_k_m plan")
check(types.get("blk.2.ffn_down.weight") == "q6_K" and types.get("blk.2.attn_v.weight") == "q6_K", "more bits on layer 2")
check(types.get("blk.0.attn_norm.weight") == "f32", "1-D tensors stay f32")

rc, types, _ = plan("--output-tensor-type", "Q8_0", "--token-embedding-type", "q6_k", model, "Q4_K_M")
check(rc == 0 and types.get("output.weight") == "q8_0" and types.get("token_embd.weight") == "q6_K", "overrides")
rc, types, _ = plan("--leave-output-tensor", model, "q4_0")
check(rc == 0 and types.get("output.weight") == "f16" and types.get("token_embd.weight") == "q4_0", "--leave-output-tensor")
rc, types, _ = plan("--pure", model, "q4_k_m")
check(rc == 0 and types.get("output.weight") == "q4_K" and types.get("blk.2.ffn_down.weight") == "q4_K", "--pure")

rc, _, err = q(model, os.path.join(tmp, "x.gguf"), "q9_z")
check(rc == 2 and "unknown TYPE" in err, "unknown mixture: exit 2")
rc, _, err = q("--output-tensor-type", "q1_9", model, os.path.join(tmp, "x.gguf"), "q4_0")
check(rc == 1 and "unknown tensor type" in err, "unknown tensor type")
rc, _, err = q("--frobnicate", model)
check(rc == 2 and "unknown option" in err, "unknown option")

a, b, c = (os.path.join(tmp, n) for n in ("a.gguf", "b.gguf", "c.gguf"))
rc, _, err = q("-q", model, a, "q4_k_m", "2")
check(rc == 0 and err == "" and os.path.exists(a), f"quiet write with 2 threads: {err[-300:]}")
rc, _, _ = q("-q", "-t", "1", model, b, "q4_k_m")
digest = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()
check(rc == 0 and digest(a) == digest(b), "the same bytes with 1 and 2 threads")
rc, _, err = q(a, c, "q8_0")
check(rc == 1 and "--allow-requantize" in err and not os.path.exists(c), "re-quantizing refused")
rc, _, _ = q("-q", "--allow-requantize", a, c, "q8_0")
check(rc == 0 and os.path.exists(c), "re-quantizing allowed")
# the output naming the input (directly or through a link) is refused before anything is written:
# the writer's rename would have replaced the model with its quantized copy
link = os.path.join(tmp, "link.gguf")
os.symlink(a, link)
before = digest(a)
for out in (a, link):
    rc, _, err = q("-q", "--allow-requantize", a, out, "q8_0")
    check(rc == 1 and "refusing to overwrite an input" in err and digest(a) == before,
          f"output = input ({os.path.basename(out)}) refused, input kept: rc {rc} {err[-200:]!r}")
check(not os.path.exists(a + ".tmp"), "no .tmp left by the refusal")
# ^C (or a TERM/HUP) while OUT.tmp is being written: the process dies of the signal, as llama-quantize
# does, but removes the partial OUT.tmp rather than leaving it
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    d = os.path.join(tmp, "interrupted.gguf")
    rc, err, leftover = interrupt_while_writing([pictl, "quantize", "-q", model, d, "q8_0"], d + ".tmp", sig)
    check(rc == -sig and not leftover and not os.path.exists(d),
          f"{sig.name} mid-write: rc {rc}, OUT.tmp left: {leftover}, {err[-200:]!r}")
for p in (link, a, b, c):
    if os.path.lexists(p):
        os.unlink(p)
os.rmdir(tmp)
print(f"test_quantize_cli: {failures} failed", file=sys.stderr)
sys.exit(1 if failures else 0)
