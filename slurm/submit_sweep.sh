#!/usr/bin/env bash
# Submits a sweep as SLURM job arrays of slurm/sweep.sbatch.
#
#   slurm/submit_sweep.sh [--all] [--dry-run] SWEEP.toml RESULTS_DIR [sbatch options ...]
#
# Default: only the valid points that are not completed in RESULTS_DIR
# (`sweep_tagger expand --pending`), one array per node count (sbatch -N differs), the
# array indices being the sweep indices. --all: one array --array=0-$((N-1)) over every point
# with -N = the largest node count (each task still skips invalid and completed points).
# --dry-run prints the sbatch commands instead of running them.
# Job ids go to stdout (one per line), everything else to stderr. Task logs:
# RESULTS_DIR/logs/ftb-sweep-<array job>_<index>.out; worker logs RESULTS_DIR/logs/<run id>/.
# Environment: FTB_BUILD_DIR / FTB_BIN / FTB_TAGGER (sweep_tagger), and everything
# train.sbatch reads (passed on to the jobs by sbatch).
set -euo pipefail

usage() { echo "usage: $0 [--all] [--dry-run] SWEEP.toml RESULTS_DIR [sbatch options ...]" >&2; exit 2; }
ALL=0 DRY=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --all) ALL=1 ;;
    --dry-run) DRY=1 ;;
    -h|--help) usage ;;
    *) break ;;
  esac
  shift
done
[[ $# -ge 2 ]] || usage
SWEEP=$1 RESULTS=$2
shift 2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${FTB_TAGGER:-} ]]; then TAGGER=$FTB_TAGGER
elif [[ -n ${FTB_BIN:-} ]]; then TAGGER=$FTB_BIN/sweep_tagger
else
  BUILD=${FTB_BUILD_DIR:-$ROOT/build/release}
  [[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
  TAGGER=$BUILD/sweep_tagger/sweep_tagger
fi
[[ -x $TAGGER ]] || { echo "submit_sweep.sh: sweep_tagger not found at $TAGGER" >&2; exit 2; }
[[ -f $SWEEP ]] || { echo "submit_sweep.sh: sweep file $SWEEP not found" >&2; exit 2; }
mkdir -p "$RESULTS/logs"
RESULTS=$(cd "$RESULTS" && pwd)
SWEEP=$(cd "$(dirname "$SWEEP")" && pwd)/$(basename "$SWEEP")

N=$("$TAGGER" expand "$SWEEP" --field index | wc -l)
[[ $N -gt 0 ]] || { echo "submit_sweep.sh: $SWEEP has no points" >&2; exit 2; }

# "nodes index,index,..." for each node count among the points to submit.
if [[ $ALL == 1 ]]; then
  max=$("$TAGGER" expand "$SWEEP" --field nodes | sort -n | tail -1)
  groups=("$max 0-$((N - 1))")
else
  mapfile -t groups < <("$TAGGER" expand "$SWEEP" --pending "$RESULTS" --json | python3 -c '
import json, sys
by_nodes = {}
for line in sys.stdin:
    if line.strip():
        p = json.loads(line)
        if p["valid"]:
            by_nodes.setdefault(p["nodes"], []).append(str(p["index"]))
for nodes in sorted(by_nodes):
    print(nodes, ",".join(by_nodes[nodes]))')
fi
echo "submit_sweep.sh: $SWEEP has $N point(s); results in $RESULTS" >&2
if [[ ${#groups[@]} -eq 0 ]]; then
  echo "submit_sweep.sh: every valid point is completed: nothing to submit" >&2
  exit 0
fi

for g in "${groups[@]}"; do
  read -r nodes indices <<<"$g"
  cmd=(sbatch --parsable --array="$indices" --nodes="$nodes" --chdir="$ROOT"
       --output="$RESULTS/logs/%x-%A_%a.out" "$@"
       "$ROOT/slurm/sweep.sbatch" "$SWEEP" "$RESULTS")
  if [[ $DRY == 1 ]]; then
    printf '%q ' "${cmd[@]}" >&2; echo >&2
    continue
  fi
  job=$(FTB_ROOT=$ROOT "${cmd[@]}")
  job=${job%%;*}
  echo "submit_sweep.sh: job $job: array $indices, $nodes node(s) per point, logs $RESULTS/logs/ftb-sweep-${job}_<index>.out" >&2
  echo "$job"
done
