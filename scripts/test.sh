#!/usr/bin/env bash
# Build pinfer with AddressSanitizer + UndefinedBehaviorSanitizer and run every test; then build the
# threaded code under ThreadSanitizer and run its tests. Ends with what was skipped and why, then the
# line 'N passed, N failed, N skipped' alone.
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

setup() { # dir, extra args...
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" -Dcuda=disabled "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
}

status=0
setup build-test -Db_sanitize=address,undefined -Db_lundef=false || status=1
setup build-tsan -Db_sanitize=thread -Db_lundef=false || status=1
if [ $status -eq 0 ]; then
  ninja -C build-test -j "$JOBS" || status=1
fi
if [ $status -eq 0 ]; then
  meson test -C build-test --no-suite release --print-errorlogs --num-processes "$JOBS" --timeout-multiplier 3
  ninja -C build-tsan -j "$JOBS" >build-tsan.build.log 2>&1 || { tail -30 build-tsan.build.log; status=1; }
  meson test -C build-tsan --suite tsan --print-errorlogs --num-processes "$JOBS"
fi

# --- release: what only an uninstrumented build can check (the 'release' suite: apid's RSS over two
# identical load rounds; ASan's quarantine and shadow memory would hide or fake growth), and, when
# build-release has the CUDA backend (.ci/run configures it with -Dcuda=enabled), the 'cuda' suite:
# the CUDA tests built for real, which run on a GPU machine and skip (77) without a device. .ci/run
# builds build-release before this script, so in CI this is a no-op build; without build-release the
# summary lists the check as skipped. The sanitized builds leave the suite out. ---
rm -f build-release/meson-logs/testlog.json
if [ $status -eq 0 ] && [ -f build-release/build.ninja ]; then
  ninja -C build-release -j "$JOBS" >build-release.build.log 2>&1 || { tail -30 build-release.build.log; status=1; }
  [ $status -eq 0 ] && meson test -C build-release --suite release --suite cuda --print-errorlogs \
    --num-processes "$JOBS"
fi
# --- end release ---

# --- fuzz: the libFuzzer targets (scripts/fuzz.sh: replay of fuzz/corpus and fuzz/crashes, then a
# fixed-seed run); each target counts as one test below (build-fuzz/fuzz-testlog.json) ---
nice scripts/fuzz.sh
# --- end fuzz ---

python3 - "$status" <<'PY'
# The summary: what was skipped and why (the SKIP line a test printed), then the closing line alone.
import json, os, sys
passed = failed = skipped = 0
skips = []
logs = [(d, os.path.join(d, "meson-logs", "testlog.json")) for d in ("build-test", "build-tsan", "build-release")]
logs.append(("fuzz", "build-fuzz/fuzz-testlog.json"))  # scripts/fuzz.sh: one line per fuzz target
for d, log in logs:
    if not os.path.exists(log):
        continue
    for line in open(log):
        t = json.loads(line)
        r = t.get("result")
        if r in ("OK", "EXPECTEDFAIL"): passed += 1
        elif r == "SKIP":
            skipped += 1
            out = (t.get("stdout") or "") + "\n" + (t.get("stderr") or "")
            why = [l.strip() for l in out.splitlines() if "SKIP" in l]
            skips.append(f"  {t.get('name')} ({d}): {why[-1] if why else '(the test printed no reason)'}")
        else: failed += 1
if not os.path.exists("build-release/build.ninja"):  # the 'release' suite did not run
    skipped += 1
    skips.append("  apid_rss (build-release): SKIP no build-release; .ci/run builds it "
                 "(meson setup build-release -Dbuildtype=release -Dcuda=enabled)")
if sys.argv[1] != "0":
    failed += 1  # the build itself failed
print("skipped:" if skips else "skipped: none")
if skips:
    print("\n".join(skips))
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
