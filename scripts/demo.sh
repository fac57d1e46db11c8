#!/usr/bin/env bash
# The main job: measure finetuning throughput on this machine. Runs the 4-point demo
# sweep (seq_len 512/1024 x micro-batch 1/2, a small Llama, 2 data-parallel ranks
# through `launcher`, each run capped by stop_after_seconds) and aggregates it into
# one table (results/demo/summary.md, .csv) with plots (results/demo/plots/).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/release/trainer/trainer ] || [ ! -x build/release/launcher/launcher ]; then
  scripts/setup.sh
  scripts/build.sh
fi
BUILD=$PWD/build/release
OUT=results/demo
rm -rf "$OUT"
scripts/sweep.sh configs/sweeps/demo.toml "$OUT"
"$BUILD/sweep_tagger/sweep_tagger" aggregate "$OUT" --format csv --out "$OUT/summary.csv" >/dev/null
"$BUILD/sweep_tagger/sweep_tagger" aggregate "$OUT" --format md --out "$OUT/summary.md" \
  --plot "$OUT/plots" >/dev/null
echo
echo "== throughput of finetuning locally ($OUT/summary.md, plots in $OUT/plots)"
cat "$OUT/summary.md"
