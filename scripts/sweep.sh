#!/usr/bin/env bash
# Runs every pending point of a sweep on this machine through `launcher`, one after
# the other. Completed points (status "completed" in their HDF5) are skipped, so an
# interrupted sweep resumes where it stopped; invalid points are reported and skipped.
# Usage: scripts/sweep.sh SWEEP.toml RESULTS_DIR [extra key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FTB_BUILD_DIR:-$PWD/build/release}
SWEEP=${1:?usage: scripts/sweep.sh SWEEP.toml RESULTS_DIR [key=value ...]}
RESULTS=${2:?usage: scripts/sweep.sh SWEEP.toml RESULTS_DIR [key=value ...]}
shift 2
TAGGER=$BUILD/sweep_tagger/sweep_tagger
mkdir -p "$RESULTS"

mapfile -t points < <("$TAGGER" expand "$SWEEP" --pending "$RESULTS" --json)
echo "sweep: ${#points[@]} pending point(s) of $SWEEP -> $RESULTS"
failed=0
for p in "${points[@]}"; do
  read -r idx valid nproc nodes tag base < <(/usr/bin/python3 -c '
import json, sys
p = json.loads(sys.argv[1])
print(p["index"], int(p["valid"]), p["nproc_per_node"], p["nodes"], p["tag"], p["base"])' "$p")
  mapfile -t args < <(/usr/bin/python3 -c '
import json, sys
print("\n".join(json.loads(sys.argv[1])["args"]))' "$p")
  if [ "$valid" != 1 ]; then
    echo "sweep: point $idx ($tag) is invalid, skipped"
    continue
  fi
  if [ "$nodes" != 1 ]; then
    echo "sweep: point $idx ($tag) needs $nodes nodes; run it with slurm/sweep.sbatch, skipped"
    continue
  fi
  echo "sweep: point $idx: $tag"
  if ! "$BUILD/launcher/launcher" --nproc-per-node "$nproc" --log-dir "$RESULTS/.logs" -- \
      "$BUILD/trainer/trainer" --config "$base" "${args[@]}" "output.dir=$RESULTS" "$@"; then
    echo "sweep: point $idx ($tag) failed; its status is in $RESULTS/$tag/metrics" >&2
    failed=$((failed + 1))
  fi
done
[ "$failed" -eq 0 ] || echo "sweep: $failed point(s) failed" >&2
exit 0
