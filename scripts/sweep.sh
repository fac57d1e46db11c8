#!/usr/bin/env bash
# Runs every pending point of a sweep on this machine through `launcher`, one after the
# other. Completed points (status "completed" in their HDF5) are skipped, so an
# interrupted sweep resumes where it stopped; invalid points, points needing more than
# one node, and points another runner completed or holds (checked again just before each
# point starts) are listed and skipped, so several runners can share one sweep.
#
#   scripts/sweep.sh SWEEP.toml RESULTS_DIR [key=value ...]
#
# Paths (SWEEP, RESULTS_DIR, FTB_BUILD_DIR) are relative to the caller's directory.
# key=value overrides apply to every point after the point's own values, and are part of
# each point's config hash: the tag printed is the run directory written, and a re-run with
# the same overrides skips what is completed.
# Worker output is echoed (`launcher --tee`, lines prefixed "[rank] ") and kept in
# RESULTS_DIR/.logs/<point tag>.<start time>.<pid>.<random>/attempt_0/rank_<r>.{out,err}.
# Exit: 0 when every point run completed (or nothing was pending); 1 when a point failed
# (the summary lists them); 2 on bad input (sweep file, override, missing build).
# Environment: FTB_BUILD_DIR (default <repo>/build/release).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "sweep.sh: error: $*" >&2; exit 2; }
abspath() { if [[ $1 == /* ]]; then echo "$1"; else echo "$PWD/$1"; fi; }

[[ $# -ge 2 ]] || die "usage: scripts/sweep.sh SWEEP.toml RESULTS_DIR [key=value ...]"
[[ -f $1 ]] || die "sweep file '$1' not found (relative to $PWD)"
SWEEP=$(abspath "$1") RESULTS=$(abspath "$2")
shift 2
OVERRIDES=("$@")
BUILD=$(abspath "${FTB_BUILD_DIR:-$ROOT/build/release}")
TAGGER=$BUILD/sweep_tagger/sweep_tagger LAUNCHER=$BUILD/launcher/launcher
TRAINER=$BUILD/trainer/trainer
for b in "$TAGGER" "$LAUNCHER" "$TRAINER"; do
  [[ -x $b ]] || die "$b not found: build first (scripts/build.sh) or set FTB_BUILD_DIR"
done

# Bad sweep files and overrides exit 2 here, naming the file, line or key.
rc=0
listing=$("$TAGGER" expand "$SWEEP" "${OVERRIDES[@]}" --pending "$RESULTS" --json) || rc=$?
[[ $rc == 0 ]] || exit "$rc"
mapfile -t points <<<"$listing"
[[ -n $listing ]] || points=()
mkdir -p "$RESULTS"
# Start time, this runner's pid and 32 random bits: runners started in the same second (on
# one machine or several sharing RESULTS) never share a launcher run id or a log directory.
STAMP=$(date +%Y%m%d-%H%M%S).$$.$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
echo "sweep: ${#points[@]} pending point(s) of $SWEEP -> $RESULTS"

# True when `expand --pending` no longer lists point $1: completed, or held by a runner.
taken_elsewhere() {
  local now
  now=$("$TAGGER" expand "$SWEEP" "${OVERRIDES[@]}" --index "$1" --pending "$RESULTS" --json 2>/dev/null) || return 1
  [[ -z $now ]]
}
failed=() skipped=() completed=()
for p in "${points[@]}"; do
  # Fields one per NUL-terminated item, then the trainer arguments (any bytes allowed).
  mapfile -d '' -t f < <(python3 -c '
import json, sys
p = json.loads(sys.argv[1])
out = [str(p[k]) for k in ("index", "nodes", "nproc_per_node", "tag", "base", "reason")]
out = [str(int(p["valid"]))] + out + p["args"]
sys.stdout.write("".join(s + "\0" for s in out))' "$p")
  valid=${f[0]} idx=${f[1]} nodes=${f[2]} nproc=${f[3]} tag=${f[4]} base=${f[5]} reason=${f[6]}
  args=("${f[@]:7}")
  if [[ $valid != 1 ]]; then
    echo "sweep: point $idx ($tag) is invalid, skipped: $reason"
    skipped+=("$idx ($tag): invalid: $reason")
    continue
  fi
  if [[ $nodes != 1 ]]; then
    echo "sweep: point $idx ($tag) needs $nodes nodes; run it with slurm/sweep.sbatch, skipped"
    skipped+=("$idx ($tag): needs $nodes nodes")
    continue
  fi
  # Another runner of this sweep may have completed the point, or hold it now (expand
  # --pending lists neither): skip it, before starting it and after a failure.
  if taken_elsewhere "$idx"; then
    echo "sweep: point $idx ($tag) is completed or held by another runner, skipped"
    skipped+=("$idx ($tag): completed or held by another runner")
    continue
  fi
  run_id=$(printf %s "$tag" | tr -c 'A-Za-z0-9._-' '_' | head -c 200).$STAMP
  echo "sweep: point $idx: $tag (log $RESULTS/.logs/$run_id/attempt_0/)"
  prc=0
  "$LAUNCHER" --nproc-per-node "$nproc" --run-id "$run_id" --log-dir "$RESULTS/.logs" --tee -- \
    "$TRAINER" --config "$base" "${args[@]}" "output.dir=$RESULTS" || prc=$?
  if [[ $prc == 0 ]]; then
    completed+=("$idx")
  elif taken_elsewhere "$idx"; then
    echo "sweep: point $idx ($tag) was taken by another runner (exit $prc), skipped"
    skipped+=("$idx ($tag): held by another runner")
  else
    echo "sweep: point $idx ($tag) failed (exit $prc); its status is in $RESULTS/$tag/metrics" >&2
    failed+=("$idx ($tag): exit $prc, log $RESULTS/.logs/$run_id/attempt_0/")
  fi
done

echo "sweep: ${#completed[@]} point(s) completed, ${#failed[@]} failed, ${#skipped[@]} skipped"
for s in "${skipped[@]}"; do echo "sweep:   skipped $s"; done
for s in "${failed[@]}"; do echo "sweep:   FAILED $s" >&2; done
[[ ${#failed[@]} == 0 ]] || exit 1
