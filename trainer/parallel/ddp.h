// Data parallel (DDP) gradient synchronisation: bucketed all-reduce (sum) of gradients.
//
// Contract (GradSync): after finishGradients(), every parameter's .grad() holds the sum
// over the data-parallel group of the local gradients (the trainer scales the loss by
// the global token count, so the sum is the global mean). Buckets are ~bucket_bytes of
// fp32 and are formed in reverse forward order (about the order backward produces
// gradients). Parameters without a gradient get a zero gradient first, so every rank
// sends identical bucket layouts.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "trainer/parallel/comm.h"
#include "trainer/parallel/grad_sync.h"

namespace ftb {

class DdpSync final : public GradSync {
 public:
  // params: the model's parameters (forward order); comm: the data-parallel group.
  DdpSync(const std::vector<ModelParam>& params, Comm& comm, int64_t tp,
          int64_t bucket_bytes = 25 << 20);
  void finishGradients() override;
  std::vector<torch::Tensor> optimizerParams() const override { return params_; }
  std::vector<torch::Tensor> gradients() const override;
  double localSquaredNorm() const override;
  void afterOptimizer() override;

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> norm_weights_;
  std::vector<std::vector<size_t>> buckets_;  // indices into params_
  Comm& comm_;
};

}  // namespace ftb
