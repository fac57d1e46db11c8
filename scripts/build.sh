#!/usr/bin/env bash
# Configures and builds a preset of CMakePresets.json (Ninja, ccache + precompiled
# headers, -j2; FTB_JOBS sets the jobs).
# Usage: scripts/build.sh [PRESET]   (default release; scripts/fuzz.sh builds `fuzz`)
# A build directory that an older checkout configured with another generator (Unix
# Makefiles) loses its CMake cache first: CMake refuses to switch generators in place.
# Everything else in it stays (build/fuzz/corpus, the fuzzers' grown corpus, among it).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
dir=build/$preset
if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
  echo "build: $dir was configured with another generator: configuring it afresh"
  rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "${FTB_JOBS:-2}"
