#!/usr/bin/env bash
# The GPU acceptance run, on a machine with one GPU: the trainer on CUDA against the trainer
# on the CPU (scripts/gpu_check.py lists the checks and their bounds).
#
#   scripts/gpu_check.sh [REPORT]        default REPORT: results/gpu/gpu_check.md (+ .json)
#
# FTB_BUILD_DIR   the build to check (default build/release)
# FTB_PYTHON      a Python with numpy and h5py (default .venv/bin/python, else python3)
# FTB_GPU_CHECK_WORK  scratch folder for the runs (default: a new temporary folder)
# Exit status: 0 when every check passes, 1 when one fails (the report says which and why).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FTB_BUILD_DIR:-build/release}
py=${FTB_PYTHON:-.venv/bin/python}
[ -x "$py" ] || py=python3
report=${1:-results/gpu/gpu_check.md}
work=${FTB_GPU_CHECK_WORK:-$(mktemp -d -t ftb-gpu-check.XXXXXX)}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no GPU visible (nvidia-smi -L failed); run it on a machine with one" >&2
  exit 2
fi
nvidia-smi -L
exec "$py" scripts/gpu_check.py --trainer "$build/trainer/trainer" --work "$work" \
  --report "$report" "${@:2}"
