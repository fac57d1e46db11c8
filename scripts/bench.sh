#!/usr/bin/env bash
# Benchmarks; every figure comes from a measurement on this machine and is written to
# results/bench/. Run scripts/build.sh first (or scripts/test.sh).
#   trainer   D512/L8/T512/B4 tokens/s and MFU, fp32 and bf16, one thread (issue 2)
#   launcher  time from launcher start until every worker has exec'd (issue 3)
#   aggregate sweep_tagger aggregate over 1,000 runs x 2 ranks x 1,000 steps (issue 5)
# Usage: scripts/bench.sh [trainer|launcher|aggregate ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${FTB_BUILD_DIR:-$ROOT/build/release}
OUT=$ROOT/results/bench
mkdir -p "$OUT"
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(trainer launcher aggregate)

bench_trainer() {
  local md=$OUT/trainer_mfu.md runs=$OUT/runs
  rm -rf "$runs"
  for dtype in fp32 bf16; do
    echo "bench: D512/L8/T512/B4 $dtype, 1 thread"
    OMP_NUM_THREADS=1 "$BUILD/trainer/trainer" --config configs/runs/bench-d512.toml \
      --output-dir "$runs/$dtype" --no-sweep-dir training.dtype="$dtype" >/dev/null
  done
  /usr/bin/python3 scripts/bench_report.py "$runs/fp32" "$runs/bf16" > "$md"
  cat "$md"
}

for b in "${which[@]}"; do
  case "$b" in
    trainer) bench_trainer ;;
    launcher) [ -x scripts/bench_launcher.sh ] && scripts/bench_launcher.sh ;;
    aggregate) [ -x scripts/bench_aggregate.sh ] && scripts/bench_aggregate.sh ;;
    *) echo "bench: unknown benchmark '$b'" >&2; exit 2 ;;
  esac
done
