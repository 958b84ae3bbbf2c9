#!/usr/bin/env python3
"""test_suite_complete — no test vanishes when ../shared is absent (issue 7, item 3).

Every tests/test_*.c and tests/test_*.py is registered as a test (meson introspect), and no test's
command line names ../shared: a test that needs it finds it when it runs and reports SKIP with the
reason, so nothing depends on what configure saw. Before the fix, 11 tests were registered only
when configure found ../shared (and stayed missing after it appeared).

usage: PINFER_SHARED=DIR test_suite_complete.py BUILD_DIR SOURCE_DIR"""
import glob, json, os, shutil, subprocess, sys

build, source = sys.argv[1:3]
shared = os.environ.get("PINFER_SHARED", os.path.join(source, "..", "shared"))
meson = shutil.which("meson")
if not meson:
    print("SKIP: meson is not on PATH (needed for meson introspect)")
    sys.exit(77)
tests = json.loads(subprocess.run([meson, "introspect", "--tests", build], check=True, capture_output=True,
                                  text=True).stdout)
failures = 0
used = set()
shared_real = os.path.normpath(shared)
for t in tests:
    for a in t["cmd"]:
        base = os.path.basename(a)
        if base.startswith("test_"):
            used.add(os.path.splitext(base)[0])
        if os.path.normpath(a).startswith(shared_real):
            print(f"FAIL: test '{t['name']}' names ../shared on its command line: {a}")
            failures += 1
for f in sorted(glob.glob(os.path.join(source, "tests", "test_*.c")) + glob.glob(os.path.join(source, "tests", "test_*.py"))):
    name = os.path.splitext(os.path.basename(f))[0]
    if name not in used:
        print(f"FAIL: {os.path.relpath(f, source)} is not registered as a test")
        failures += 1
print(f"suite_complete: {len(tests)} tests, {len(used)} test programs, {failures} problems")
sys.exit(1 if failures else 0)
