#!/usr/bin/env bash
# Packs what a GPU machine needs to run this build's GPU checks without building anything
# there: trainer, trainer_cuda, launcher, fused_cuda_tests and every shared library they
# load that is neither glibc's nor libtorch's or CUDA's (those come from the GPU machine's
# PyTorch 2.11 installation, the release this build links: docs/architecture.md), as one
# compressed archive under .gpu/ (git-ignored), for scripts/gpu_all.sh to unpack there.
# The archive mirrors the build folder (trainer/trainer, launcher/launcher, tests/...), so
# FTB_BUILD_DIR can name it, with the libraries in lib/.
#
#   scripts/gpu_bundle.sh            writes .gpu/bundle.tar.xz and prints its size
#
# FTB_BUILD_DIR   the build to pack (default build/release)
# Exit status: 0, or 2 when the build lacks trainer_cuda (libtorch without CUDA) or a
# library cannot be found.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FTB_BUILD_DIR:-build/release}
programs=("$build/trainer/trainer" "$build/trainer/trainer_cuda" "$build/launcher/launcher"
          "$build/tests/fused_cuda_tests")
for p in "${programs[@]}"; do
  [ -x "$p" ] || { echo "gpu_bundle: $p missing (scripts/build.sh with a CUDA libtorch)" >&2; exit 2; }
done
stage=$(mktemp -d -t ftb-gpu-bundle.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" .gpu
for p in "${programs[@]}"; do
  rel=${p#"$build"/}
  mkdir -p "$stage/$(dirname "$rel")"
  cp "$p" "$stage/$rel"
done
# The libraries to carry: what ldd resolves, less the C library's own, libtorch's and
# CUDA's (found on the GPU machine through LD_LIBRARY_PATH; gpu_all.sh).
skip='/(libc|libm|libdl|libpthread|librt|libutil|libresolv|libgcc_s)\.so|ld-linux|/torch/lib/|cuda|nvidia'
missing=$(ldd "${programs[@]}" | grep "not found" | grep -vE 'libtorch|libc10|cuda|nccl|cudnn|cublas|cusparse|cufft|curand|nvrtc|nvJitLink|cupti' || true)
[ -z "$missing" ] || { echo "gpu_bundle: unresolved libraries:" >&2; echo "$missing" >&2; exit 2; }
ldd "${programs[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | grep -vE "$skip" | sort -u |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
git rev-parse HEAD >"$stage/commit"
tar -C "$stage" -cJf .gpu/bundle.tar.xz .
echo "gpu_bundle: .gpu/bundle.tar.xz $(du -m .gpu/bundle.tar.xz | cut -f1) MiB" \
     "($(ls "$stage/lib" | wc -l) libraries, commit $(cut -c1-12 "$stage/commit"))"
