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

// Weight gradients computed apart from the backward (parallel.pp_schedule = "zb_h1"): a
// transformer block's projections (blockProjection) made while a store is active
// (ActiveWeightGradStore) compute only grad_x in their backward and leave (x, grad_y, weight)
// in that store; apply() later computes each grad_w = grad_yᵀ·x and hands it to the weight's
// autograd graph (its cast to the compute dtype, then its gradient accumulator and that
// accumulator's hooks: grad_sync.h's strategies see an ordinary gradient). grad_w equals the
// ordinary backward's to fp32 rounding, and entries are applied in the order the backward
// left them.
// Invariant: the backward of a deferred projection never reaches its weight's graph, so the
// weight's gradient accumulator runs only in apply().
class WeightGradStore {
 public:
  struct Entry {
    torch::Tensor x, grad_y;  // [M, K] and [M, N]
    torch::Tensor weight;     // as the projection used it (a cast keeps its graph)
  };
  void push(Entry e) { entries_.push_back(std::move(e)); }
  bool empty() const { return entries_.empty(); }
  // Computes and accumulates every entry's weight gradient, then empties the store.
  void apply();

 private:
  std::vector<Entry> entries_;
};

// While alive, blockProjection defers its weight gradients to `store` (nullptr: none). The
// store is read when a projection runs forward (a recompute included), so the guard spans
// the forward and the backward of what it defers. Not nested; process-wide, as the autograd
// engine may run a backward on its own thread.
class ActiveWeightGradStore {
 public:
  explicit ActiveWeightGradStore(WeightGradStore* store);
  ~ActiveWeightGradStore();
  ActiveWeightGradStore(const ActiveWeightGradStore&) = delete;
  ActiveWeightGradStore& operator=(const ActiveWeightGradStore&) = delete;
};
bool weightGradsDeferred();  // a store is active
// An empty tensor that requires grad, an input of every deferred projection: a
// differentiation over chosen inputs (autograd::grad) that must run the deferred
// projections' backward, even those on no path to its inputs, lists it among them (its
// gradient is undefined).
const torch::Tensor& weightGradAnchor();

// projection(x, weight) for a transformer block's projection (and its LoRA adapters):
// the same values, with the weight gradient deferred to the active store when there is one,
// grad mode is on and the weight requires a gradient.
torch::Tensor blockProjection(const torch::Tensor& x, const torch::Tensor& weight);

// x [..., K] times an NF4 weight w [N, K] (lora.base_dtype = "nf4") -> [..., N] in x's
// dtype, differentiable in x only (the weight is frozen: no gradient). Forward dequantizes
// w to x's dtype for the product (projection()) and drops it; backward dequantizes it again
// for grad_x = grad_y · w. Saved for backward: the packed tensors only, so one dequantized
// matrix exists at a time. REQUIRES: w.shape is [N, K] with K = x.size(-1), on x's device.
torch::Tensor nf4Projection(const torch::Tensor& x, const Nf4Tensor& w);

// training.fp32_gemm resolved: "aten", "openblas", or "auto" = whichever of the two ran an
// n×n×n GEMM faster here and now (both timed when OpenBLAS loads; 0 = not measured).
// With time_fixed = false a fixed route ("aten", "openblas") is taken untimed (flops() 0);
// "auto" is always timed, since its choice is the timing.
// Throws ConfigError for "openblas" when libopenblas.so.0 does not load.
struct Fp32GemmChoice {
  Fp32Gemm route = Fp32Gemm::kAten;
  double aten_flops = 0, openblas_flops = 0;
  std::string why;  // "training.fp32_gemm = "auto": the faster of ATen 95.1 and OpenBLAS ..."
  double flops() const { return route == Fp32Gemm::kOpenBlas ? openblas_flops : aten_flops; }
};
Fp32GemmChoice chooseFp32Gemm(const std::string& key, int64_t n, int reps,
                              bool time_fixed = true);

// FLOP/s of the best of `reps` n×n×n fp32 GEMMs through `route` on this thread's intra-op
// threads (after one warm-up). REQUIRES: route is kAten, or openblas() loads.
double measureFp32Gemm(Fp32Gemm route, int64_t n, int reps);

}  // namespace ftb
