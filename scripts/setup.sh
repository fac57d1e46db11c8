#!/usr/bin/env bash
# Installs every Debian package ftbench needs, then the project venv (.venv, git-ignored):
# PyTorch 2.11 from PyPI (its libtorch is what the trainer builds against) and the Python
# packages of the tests, pinned in scripts/requirements-venv.txt. Idempotent: re-running
# installs nothing new. Needs root (or sudo). Checks that OpenBLAS is the active system BLAS.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build ccache pkg-config git
  libopenblas0-openmp libopenblas-openmp-dev       # fp32 GEMM where it beats the wheel's MKL
  libjemalloc-dev                                   # trainer allocator (honest peak RSS)
  libopenmpi-dev openmpi-bin                        # launcher rendezvous
  libhdf5-dev hdf5-tools                            # metrics files
  libtomlplusplus-dev libcxxopts-dev nlohmann-json3-dev libgtest-dev
  libsentencepiece-dev sentencepiece               # JSONL text datasets (spm_train/spm_encode: tests)
  libpcre2-dev libutf8proc-dev                      # tokenizer.json: pre-tokenizer regexes, NFC
  clang libclang-rt-14-dev                          # libFuzzer harnesses (scripts/fuzz.sh)
  gnuplot-nox                                       # sweep_tagger aggregate --plot
  python3 python3-venv                              # the project venv (below)
  iproute2 procps psmisc                            # netns hosts, ps/pkill in tests
  slurmctld slurmd slurm-client munge               # SLURM cluster tests
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all ${#PKGS[@]} packages present"
fi

# libtorch must resolve libblas.so.3 to OpenBLAS (reference BLAS is ~15x slower).
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) echo "setup: BLAS = $blas" ;;
  *)
    alt=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep openblas | head -1 || true)
    if [ -n "$alt" ]; then
      $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu "$alt"
      echo "setup: BLAS switched to $alt"
    else
      echo "setup: ERROR: OpenBLAS is not the active BLAS ($blas)" >&2
      exit 1
    fi
    ;;
esac

# ---- The project venv: libtorch for the build, torch 2.x and friends for the tests -------
# Every package is pinned and installed with --no-deps (the file says why). The wheels are
# kept in a wheelhouse (FTB_WHEELHOUSE, default ~/.cache/ftbench/wheels): the package index
# here answers with no-store, so pip's own HTTP cache keeps nothing, and a second fresh
# clone would download the 0.8 GB again.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV="$ROOT/.venv"
REQ="$ROOT/scripts/requirements-venv.txt"
WHEELS="${FTB_WHEELHOUSE:-$HOME/.cache/ftbench/wheels}"
stamp="$VENV/.ftb-requirements.sha256"
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "setup: venv up to date ($VENV)"
else
  t0=$(date +%s)
  mkdir -p "$WHEELS"
  before=$(du -sb "$WHEELS" | cut -f1)
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  # From the wheelhouse alone when it holds every pinned wheel (asking the index about 50
  # cached wheels took 80 s here); pip resolves all before installing, so a missing wheel
  # fails before anything is installed, and then the missing ones are downloaded.
  # --no-compile: no .pyc for torch's thousands of modules now; Python writes them for
  # the modules a test imports, when it first imports them (scripts/test.sh unsets
  # PYTHONDONTWRITEBYTECODE for that).
  install=("$VENV/bin/python" -m pip install -q --no-compile --no-deps --no-index
           --find-links "$WHEELS" -r "$REQ")
  if ! "${install[@]}" 2>/dev/null; then
    "$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: -d "$WHEELS" -r "$REQ"
    "${install[@]}"
  fi
  got=$(( ($(du -sb "$WHEELS" | cut -f1) - before) / 1048576 ))
  echo "$want" >"$stamp"
  echo "setup: venv installed in $(( $(date +%s) - t0 )) s, downloaded ${got} MiB" \
       "($(du -sh "$VENV" | cut -f1) installed, wheelhouse $WHEELS)"
fi
"$VENV/bin/python" -c 'import torch; print("setup: torch", torch.__version__, "at", torch.__file__)'
