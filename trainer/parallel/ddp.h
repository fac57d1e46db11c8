// Data parallel gradient synchronisation: bucketed all-reduce (sum) of gradients.
//
// Contract: after reduce(), every parameter's .grad() holds the sum over the
// data-parallel group of the local gradients (the trainer scales the loss by the
// global token count, so the sum is the global mean). Buckets are ~bucket_bytes of
// fp32 and are formed in reverse registration order (the order backward produces
// them). Parameters without a gradient get a zero gradient first, so every rank
// sends identical bucket layouts.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "trainer/parallel/comm.h"

namespace ftb {

class GradReducer {
 public:
  GradReducer(std::vector<torch::Tensor> params, Comm& comm, int64_t bucket_bytes = 25 << 20);
  void reduce();

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;  // indices into params_
  Comm& comm_;
};

}  // namespace ftb
