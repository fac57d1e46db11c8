#include "trainer/parallel/ddp.h"

namespace ftb {

GradReducer::GradReducer(std::vector<torch::Tensor> params, Comm& comm, int64_t bucket_bytes)
    : comm_(comm) {
  std::vector<std::vector<torch::Tensor>> groups;
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    int64_t b = params[k].numel() * 4;
    if (groups.empty() || bytes + b > bucket_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(params[k]);
    bytes += b;
  }
  for (auto& group : groups) {
    int64_t n = 0;
    for (auto& p : group) n += p.numel();
    torch::Tensor flat = torch::zeros({n});
    int64_t off = 0;
    for (auto& p : group) {
      p.mutable_grad() = flat.narrow(0, off, p.numel()).view(p.sizes());
      off += p.numel();
    }
    buckets_.push_back(flat);
  }
}

void GradReducer::reduce() {
  if (comm_.size() == 1) return;
  for (auto& flat : buckets_) comm_.allReduceSum(flat);
}

void GradReducer::zeroGrads() {
  for (auto& flat : buckets_) flat.zero_();
}

}  // namespace ftb
