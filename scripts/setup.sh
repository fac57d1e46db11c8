#!/usr/bin/env bash
# Installs every Debian package ftbench needs. Idempotent: re-running installs nothing
# new. Needs root (or sudo). Checks that OpenBLAS (OpenMP flavour) is the active BLAS.
set -euo pipefail

PKGS=(
  build-essential cmake ccache pkg-config git
  libtorch-dev libgloo-dev libopenblas0-openmp      # libtorch 1.13 + c10d Gloo headers + fast BLAS
  libjemalloc-dev                                   # trainer allocator (honest peak RSS)
  libopenmpi-dev openmpi-bin                        # launcher rendezvous
  libhdf5-dev hdf5-tools                            # metrics files
  libtomlplusplus-dev libcxxopts-dev nlohmann-json3-dev libgtest-dev
  libsentencepiece-dev sentencepiece               # JSONL text datasets (spm_train/spm_encode: tests)
  clang libclang-rt-14-dev                          # libFuzzer harnesses (scripts/fuzz.sh)
  gnuplot-nox                                       # sweep_tagger aggregate --plot
  python3 python3-torch python3-h5py python3-pandas python3-pytest   # interop + e2e tests
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
