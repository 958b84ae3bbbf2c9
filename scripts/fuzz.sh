#!/usr/bin/env bash
# Build the libFuzzer targets of fuzz/ with clang (-fsanitize=fuzzer,address,undefined) in build-fuzz/
# and run them.
#
#   scripts/fuzz.sh [TARGET...]                  CI: for each target, replay fuzz/corpus/T and every
#                                                crash ever found (fuzz/crashes/T), then a short run
#                                                with a fixed seed and a fixed number of runs (so the
#                                                result is repeatable). Fails on any crash, leak or
#                                                timeout. Prints one line per target:
#                                                "fuzz T: PASS|FAIL (...)".
#   scripts/fuzz.sh --campaign SECONDS [TARGET...]  by hand: an open-ended run of SECONDS per target
#                                                whose new inputs join fuzz/corpus/T (then merged
#                                                down to a minimal covering set), crashes go to
#                                                fuzz/crashes/T.
#
# Environment: FUZZ_RUNS (default 10000 executions per target in CI), FUZZ_SEED (1), FUZZ_TIMEOUT
# (seconds per input, 10), FUZZ_JOBS (campaign: parallel workers per target, 1).
set -uo pipefail
cd "$(dirname "$0")/.."
ALL_TARGETS=(gguf tok_spm tok_bpe sup_cmd hf_config hf_tokenizer safetensors api_request model gpuidx)
BUILD=build-fuzz
RUNS=${FUZZ_RUNS:-10000}
SEED=${FUZZ_SEED:-1}
TIMEOUT=${FUZZ_TIMEOUT:-10}
CAMPAIGN=0
if [ "${1:-}" = "--campaign" ]; then
  CAMPAIGN=${2:?--campaign needs SECONDS}
  shift 2
fi
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")

# One JSON line per target in meson's testlog format (name, result OK/FAIL/SKIP, stdout), which
# scripts/test.sh counts in its tally.
RESULTS=$BUILD/fuzz-testlog.json
rm -f "$RESULTS"
result() { # target, OK|FAIL|SKIP, why
  mkdir -p "$BUILD"
  python3 -c 'import json, sys; print(json.dumps({"name": "fuzz_" + sys.argv[1], "result": sys.argv[2], "stdout": sys.argv[3]}))' \
    "$1" "$2" "$3" >>"$RESULTS"
  local word=PASS; [ "$2" = OK ] || word=$2
  echo "fuzz $1: $word ($3)"
}

CC_FUZZ=${CC_FUZZ:-$(command -v clang-14 || command -v clang || true)}
if [ -z "$CC_FUZZ" ] || ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
    "$CC_FUZZ" -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
  echo "fuzz: clang with libFuzzer not found (scripts/install-deps.sh installs clang-14 and libclang-rt-14-dev)"
  for t in "${TARGETS[@]}"; do result "$t" SKIP "SKIP: no clang with libFuzzer (scripts/install-deps.sh)"; done
  exit 77
fi

# Every library is instrumented for coverage (fuzzer-no-link); only the targets link libFuzzer's
# main. Warnings stay warnings here: the GCC builds are where -Werror is enforced.
if [ ! -f "$BUILD/build.ninja" ]; then
  CC="$CC_FUZZ" meson setup "$BUILD" -Dcuda=disabled -Dfuzz=true -Dwerror=false -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link \
    >"$BUILD.setup.log" 2>&1 || {
    cat "$BUILD.setup.log"; rm -rf "$BUILD"
    for t in "${TARGETS[@]}"; do result "$t" FAIL "meson setup failed"; done
    exit 1
  }
fi
if ! ninja -C "$BUILD" "${TARGETS[@]/#/fuzz/fuzz_}" >"$BUILD.build.log" 2>&1; then
  tail -40 "$BUILD.build.log"
  for t in "${TARGETS[@]}"; do result "$t" FAIL "build failed: $BUILD.build.log"; done
  exit 1
fi

# A report is a failure; leaks are findings (detect_leaks), UBSan stops at the first report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

opts() { # target → the options every run of it gets
  local t=$1
  echo "-timeout=$TIMEOUT -rss_limit_mb=2048 -max_len=$(max_len "$t") -print_final_stats=1"
  [ -f "fuzz/$t.dict" ] && echo "-dict=fuzz/$t.dict"
}
max_len() { # inputs the seeds need: the tokenizer files are large, the rest are small
  case $1 in
    hf_tokenizer | gguf) echo 32768 ;;
    *) echo 16384 ;;
  esac
}

failed=0
for t in "${TARGETS[@]}"; do
  bin="$BUILD/fuzz/fuzz_$t"
  corpus="fuzz/corpus/$t" crashes="fuzz/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  log="$BUILD/fuzz-$t.log"
  if [ "$CAMPAIGN" != 0 ]; then
    # New inputs land in the first directory (the corpus), crashes in fuzz/crashes/T; afterwards the
    # corpus is merged down to the inputs that keep its coverage, so it stays small.
    jobs=()
    [ "${FUZZ_JOBS:-1}" -gt 1 ] && jobs=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
    "$bin" $(opts "$t") -max_total_time="$CAMPAIGN" "${jobs[@]}" -artifact_prefix="$crashes/" \
      "$corpus" "$crashes" >"$log" 2>&1
    rc=$?
    mv fuzz-[0-9]*.log "$BUILD/" 2>/dev/null
    # The seeds (seed-*, fuzz/make_seeds.py) always stay; of the rest, only inputs that add edges
    # beyond them are kept (-use_counters=0: hit counts alone do not keep an input, which keeps
    # the corpus about three times smaller for the same edges).
    merged="$BUILD/merge-$t"
    rm -rf "$merged" && mkdir -p "$merged" && cp "$corpus"/seed-* "$merged"/ 2>/dev/null
    if "$bin" $(opts "$t") -use_counters=0 -merge=1 "$merged" "$corpus" >"$BUILD/merge-$t.log" 2>&1; then
      rm -f "$corpus"/* && cp "$merged"/* "$corpus"/
    else
      echo "fuzz $t: merge failed (see $BUILD/merge-$t.log); the corpus is left unmerged"
    fi
    stats=$(grep -E '^(#[0-9]+|stat::)' "$log" | grep -E 'DONE|stat::number_of_executed_units|stat::average_exec_per_sec' | tr '\n' ' ')
    echo "fuzz $t: campaign rc=$rc, corpus $(ls "$corpus" | wc -l) files, $(ls "$crashes" | wc -l) crashes; $stats"
    continue
  fi
  # CI: 1. replay every committed input once (corpus and crashes); 2. a short run from the corpus
  # with a fixed seed and run count; its new inputs go to a scratch directory, not the tree.
  # -reload=0: libFuzzer otherwise re-reads that directory once a second, which makes the run
  # depend on timing (with it off, the same seed gives the same inputs, coverage and result).
  inputs=("$corpus"/* "$crashes"/*)
  inputs=("${inputs[@]##*/\*}")  # drop unmatched globs
  inputs=($(printf '%s\n' "${inputs[@]}" | grep -v '^$'))
  start=$(date +%s)
  ok=1 why=""
  if [ ${#inputs[@]} -gt 0 ]; then
    "$bin" $(opts "$t") -runs=1 "${inputs[@]}" >"$log" 2>&1 || { ok=0; why="replay"; }
  fi
  if [ $ok = 1 ]; then
    scratch="$BUILD/scratch-$t"
    rm -rf "$scratch" && mkdir -p "$scratch" "$BUILD/artifacts-$t"
    "$bin" $(opts "$t") -seed="$SEED" -runs="$RUNS" -reload=0 -artifact_prefix="$BUILD/artifacts-$t/" "$scratch" "$corpus" \
      >>"$log" 2>&1 || { ok=0; why="run"; }
  fi
  secs=$(( $(date +%s) - start ))
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  eps=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  if [ $ok = 1 ]; then
    result "$t" OK "${#inputs[@]} inputs replayed, $RUNS runs seed $SEED, $cov, ${eps:-?} exec/s, ${secs}s"
  else
    failed=$((failed + 1))
    result "$t" FAIL "$why; log $log; the input is in $BUILD/artifacts-$t/: keep it in $crashes/ with the fix"
    grep -E 'ERROR|SUMMARY|check failed|Test unit written|==[0-9]+==' "$log" | head -12 | sed 's/^/    /'
  fi
done
[ $failed -eq 0 ]
