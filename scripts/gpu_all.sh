#!/usr/bin/env bash
# Every GPU check of the project in one run of about 8 minutes, on a machine with one GPU and
# PyTorch 2.11 (docs/architecture.md: the release this build links), building nothing there:
#   1. scripts/gpu_check.sh: the fused CUDA kernels against ATen first, then the trainer on
#      the GPU against the CPU, the memory techniques, the large model's throughput
#      (scripts/gpu_check.py lists the checks);
#   2. scripts/bench.sh gpu (ftbench against a PyTorch eager and torch.compile loop), when
#      time is left.
# Each step has a time limit; a step that fails or runs out is reported and the next one
# still runs. Logs and reports are copied to OUT.
#
#   scripts/gpu_bundle.sh                  (here, on the build machine: .gpu/bundle.tar.xz)
#   scripts/gpu_all.sh [OUT]               (there; OUT default $OUT, else results/gpu/all)
#
# FTB_GPU_PYTHON   the Python with torch (default: python3)
# FTB_GPU_ALL_STEPS  the steps to run, space-separated (default "check bench"; "kernels" runs
#                    the parity tests alone)
# FTB_GPU_ALL_LIMITS seconds per step, in the same order (default "280 260": under
#                    10 minutes together)
# Exit status: 0 when every step ran and passed, 1 otherwise (the summary says which).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-results/gpu/all}}
py=${FTB_GPU_PYTHON:-python3}
read -r -a steps <<<"${FTB_GPU_ALL_STEPS:-check bench}"
read -r -a limits <<<"${FTB_GPU_ALL_LIMITS:-280 260}"
mkdir -p "$out"
[ -f .gpu/bundle.tar.xz ] || { echo "gpu_all: .gpu/bundle.tar.xz missing (scripts/gpu_bundle.sh)" >&2; exit 2; }
build=$(mktemp -d -t ftb-gpu-build.XXXXXX)
trap 'rm -rf "$build"' EXIT
tar -C "$build" -xJf .gpu/bundle.tar.xz
# libtorch and the CUDA libraries of the installed PyTorch, after the bundle's own.
torch_dir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))') || exit 2
nvidia_libs=$(ls -d "$torch_dir"/../nvidia/*/lib "$torch_dir"/../nvidia/cu*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$build/lib:$torch_dir/lib:$nvidia_libs${LD_LIBRARY_PATH:-}"
export FTB_BUILD_DIR=$build FTB_PYTHON=$py
{ date -u; nvidia-smi -L; echo "bundle of commit $(cat "$build/commit"), this tree $(git rev-parse HEAD 2>/dev/null)"; } |
  tee "$out/summary.txt"

run_step() {  # run_step NAME LIMIT: runs it under `timeout`, its output to OUT/NAME.log
  local name=$1 limit=$2 t0=$SECONDS rc=0
  case $name in
    kernels) FTB_REQUIRE_GPU=1 timeout "$limit" "$build/tests/fused_cuda_tests" --gtest_brief=1 ;;
    check) timeout "$limit" scripts/gpu_check.sh "$out/gpu_check.md" ;;
    bench) timeout "$limit" scripts/bench.sh gpu ;;
    *) echo "gpu_all: unknown step '$name' (kernels, check, bench)"; return 2 ;;
  esac >"$out/$name.log" 2>&1 || rc=$?
  echo "$name: exit $rc after $((SECONDS - t0)) s (limit $limit s)$([ "$rc" = 124 ] && echo ', timed out')" |
    tee -a "$out/summary.txt"
  return "$rc"
}

status=0
for i in "${!steps[@]}"; do
  run_step "${steps[$i]}" "${limits[$i]:-300}" || status=1
done
cp results/bench/gpu.md "$out/" 2>/dev/null || true
exit "$status"
