// Data parallel gradient synchronisation: bucketed all-reduce (sum) of gradients.
//
// Contract: the constructor binds every parameter's .grad() to a view of one
// persistent flat fp32 bucket buffer (~bucket_bytes each, in reverse registration
// order, the order backward produces them), so autograd accumulates straight into
// the buckets and reduce() all-reduces them in place: no concatenation, no copy back.
// After reduce(), every .grad() holds the sum over the data-parallel group (the
// trainer scales the loss by the global token count, so the sum is the global mean).
// zeroGrads() clears the buckets for the next step. REQUIRES: nobody replaces the
// .grad() tensors (use zeroGrads, not mutable_grad() = {}).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "trainer/parallel/comm.h"

namespace ftb {

class GradReducer {
 public:
  GradReducer(std::vector<torch::Tensor> params, Comm& comm, int64_t bucket_bytes = 25 << 20);
  void reduce();
  void zeroGrads();

 private:
  std::vector<torch::Tensor> buckets_;
  Comm& comm_;
};

}  // namespace ftb
