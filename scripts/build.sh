#!/usr/bin/env bash
# Configures and builds the release preset (ccache + precompiled headers, -j2).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j "${FTB_JOBS:-2}"
