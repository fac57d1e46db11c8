#!/usr/bin/env bash
# The main job: measure finetuning throughput on this machine. Runs the 4-point demo
# sweep configs/sweeps/demo.toml (seq_len 512/1024 x micro-batch 1/2, a small Llama,
# 2 data-parallel ranks through `launcher`, each run capped by stop_after_seconds) with
# scripts/sweep.sh, which shows each trainer's progress and keeps its log, and aggregates it
# into one table (OUT/summary.md, .csv) with plots (OUT/plots/), then ranks the points
# (`sweep_tagger aggregate --best`; by CPU time as well when runs were noisy).
#
#   scripts/demo.sh [OUT]      # OUT default <repo>/results/demo; relative to the caller's dir
#
# A re-run measures again: it removes the demo's own outputs in OUT (the sweep's run
# directories, .logs/, summary.*, plots/), nothing else.
# Environment: FTB_BUILD_DIR = build dir to use (relative to the caller's dir). Unset: the
# default <repo>/build/release, which is set up and built first when missing.
# Exit: as scripts/sweep.sh (1 when a point failed; the table is still written); 1 as well
# when a chart is missing or gnuplot warned (sweep_tagger aggregate --plot).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
abspath() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }
[[ $# -le 1 && ${1:-} != -* ]] || { echo "usage: scripts/demo.sh [OUT]" >&2; exit 2; }
OUT=$(abspath "${1:-$ROOT/results/demo}")
if [[ -n ${FTB_BUILD_DIR:-} ]]; then
  BUILD=$(abspath "$FTB_BUILD_DIR")
  [[ -x $BUILD/trainer/trainer && -x $BUILD/launcher/launcher ]] ||
    { echo "demo.sh: FTB_BUILD_DIR=$FTB_BUILD_DIR has no trainer/trainer and launcher/launcher" >&2; exit 2; }
else
  BUILD=$ROOT/build/release
  if [[ ! -x $BUILD/trainer/trainer || ! -x $BUILD/launcher/launcher ]]; then
    "$ROOT/scripts/setup.sh"
    "$ROOT/scripts/build.sh"
  fi
fi
export FTB_BUILD_DIR=$BUILD
TAGGER=$BUILD/sweep_tagger/sweep_tagger
SWEEP=$ROOT/configs/sweeps/demo.toml

if [[ -d $OUT ]]; then
  mapfile -t tags < <("$TAGGER" expand "$SWEEP" --field tag)
  for t in "${tags[@]}"; do rm -rf "${OUT:?}/$t"; done
  rm -rf "$OUT/.logs" "$OUT/plots" "$OUT/summary.md" "$OUT/summary.csv" "$OUT/summary.constants.csv"
fi
load0=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
rc=0
"$ROOT/scripts/sweep.sh" "$SWEEP" "$OUT" || rc=$?
[[ $rc -le 1 ]] || exit "$rc"
"$TAGGER" aggregate "$OUT" --format csv --out "$OUT/summary.csv" >/dev/null
# A chart gnuplot could not draw whole (or warned about: a legend left out) exits 1 after
# the table is written: show the table, then exit 1.
"$TAGGER" aggregate "$OUT" --format md --out "$OUT/summary.md" --plot "$OUT/plots" >/dev/null ||
  rc=1
echo
echo "== throughput of finetuning locally ($OUT/summary.md, plots in $OUT/plots; sweep and aggregation took $(($(date +%s) - start)) s wall time; load average before: $load0)"
cat "$OUT/summary.md"
# The ranking (sweep_tagger/docs/compare.md): by wall-clock tokens/s; where the trainer marked
# runs noisy (other work held their CPUs), by tokens per CPU-second as well, which that work
# does not stretch. Nothing to rank (every point failed) leaves rc as the sweep set it.
echo
echo "== ranking ($TAGGER aggregate $OUT --best tokens_per_s)"
best=$("$TAGGER" aggregate "$OUT" --best tokens_per_s) || true
echo "$best"
if grep -q "noisy run(s)" <<<"$best"; then
  echo
  echo "== ranking by each run's own CPU time, as runs were noisy ($TAGGER aggregate $OUT --best tokens_per_cpu_s)"
  "$TAGGER" aggregate "$OUT" --best tokens_per_cpu_s || true
fi
exit "$rc"
