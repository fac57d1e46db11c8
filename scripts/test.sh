#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: GoogleTest units (ctest), the
# libFuzzer harnesses (scripts/fuzz.sh; FTB_FUZZ_SECONDS per target, 15 s here, 60 s when
# fuzz.sh runs alone) and the multi-process / cluster end-to-end suites (pytest in the
# project venv that setup.sh makes). The end-to-end tests run in two passes
# (tests/README.md "How the suite runs"): side by side on FTB_TEST_WORKERS pytest-xdist
# workers (default 4; the tests mostly wait on timers, networks and SLURM), the tests of a
# shared resource one after another (tests/conftest.py), then the tests marked `timing`
# alone. The fuzz phase runs beside the first pass. At the end: each phase's wall time (also
# when a phase fails, so CI's budget can be followed phase by phase) and the slowest tests.
#
# Usage: scripts/test.sh [--quick] [-k EXPR] [-- PYTEST_ARGS...]
#   (none)          setup, build, ctest, fuzz, and every end-to-end test
#   --quick         build, ctest, and the end-to-end tests marked `quick` (one per program:
#                   trainer, launcher, sweep_tagger); no setup, no fuzz, no cluster
#   -k EXPR         only the end-to-end tests that pytest's -k EXPR selects
#   -- PYTEST_ARGS  more pytest arguments; a path among them (tests/e2e/sweep, a file, a
#                   file::test) replaces the default tests/e2e tests/cluster
# Examples: scripts/test.sh --quick;  scripts/test.sh -k "checkpoint and not slurm";
#           scripts/test.sh -- tests/e2e/sweep -v
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() { sed -n '/^# Usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }
quick=0
kexpr=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    -k) [ $# -ge 2 ] || { echo "test.sh: -k needs an expression" >&2; usage; }
        kexpr=$2; shift ;;
    -k*) kexpr=${1#-k} ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage 0 ;;
    *) echo "test.sh: unknown argument '$1' (pytest arguments go after --)" >&2; usage ;;
  esac
  shift
done

REPORTS="$ROOT/build/test-reports"  # JUnit XML of this run, for the slowest-tests table
phases=()
phase_t0=$SECONDS
phase_name=""
# Starts phase $1, closing the previous one.
phase() {
  if [ -n "$phase_name" ]; then phases+=("$(printf '%-16s %5d s' "$phase_name" $((SECONDS - phase_t0)))"); fi
  phase_name=$1
  phase_t0=$SECONDS
  [ -z "$phase_name" ] || echo "== $phase_name"
}
fuzz_pid=""
report() {
  local rc=$?
  phase ""
  if [ -n "$fuzz_pid" ]; then kill -- "-$fuzz_pid" 2>/dev/null || true; fi
  if [ -d "$REPORTS" ]; then
    # GoogleTest's reports of the sharded unit-test binaries (tests/CMakeLists.txt).
    for f in "$ROOT"/build/release/gtest-reports/*.xml; do
      [ -e "$f" ] && cp "$f" "$REPORTS/gtest-${f##*/}"
    done
    "$ROOT/.venv/bin/python" scripts/slowest_tests.py "$REPORTS" || true
  fi
  echo "== phase times (wall, $(nproc) CPUs, load average at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
  printf '   %s\n' "${phases[@]}"
  echo "   total            $(printf '%5d' "$SECONDS") s (exit $rc)"
}
trap report EXIT

if [ "$quick" = 0 ]; then
  phase setup
  scripts/setup.sh
fi
phase build
scripts/build.sh
rm -rf "$REPORTS"
mkdir -p "$REPORTS"

export FTB_BUILD_DIR="$ROOT/build/release"
# The project venv (scripts/setup.sh): torch 2.x, h5py, pandas, transformers, peft, pytest,
# pytest-xdist. First on PATH, so every `python3` a test or script starts is the venv's too.
PY="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH"
# Bytecode: the venv is installed without .pyc files (scripts/setup.sh), so Python must be
# free to write them when a module is first imported. Where PYTHONDONTWRITEBYTECODE is set,
# every test process compiled torch's and transformers' modules anew: `import torch` took
# 3.4 CPU-s instead of 1.8, a worker's collection of the suite 34 s of which 15 s compiling.
unset PYTHONDONTWRITEBYTECODE

phase ctest
rm -rf build/release/gtest-reports
# -j4 on 2 cores: the slowest unit tests wait on timeouts (a hung peer's), not on the CPU.
ctest --test-dir build/release --output-on-failure -j4 --timeout 300 \
  --output-junit "$REPORTS/ctest.xml"

# 15 s per target from the seed corpus; longer runs: FTB_FUZZ_SECONDS (tests/fuzz/README.md).
# It runs in the background, beside the first pytest pass (which mostly waits), and its
# output is printed when that pass ends.
export FTB_FUZZ_SECONDS="${FTB_FUZZ_SECONDS:-15}"
if [ "$quick" = 0 ]; then
  echo "== fuzz (in the background): libFuzzer, ${FTB_FUZZ_SECONDS} s per target (tests/fuzz/README.md)"
  mkdir -p build
  rm -f build/fuzz.status
  # A session of its own, so that an early exit stops the fuzzers with it (report()).
  setsid bash -c 't0=$SECONDS; rc=0; scripts/fuzz.sh >build/fuzz.out 2>&1 || rc=$?
                  echo "$rc $((SECONDS - t0))" >build/fuzz.status' &
  fuzz_pid=$!
fi

# pytest arguments: the selection (-k, -m quick, paths) and what follows `--`.
paths=(tests/e2e tests/cluster)
[ "$quick" = 0 ] || paths=(tests/e2e)
for a in "${extra[@]+"${extra[@]}"}"; do
  if [ -e "${a%%::*}" ]; then paths=(); break; fi
done
common=(-q -x -p no:cacheprovider)
[ -z "$kexpr" ] || common+=(-k "$kexpr")
# Exit 5 is pytest's "no tests collected": a -k that selects nothing in one pass.
pytest_pass() {
  local rc=0
  "$PY" -m pytest "$@" || rc=$?
  [ "$rc" = 5 ] && rc=0
  return "$rc"
}

workers="${FTB_TEST_WORKERS:-4}"
if [ "$quick" = 1 ] || ! "$PY" -c 'import xdist' 2>/dev/null; then
  [ "$quick" = 1 ] || echo "test.sh: pytest-xdist missing from the venv (scripts/setup.sh): one process"
  workers=0
fi
phase "pytest parallel"
xdist=()
[ "$workers" = 0 ] || xdist=(-n "$workers" --dist loadgroup)
marks="not timing"
[ "$quick" = 0 ] || marks="quick"
pytest_pass "${common[@]}" "${xdist[@]+"${xdist[@]}"}" -m "$marks" \
  --junitxml="$REPORTS/pytest-parallel.xml" "${paths[@]+"${paths[@]}"}" "${extra[@]+"${extra[@]}"}"

if [ -n "$fuzz_pid" ]; then
  phase "fuzz (wait)"
  wait "$fuzz_pid" || true
  fuzz_pid=""
  cat build/fuzz.out
  read -r fuzz_rc fuzz_s <build/fuzz.status
  phases+=("$(printf '%-16s %5d s (beside pytest parallel)' "fuzz" "$fuzz_s")")
  [ "$fuzz_rc" = 0 ] || { echo "fuzz: scripts/fuzz.sh exited $fuzz_rc"; exit 1; }
fi

if [ "$quick" = 0 ]; then
  phase "pytest timing"
  # Only the files that mark a test `timing` (collecting the others costs a minute of imports).
  tpaths=("${paths[@]+"${paths[@]}"}")
  if [ ${#paths[@]} -gt 0 ]; then
    mapfile -t tpaths < <(grep -rl --include='test_*.py' 'pytest.mark.timing' "${paths[@]}" | sort)
  fi
  if [ ${#paths[@]} -eq 0 ] || [ ${#tpaths[@]} -gt 0 ]; then
    pytest_pass "${common[@]}" -m timing --junitxml="$REPORTS/pytest-timing.xml" \
      "${tpaths[@]+"${tpaths[@]}"}" "${extra[@]+"${extra[@]}"}"
  fi
fi
