#!/usr/bin/env bash
# Submits a sweep as SLURM job arrays of slurm/sweep.sbatch.
#
#   slurm/submit_sweep.sh SWEEP.toml RESULTS_DIR [--all] [--dry-run] [--throttle N]
#                         [--max-tries K] [sbatch options ...]
#
# --all, --dry-run, --throttle N, --max-tries K and --help are read anywhere on the command
# line (sbatch has no options of these names); the first two other arguments are SWEEP and
# RESULTS_DIR, the rest go to sbatch. Paths are relative to the caller's directory.
# Default: the valid points that are not completed in RESULTS_DIR (`sweep_tagger expand
# --pending`: neither completed nor held by a running trainer), minus the points whose last
# submission is still in the queue (squeue: pending, running, or requeued and waiting) and
# the points already submitted K times (--max-tries, default 3) without completing; one
# array per node count (sbatch -N differs). --all: every point, with -N = the largest node
# count (each task still skips invalid and completed points).
# Snapshot: the points of each array are written to RESULTS_DIR/sweeps/<name>.jsonl (one
# `sweep_tagger expand --json` line per array index) and the array gets its SHA-256; each
# task runs the point of its line after checking that hash, so editing SWEEP while tasks
# are pending does not shift them onto other points. Arrays hold at most MaxArraySize
# (scontrol show config; default 1001) tasks: larger groups are split into several arrays.
# --throttle N: at most N tasks of an array run at once (sbatch --array=...%N).
# --dry-run prints the sbatch commands (to stdout) and submits nothing: sbatch is never run,
# RESULTS_DIR is not created (the snapshots it names are not written).
# Job ids go to stdout (one per line), everything else to stderr. Task logs:
# RESULTS_DIR/logs/ftb-sweep-<array job>_<index>.out; worker logs RESULTS_DIR/logs/<run id>/;
# submissions are recorded in RESULTS_DIR/sweeps/submitted.tsv (tag, job, time).
# Environment: FTB_BUILD_DIR / FTB_BIN / FTB_TAGGER (sweep_tagger), and everything
# train.sbatch reads (passed on to the jobs by sbatch).
set -euo pipefail

usage() {
  echo "usage: $0 SWEEP.toml RESULTS_DIR [--all] [--dry-run] [--throttle N] [--max-tries K] [sbatch options ...]" >&2
  exit 2
}
ALL=0 DRY=0 THROTTLE="" MAX_TRIES=3 POS=() SBATCH_OPTS=()
while [[ $# -gt 0 ]]; do
  a=$1
  shift
  case $a in
    --all) ALL=1 ;;
    --dry-run) DRY=1 ;;
    --throttle|--max-tries)
      [[ ${1:-} =~ ^[1-9][0-9]*$ ]] || { echo "$0: $a needs a positive integer, got '${1:-}'" >&2; usage; }
      if [[ $a == --throttle ]]; then THROTTLE=$1; else MAX_TRIES=$1; fi
      shift ;;
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
LEDGER=$RESULTS/sweeps/submitted.tsv

ALL_POINTS=$("$TAGGER" expand "$SWEEP" --json) || exit 2
N=$(grep -c . <<<"$ALL_POINTS" || true)
[[ $N -gt 0 ]] || { echo "submit_sweep.sh: $SWEEP has no points" >&2; exit 2; }
MAX_ARRAY=$( (scontrol show config 2>/dev/null || true) | sed -n 's/^MaxArraySize *= *\([0-9]*\).*/\1/p')
MAX_ARRAY=${MAX_ARRAY:-1001}
echo "submit_sweep.sh: $SWEEP has $N point(s); results in $RESULTS; MaxArraySize $MAX_ARRAY" >&2

# Queued job ids (array tasks as ARRAYJOB_INDEX; a requeued job waiting is PENDING).
QUEUED=""
[[ $ALL == 1 ]] || QUEUED=$(squeue -h -r -o '%i %T' 2>/dev/null || true)
PENDING=""
[[ $ALL == 1 ]] || PENDING=$("$TAGGER" expand "$SWEEP" --pending "$RESULTS" --json) || exit 2

# The arrays to submit: one line each, "nodes<TAB>snapshot text" (the snapshot's JSON lines
# joined by the control character RS, which JSON always escapes); why points are left out
# goes to stderr.
mapfile -t groups < <(
  ALL=$ALL MAX_ARRAY=$MAX_ARRAY MAX_TRIES=$MAX_TRIES LEDGER=$LEDGER QUEUED=$QUEUED \
  PENDING=$PENDING EVERY=$ALL_POINTS python3 - <<'PY'
import json, os, sys

env = os.environ
every = [json.loads(l) for l in env["EVERY"].splitlines() if l.strip()]
groups = {}
if env["ALL"] == "1":
    groups[max(p["nodes"] for p in every)] = every
else:
    queued = dict(l.split()[:2] for l in env["QUEUED"].splitlines() if len(l.split()) >= 2)
    tries = {}
    if os.path.exists(env["LEDGER"]):
        for line in open(env["LEDGER"]):
            tag, job = line.split("\t")[:2]
            tries.setdefault(tag, []).append(job)
    for line in env["PENDING"].splitlines():
        if not line.strip():
            continue
        p = json.loads(line)
        if not p["valid"]:
            continue
        jobs = tries.get(p["tag"], [])
        what = "point %d (%s)" % (p["index"], p["tag"])
        if jobs and jobs[-1] in queued:
            print("submit_sweep.sh: %s is already queued as job %s (%s): skipped"
                  % (what, jobs[-1], queued[jobs[-1]]), file=sys.stderr)
        elif len(jobs) >= int(env["MAX_TRIES"]):
            print("submit_sweep.sh: %s was submitted %d time(s) (jobs %s) without completing: "
                  "skipped (--max-tries %s; raise it to retry)"
                  % (what, len(jobs), ", ".join(jobs), env["MAX_TRIES"]), file=sys.stderr)
        else:
            groups.setdefault(p["nodes"], []).append(p)
size = int(env["MAX_ARRAY"])
for n in sorted(groups):
    pts = groups[n]
    for i in range(0, len(pts), size):
        print("%d\t%s" % (n, "\x1e".join(json.dumps(p, sort_keys=True) for p in pts[i:i + size])))
PY
)

if [[ ${#groups[@]} -eq 0 ]]; then
  echo "submit_sweep.sh: nothing to submit: every valid point is completed, queued, or at --max-tries" >&2
  exit 0
fi

STAMP=$(date +%Y%m%d-%H%M%S)-$$
k=0
for g in "${groups[@]}"; do
  nodes=${g%%$'\t'*}
  text=${g#*$'\t'}
  text=${text//$'\x1e'/$'\n'}$'\n'
  count=$(grep -c . <<<"$text")
  sha=$(printf '%s' "$text" | sha256sum | cut -d' ' -f1)
  snap=$RESULTS/sweeps/$STAMP-n$nodes-$k.jsonl
  k=$((k + 1))
  array="0-$((count - 1))${THROTTLE:+%$THROTTLE}"
  cmd=(sbatch --parsable --array="$array" --nodes="$nodes" --chdir="$ROOT"
       --output="$RESULTS/logs/%x-%A_%a.out" "${SBATCH_OPTS[@]}"
       "$ROOT/slurm/sweep.sbatch" --snapshot "$snap" "$sha" "$SWEEP" "$RESULTS")
  if [[ $DRY == 1 ]]; then  # print and go on before anything that could submit or write
    printf '%q ' "${cmd[@]}"
    echo
    continue
  fi
  mkdir -p "$RESULTS/logs" "$RESULTS/sweeps"
  printf '%s' "$text" >"$snap"
  job=$(FTB_ROOT=$ROOT "${cmd[@]}")
  job=${job%%;*}
  now=$(date +%Y-%m-%dT%H:%M:%S)
  python3 -c 'import json, sys
with open(sys.argv[1]) as snap, open(sys.argv[2], "a") as ledger:
    for i, line in enumerate(snap):
        ledger.write("%s\t%s_%d\t%s\n" % (json.loads(line)["tag"], sys.argv[3], i, sys.argv[4]))' \
    "$snap" "$LEDGER" "$job" "$now"
  echo "submit_sweep.sh: job $job: array $array over $count point(s) (snapshot $snap, sha256 ${sha:0:16}), $nodes node(s) per point, logs $RESULTS/logs/ftb-sweep-${job}_<index>.out" >&2
  echo "$job"
done
