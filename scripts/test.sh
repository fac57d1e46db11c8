#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: GoogleTest units (ctest), the
# libFuzzer harnesses (60 s each, scripts/fuzz.sh) and the multi-process / cluster
# end-to-end suites (pytest in the project venv that setup.sh makes).
# Usage: scripts/test.sh [pytest -k expression]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

scripts/setup.sh
scripts/build.sh

export FTB_BUILD_DIR="$ROOT/build/release"
# The project venv (scripts/setup.sh): torch 2.x, h5py, pandas, transformers, peft, pytest.
# First on PATH, so every `python3` a test or script starts is the venv's too.
PY="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH"

echo "== unit tests (ctest)"
ctest --test-dir build/release --output-on-failure -j2 --timeout 300

echo "== fuzz harnesses (libFuzzer, ${FTB_FUZZ_SECONDS:-60} s per target; tests/fuzz/README.md)"
scripts/fuzz.sh

echo "== end-to-end tests (pytest)"
args=(-q -x --durations=15 -p no:cacheprovider tests/e2e tests/cluster)
if [ $# -gt 0 ]; then args+=(-k "$*"); fi
"$PY" -m pytest "${args[@]}"
