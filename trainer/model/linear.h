// The model's projections y = x Wᵀ, with fp32 CPU GEMMs on the BLAS this process chose.
//
// Contracts:
// - setFp32Gemm() is called once per process before the first forward (the session does,
//   from training.fp32_gemm and the timings of trainer/metrics/peaks.cpp); the default is
//   kAten. It changes which library multiplies, not what is computed: results agree with
//   ATen's to fp32 rounding (summation order differs).
// - projection(x, weight): x [..., K], weight [N, K] -> [..., N], differentiable in both. fp32
//   CPU inputs go to OpenBLAS when kOpenBlas is set; every other dtype or device, and
//   kAten, to torch::matmul. A weight that needs no gradient gets none computed.
#pragma once

#include <torch/torch.h>

#include <string>

#include "trainer/kernels/nf4.h"

namespace ftb {

enum class Fp32Gemm { kAten, kOpenBlas };

void setFp32Gemm(Fp32Gemm route);
Fp32Gemm fp32Gemm();
std::string fp32GemmName(Fp32Gemm route);  // "ATen (MKL)" or OpenBLAS's own description

// Whether a product of a and b goes to OpenBLAS: kOpenBlas is set and both are non-empty
// fp32 CPU tensors (every fp32 product the model routes asks this one question).
bool fp32OnOpenBlas(const torch::Tensor& a, const torch::Tensor& b);

torch::Tensor projection(const torch::Tensor& x, const torch::Tensor& weight);

// x [..., K] times an NF4 weight w [N, K] (lora.base_dtype = "nf4") -> [..., N] in x's
// dtype, differentiable in x only (the weight is frozen: no gradient). Forward dequantizes
// w to x's dtype for the product (projection()) and drops it; backward dequantizes it again
// for grad_x = grad_y · w. Saved for backward: the packed tensors only, so one dequantized
// matrix exists at a time. REQUIRES: w.shape is [N, K] with K = x.size(-1), on x's device.
torch::Tensor nf4Projection(const torch::Tensor& x, const Nf4Tensor& w);

// training.fp32_gemm resolved: "aten", "openblas", or "auto" = whichever of the two ran an
// n×n×n GEMM faster here and now (both timed when OpenBLAS loads; 0 = not measured).
// Throws ConfigError for "openblas" when libopenblas.so.0 does not load.
struct Fp32GemmChoice {
  Fp32Gemm route = Fp32Gemm::kAten;
  double aten_flops = 0, openblas_flops = 0;
  std::string why;  // "training.fp32_gemm = "auto": the faster of ATen 95.1 and OpenBLAS ..."
  double flops() const { return route == Fp32Gemm::kOpenBlas ? openblas_flops : aten_flops; }
};
Fp32GemmChoice chooseFp32Gemm(const std::string& key, int64_t n, int reps);

// FLOP/s of the best of `reps` n×n×n fp32 GEMMs through `route` on this thread's intra-op
// threads (after one warm-up). REQUIRES: route is kAten, or openblas() loads.
double measureFp32Gemm(Fp32Gemm route, int64_t n, int reps);

}  // namespace ftb
