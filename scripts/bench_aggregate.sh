#!/usr/bin/env bash
# Aggregation benchmark: `sweep_tagger aggregate` over 1,000
# synthetic runs x 2 ranks x 1,000 steps (files written by ftb_synth_runs through the
# trainer's MetricsFile), page cache warm. Target: <= 2 s. Writes
# results/bench/aggregate.md. Exit 1 if the median is over the target and
# FTB_BENCH_STRICT=1.
# Usage: scripts/bench_aggregate.sh [RUNS]      (env: FTB_BUILD_DIR, FTB_BENCH_TMP)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${FTB_BUILD_DIR:-$ROOT/build/release}
RUNS=${1:-1000}
RANKS=2
STEPS=1000
TARGET_S=2
TAGGER=$BUILD/sweep_tagger/sweep_tagger
SYNTH=$BUILD/sweep_tagger/ftb_synth_runs
if [ ! -x "$TAGGER" ] || [ ! -x "$SYNTH" ]; then
  cmake --build "$BUILD" --target sweep_tagger ftb_synth_runs -j "${FTB_JOBS:-2}"
fi
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
DATA=${FTB_BENCH_TMP:-/tmp/ftb_bench_aggregate}/runs${RUNS}x${RANKS}x${STEPS}
if [ ! -f "$DATA/.complete" ]; then
  rm -rf "$DATA"
  echo "bench aggregate: writing $RUNS runs x $RANKS ranks x $STEPS steps to $DATA"
  t0=$(date +%s.%N)
  "$SYNTH" "$DATA" --runs "$RUNS" --ranks-per-node "$RANKS" --steps "$STEPS"
  echo "bench aggregate: generated in $(elapsed "$t0" "$(date +%s.%N)") s"
  touch "$DATA/.complete"
fi
size=$(du -sh "$DATA" | cut -f1)

# seconds JOBS: "wall cpu" seconds of one aggregation to CSV (cpu = user + sys of the
# aggregator and its reader processes: what the machine's other load cannot inflate much).
seconds() {
  local TIMEFORMAT='%R %U %S' t
  t=$( { time "$TAGGER" aggregate "$DATA" --format csv --jobs "$1" \
           --out /tmp/ftb_bench_aggregate.csv >/dev/null; } 2>&1 )
  awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' <<< "$t"
}
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }

jobs=$(nproc)
seconds "$jobs" >/dev/null  # warm the page cache
par=() ser=() par_cpu=() ser_cpu=()
for _ in 1 2 3 4 5; do read -r w c < <(seconds "$jobs"); par+=("$w"); par_cpu+=("$c"); done
for _ in 1 2 3; do read -r w c < <(seconds 1); ser+=("$w"); ser_cpu+=("$c"); done
rows=$(($(wc -l < /tmp/ftb_bench_aggregate.csv) - 1))
med=$(median "${par[@]}")
verdict=$(awk -v m="$med" -v t="$TARGET_S" 'BEGIN { print (m <= t) ? 1 : 0 }')
[ "$verdict" = 1 ] && verdict="PASS (<= ${TARGET_S} s)" || verdict="OVER TARGET (> ${TARGET_S} s)"

mkdir -p results/bench
cat > results/bench/aggregate.md <<MD
# sweep_tagger aggregate benchmark

$RUNS synthetic runs x $RANKS ranks x $STEPS steps ($((RUNS * RANKS)) HDF5 files, $size),
written by \`ftb_synth_runs\` through the trainer's \`MetricsFile\`; page cache warm;
CSV output of $rows rows. Measured by \`scripts/bench_aggregate.sh\` on $(date -u +%Y-%m-%d),
$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),
load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg).

| reader processes | wall, 5 or 3 runs (s) | median wall (s) | median CPU user+sys (s) |
|---:|---|---:|---:|
| $jobs (default) | ${par[*]} | $med | $(median "${par_cpu[@]}") |
| 1 | ${ser[*]} | $(median "${ser[@]}") | $(median "${ser_cpu[@]}") |

Target <= ${TARGET_S} s: **$verdict**.
MD
cat results/bench/aggregate.md
if [ "${FTB_BENCH_STRICT:-0}" = 1 ] && [ "${verdict#PASS}" = "$verdict" ]; then exit 1; fi
