#!/usr/bin/env bash
# Submits a sweep as SLURM job arrays of slurm/sweep.sbatch.
#
#   slurm/submit_sweep.sh SWEEP.toml RESULTS_DIR [--all] [--dry-run] [sbatch options ...]
#
# --all, --dry-run and --help are read anywhere on the command line (sbatch has no options
# of these names); the first two other arguments are SWEEP and RESULTS_DIR, the rest go to
# sbatch. Paths are relative to the caller's directory.
# Default: only the valid points that are not completed in RESULTS_DIR
# (`sweep_tagger expand --pending`), one array per node count (sbatch -N differs), the
# array indices being the sweep indices. --all: one array --array=0-$((N-1)) over every point
# with -N = the largest node count (each task still skips invalid and completed points).
# --dry-run prints the sbatch commands (to stdout) and submits nothing: sbatch is never run,
# RESULTS_DIR is not created.
# Job ids go to stdout (one per line), everything else to stderr. Task logs:
# RESULTS_DIR/logs/ftb-sweep-<array job>_<index>.out; worker logs RESULTS_DIR/logs/<run id>/.
# Environment: FTB_BUILD_DIR / FTB_BIN / FTB_TAGGER (sweep_tagger), and everything
# train.sbatch reads (passed on to the jobs by sbatch).
set -euo pipefail

usage() {
  echo "usage: $0 SWEEP.toml RESULTS_DIR [--all] [--dry-run] [sbatch options ...]" >&2
  exit 2
}
ALL=0 DRY=0 POS=() SBATCH_OPTS=()
for a in "$@"; do
  case $a in
    --all) ALL=1 ;;
    --dry-run) DRY=1 ;;
    -h|--help) usage ;;
    *)
      if [[ ${#POS[@]} -lt 2 ]]; then
        [[ $a != -* ]] || { echo "$0: sbatch option '$a' before SWEEP.toml RESULTS_DIR: put sbatch options last" >&2; usage; }
        POS+=("$a")
      else
        SBATCH_OPTS+=("$a")
      fi ;;
  esac
done
[[ ${#POS[@]} -eq 2 ]] || usage
SWEEP=${POS[0]} RESULTS=${POS[1]}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${FTB_TAGGER:-} ]]; then TAGGER=$FTB_TAGGER
elif [[ -n ${FTB_BIN:-} ]]; then TAGGER=$FTB_BIN/sweep_tagger
else
  BUILD=${FTB_BUILD_DIR:-$ROOT/build/release}
  [[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
  TAGGER=$BUILD/sweep_tagger/sweep_tagger
fi
[[ -x $TAGGER ]] || { echo "submit_sweep.sh: sweep_tagger not found at $TAGGER" >&2; exit 2; }
[[ -f $SWEEP ]] || { echo "submit_sweep.sh: sweep file $SWEEP not found (cwd $PWD)" >&2; exit 2; }
[[ $RESULTS == /* ]] || RESULTS=$PWD/$RESULTS
SWEEP=$(cd "$(dirname "$SWEEP")" && pwd)/$(basename "$SWEEP")
[[ $DRY == 1 ]] || mkdir -p "$RESULTS/logs"

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

# Dry run: print the commands and return before anything that could submit.
submit() {
  if [[ $DRY == 1 ]]; then
    printf '%q ' "$@"
    echo
    return
  fi
  local job
  job=$(FTB_ROOT=$ROOT "$@")
  job=${job%%;*}
  echo "submit_sweep.sh: job $job: array $indices, $nodes node(s) per point, logs $RESULTS/logs/ftb-sweep-${job}_<index>.out" >&2
  echo "$job"
}
for g in "${groups[@]}"; do
  read -r nodes indices <<<"$g"
  submit sbatch --parsable --array="$indices" --nodes="$nodes" --chdir="$ROOT" \
    --output="$RESULTS/logs/%x-%A_%a.out" "${SBATCH_OPTS[@]}" \
    "$ROOT/slurm/sweep.sbatch" "$SWEEP" "$RESULTS"
done
