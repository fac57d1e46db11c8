#include "trainer/parallel/ddp.h"

namespace ftb {

GradReducer::GradReducer(std::vector<torch::Tensor> params, Comm& comm, int64_t bucket_bytes)
    : params_(std::move(params)), comm_(comm) {
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

void GradReducer::reduce() {
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

}  // namespace ftb
