#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: GoogleTest units (ctest), the
# libFuzzer harnesses (scripts/fuzz.sh; FTB_FUZZ_SECONDS per target, 15 s here, 60 s when
# fuzz.sh runs alone) and the multi-process / cluster end-to-end suites (pytest in the
# project venv that setup.sh makes). Each phase's wall time is printed at the end, also
# when a phase fails, so the CI budget (30 minutes) can be followed phase by phase.
# Usage: scripts/test.sh [pytest -k expression]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

phases=()
phase_t0=$SECONDS
phase_name=""
# Starts phase $1, closing the previous one.
phase() {
  if [ -n "$phase_name" ]; then phases+=("$(printf '%-8s %5d s' "$phase_name" $((SECONDS - phase_t0)))"); fi
  phase_name=$1
  phase_t0=$SECONDS
  [ -z "$phase_name" ] || echo "== $phase_name"
}
report() {
  local rc=$?
  phase ""
  echo "== phase times (wall, $(nproc) CPUs, load average at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
  printf '   %s\n' "${phases[@]}"
  echo "   total    $(printf '%5d' "$SECONDS") s (exit $rc)"
}
trap report EXIT

phase setup
scripts/setup.sh
phase build
scripts/build.sh

export FTB_BUILD_DIR="$ROOT/build/release"
# The project venv (scripts/setup.sh): torch 2.x, h5py, pandas, transformers, peft, pytest.
# First on PATH, so every `python3` a test or script starts is the venv's too.
PY="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH"

phase ctest
ctest --test-dir build/release --output-on-failure -j2 --timeout 300

# 15 s per target from the seed corpus; longer runs: FTB_FUZZ_SECONDS (tests/fuzz/README.md).
export FTB_FUZZ_SECONDS="${FTB_FUZZ_SECONDS:-15}"
phase fuzz
echo "libFuzzer, ${FTB_FUZZ_SECONDS} s per target (tests/fuzz/README.md)"
scripts/fuzz.sh

phase pytest
args=(-q -x --durations=25 -p no:cacheprovider tests/e2e tests/cluster)
if [ $# -gt 0 ]; then args+=(-k "$*"); fi
"$PY" -m pytest "${args[@]}"
