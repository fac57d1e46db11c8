// fp32 GEMM through OpenBLAS, loaded at run time beside libtorch.
//
// The PyPI libtorch runs its fp32 GEMMs on MKL, linked statically into libtorch_cpu.so.
// On some AMD CPUs OpenBLAS is faster (measured per run: trainer/metrics/peaks.cpp picks
// the faster for training.fp32_gemm = "auto"). The trainer links OpenBLAS after libtorch,
// so libtorch's own sgemm_ calls stay on MKL; this reaches OpenBLAS through its handle.
//
// Contracts:
// - openblas() loads libopenblas.so.0 once (thread-safe) and returns null when it cannot,
//   with the loader's reason in *why.
// - sgemm computes C = alpha op(A) op(B) + beta C on dense row-major arrays (CBLAS
//   semantics, CblasRowMajor); op(X) = X or Xᵀ. It runs on the calling thread's OpenMP
//   thread count (the OpenMP build shares libtorch's libgomp, so at::set_num_threads
//   governs it) or on OpenBLAS's own pool (a pthreads build).
#pragma once

#include <cstdint>
#include <string>

namespace ftb::kernels {

class OpenBlas {
 public:
  virtual ~OpenBlas() = default;
  // REQUIRES: m, n, k >= 1; lda/ldb/ldc >= the row lengths of the stored matrices.
  virtual void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) const = 0;
  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ... (core Cooperlake)".
  virtual std::string describe() const = 0;
};

const OpenBlas* openblas(std::string* why = nullptr);

}  // namespace ftb::kernels
