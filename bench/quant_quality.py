#!/usr/bin/env python3
"""quant_quality — the tiny model at every pictl quantize mixture against F32: perplexity on the
held-out text (the last 5 % of each corpus file, as tests/test_quality.py) and greedy agreement
(the four reference prompts, 48 tokens each, free-running: the fraction of positions whose token
equals F32's, and the first divergence). Prints one JSON line per type, then a markdown table.

usage: quant_quality.py PICTL F32.gguf SHARED_DIR OUT_DIR [MIXTURE ...]"""
import json, os, struct, subprocess, sys

pictl, f32, shared, out_dir = sys.argv[1:5]
mixes = sys.argv[5:] or ["f16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_1", "q5_0", "q4_k_m", "q4_k_s",
                         "q4_1", "q4_0", "iq4_nl", "iq4_xs", "q3_k_l", "q3_k_m", "q3_k_s", "q2_k"]
HELD_OUT, CTX, MAX_CHARS, N_GEN = 0.05, 256, 40000, 48
os.makedirs(out_dir, exist_ok=True)
text_path = os.path.join(out_dir, "heldout.txt")
parts = []
for name in ("tinyshakespeare.txt", "fortunes.txt"):
    data = open(os.path.join(shared, "corpus", name), encoding="utf-8").read()
    tail = data[int(len(data) * (1 - HELD_OUT)):]
    parts.append(tail[tail.find("\n") + 1:][:MAX_CHARS // 2])
open(text_path, "w", encoding="utf-8").write("\n".join(parts))
ref = json.load(open(os.path.join(shared, "models", "tiny-relu-llama", "reference.json")))
prompts = [c["prompt"] for c in ref["cases"]]


def run(args):
    p = subprocess.run([pictl] + args, capture_output=True, timeout=1800)
    if p.returncode:
        sys.exit(f"{args[0]} failed: {p.stderr.decode(errors='replace')[-400:]}")
    return p.stdout.decode()


def ppl(model):
    return float(run(["perplexity", "-m", model, "-f", text_path, "-c", str(CTX), "-t", "2"]).split("PPL = ")[1].split()[0])


def greedy(model):
    toks = []
    for i, pr in enumerate(prompts):
        dump = os.path.join(out_dir, f"logits{i}.f32")
        run(["run", "--inproc", "-m", model, "-p", pr, "-n", str(N_GEN), "--temp", "0", "--ignore-eos", "-t", "2",
             "--dump-logits", dump])
        raw = open(dump, "rb").read()
        n_vocab = len(raw) // 4 // N_GEN
        rows = struct.unpack(f"<{len(raw) // 4}f", raw)
        toks.append([max(range(n_vocab), key=lambda v: rows[r * n_vocab + v]) for r in range(N_GEN)])
    return toks


base_ppl, base_toks = ppl(f32), greedy(f32)
size_f32 = os.path.getsize(f32)
rows = []
for mix in mixes:
    path = os.path.join(out_dir, f"tiny-{mix}.gguf")
    run(["quantize", "-q", f32, path, mix, "2"])
    v, toks = ppl(path), greedy(path)
    same = sum(a == b for ta, tb in zip(toks, base_toks) for a, b in zip(ta, tb))
    firsts = [next((k for k, (a, b) in enumerate(zip(ta, tb)) if a != b), None) for ta, tb in zip(toks, base_toks)]
    r = {"type": mix, "ppl": round(v, 3), "ppl_f32": round(base_ppl, 3), "rel": round(v / base_ppl - 1, 5),
         "greedy_agree": same, "greedy_total": N_GEN * len(prompts), "first_divergence": firsts,
         "file_mib": round(os.path.getsize(path) / 2**20, 2)}
    print(json.dumps(r), flush=True)
    rows.append(r)
    os.unlink(path)
print(f"\n| type | file MiB | PPL | vs F32 | greedy agreement (of {N_GEN * len(prompts)}) | first divergence per prompt |")
print("|---|---|---|---|---|---|")
print(f"| f32 | {size_f32 / 2**20:.2f} | {base_ppl:.3f} | — | — | — |")
for r in rows:
    fd = ", ".join("—" if f is None else str(f) for f in r["first_divergence"])
    print(f"| {r['type']} | {r['file_mib']} | {r['ppl']:.3f} | {r['rel'] * 100:+.2f} % | {r['greedy_agree']} "
          f"({r['greedy_agree'] / r['greedy_total']:.3f}) | {fd} |")
