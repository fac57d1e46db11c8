#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan; preset 'fuzz' into build/fuzz)
# and runs each for FTB_FUZZ_SECONDS (default 60) from the seed corpus in tests/fuzz/corpus.
# A crash, sanitizer report, uncaught exception, an input slower than 20 s (a hang) or
# over 2 GiB fails the script; libFuzzer leaves the input as crash-*/timeout-*/oom-* in
# build/fuzz/artifacts/. Longer runs: FTB_FUZZ_SECONDS=3600 scripts/fuzz.sh [target ...]
# Usage: scripts/fuzz.sh [fuzz_config|fuzz_hostlist|fuzz_tag|fuzz_manifest|fuzz_safetensors ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh fuzz
seconds="${FTB_FUZZ_SECONDS:-60}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_hostlist fuzz_tag fuzz_manifest fuzz_safetensors)
mkdir -p build/fuzz/artifacts
for t in "${targets[@]}"; do
  work="build/fuzz/corpus/$t"  # grows across runs; the seeds stay in the repository
  mkdir -p "$work"
  echo "== $t: ${seconds} s"
  log="build/fuzz/$t.log"
  set +e
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "build/fuzz/tests/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix=build/fuzz/artifacts/ \
    "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  grep -v '^#[0-9]' "$log" | tail -n 25 || true
  [ "$rc" -eq 0 ] || { echo "fuzz: $t failed (exit $rc)"; exit 1; }
done
