#!/usr/bin/env python3
"""hybrid_poll.py RUN.log POLL.log — the peak device memory of gpud (nvidia-smi, per process, MiB)
within each run of bench/gpu/hybrid.sh, against the run's budget + CUDA context (from its [perf]
line). Run.log times are UTC time of day; poll.log lines are "epoch pid, name, MiB; ...".
The budget rule (issue 10): NVML's per-process figure <= budget + context at every reading."""
import re, sys, datetime

runs = []  # (start_s, tag)
perf = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[(\d\d):(\d\d):(\d\d\.\d+)\] run (\S+?)( rc=\d+ (.*))?:?\s", line + " ")
    if not m:
        continue
    t = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
    if m.group(5):
        perf[m.group(4)] = (t, m.group(6))
    else:
        runs.append((t, m.group(4)))
samples = []
for line in open(sys.argv[2]):
    parts = line.strip().split(" ", 1)
    if len(parts) < 2:
        continue
    ts = datetime.datetime.fromtimestamp(float(parts[0]), datetime.timezone.utc)
    t = ts.hour * 3600 + ts.minute * 60 + ts.second + ts.microsecond / 1e6
    for rec in parts[1].split(";"):
        f = [x.strip() for x in rec.split(",")]
        if len(f) == 3 and "gpud" in f[1]:
            samples.append((t, int(f[0]), float(f[2])))
for t0, tag in runs:
    if tag not in perf:
        continue
    t1, p = perf[tag]
    peak = max((s[2] for s in samples if t0 <= s[0] <= t1), default=None)
    b = re.search(r"vram ([\d.]+) GiB \+ context ([\d.]+) GiB \(budget ([\d.]+) GiB\)", p)
    if peak is None:
        print(f"{tag}: no gpud sample")
    elif b:
        lim = (float(b.group(3)) + float(b.group(2))) * 1024
        print(f"{tag}: gpud peak {peak:.0f} MiB, budget + context {lim:.0f} MiB: {'within' if peak <= lim else 'OVER'}")
    else:
        print(f"{tag}: gpud peak {peak:.0f} MiB (no budget)")
