#!/usr/bin/env python3
"""test_install — an installed pictl works on its own (issue 7, item 12): `meson install` (into a
DESTDIR) puts the embedded default model under datadir, and the installed pictl, run from another
directory without -m or $PINFER_MODEL, uses that copy (not the build tree's) and generates with it.

usage: test_install.py BUILD_DIR"""
import os, shutil, subprocess, sys, tempfile

build = sys.argv[1]
meson = shutil.which("meson")
if not meson:
    print("SKIP: meson is not on PATH (needed for meson install)")
    sys.exit(77)
dest = tempfile.mkdtemp(prefix="pinfer-install-")
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)


try:
    p = subprocess.run([meson, "install", "-C", build, "--no-rebuild", "--destdir", dest], capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        print(p.stdout[-2000:], p.stderr[-2000:], file=sys.stderr)
        sys.exit(1)
    pictls = [os.path.join(r, f) for r, _, fs in os.walk(dest) for f in fs if f == "pictl"]
    models = [os.path.join(r, f) for r, _, fs in os.walk(dest) for f in fs if f == "tiny-relu-llama-f16.gguf"]
    check(len(pictls) == 1 and len(models) == 1, f"installed pictl {pictls} and model {models}")
    if pictls and models:
        env = {k: v for k, v in os.environ.items() if k != "PINFER_MODEL"}
        p = subprocess.run([pictls[0], "run", "--help"], capture_output=True, text=True, cwd="/", env=env)
        want = os.path.realpath(models[0])
        check(p.returncode == 0 and f"else {want}" in p.stdout, f"default model is not {want}: {p.stdout[-300:]!r}")
        p = subprocess.run([pictls[0], "run", "--inproc", "-p", "ROMEO:", "-n", "8", "--temp", "0"], capture_output=True,
                           text=True, cwd="/", env=env, timeout=120)
        check(p.returncode == 0 and p.stdout.strip() and "[perf]" in p.stderr, f"installed run: {p.stderr[-300:]!r}")
        p = subprocess.run([pictls[0], "--version"], capture_output=True, text=True)
        check(p.returncode == 0 and p.stdout.startswith("pictl (pinfer) "), f"--version: {p.stdout!r}")
finally:
    shutil.rmtree(dest, ignore_errors=True)
print(f"install: {failures} failed", file=sys.stderr)
sys.exit(1 if failures else 0)
