// Helpers of the tests of the fp32 GEMM route (model/linear.h): they switch the
// process-wide route and compare each route's results.
#pragma once

#include <torch/torch.h>

#include "trainer/model/linear.h"

namespace ftb {

struct RouteGuard {  // restores the process-wide route whatever a test does
  Fp32Gemm saved = fp32Gemm();
  ~RouteGuard() { setFp32Gemm(saved); }
};

// max |a - ref| / max |ref|.
inline double relErr(const torch::Tensor& a, const torch::Tensor& ref) {
  return ((a - ref).abs().max() / ref.abs().max()).item<double>();
}

}  // namespace ftb
