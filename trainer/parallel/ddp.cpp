#include "trainer/parallel/ddp.h"

#include "trainer/optim/optimizer.h"

namespace ftb {

DdpSync::DdpSync(const std::vector<ModelParam>& params, Comm& comm, int64_t tp,
                 int64_t bucket_bytes)
    : norm_weights_(tpNormWeights(params, tp)), comm_(comm) {
  for (const auto& p : params) params_.push_back(p.tensor);
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    int64_t b = params_[k].numel() * 4;
    if (buckets_.empty() || bytes + b > bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().push_back(k);
    bytes += b;
  }
}

void DdpSync::finishGradients() {
  if (comm_.size() == 1) return;
  torch::NoGradGuard no_grad;
  for (const auto& bucket : buckets_) {
    std::vector<torch::Tensor> grads;
    for (size_t k : bucket) {
      torch::Tensor& p = params_[k];
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad().view(-1));
    }
    torch::Tensor flat = torch::cat(grads);
    comm_.allReduceSum(flat);
    int64_t off = 0;
    for (auto& g : grads) {
      g.copy_(flat.narrow(0, off, g.numel()));
      off += g.numel();
    }
  }
}

std::vector<torch::Tensor> DdpSync::gradients() const {
  std::vector<torch::Tensor> g;
  for (const auto& p : params_) g.push_back(p.grad());
  return g;
}

// Replicas hold equal copies of the reduced gradient: each contributes 1/dp.
double DdpSync::localSquaredNorm() const {
  return gradSquaredNorm(gradients(), norm_weights_) / double(comm_.size());
}

void DdpSync::afterOptimizer() {
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
}

}  // namespace ftb
