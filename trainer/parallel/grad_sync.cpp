#include "trainer/parallel/grad_sync.h"

#include "trainer/kernels/tensor_runs.h"

namespace ftb {

std::vector<torch::Tensor> tpNormWeights(const std::vector<ModelParam>& params, int64_t tp) {
  std::vector<torch::Tensor> w;
  if (tp == 1) return w;
  for (const auto& p : params)
    w.push_back(p.tpReplicated() ? torch::full({}, 1.0 / double(tp), torch::kFloat64)
                                 : torch::Tensor());
  return w;
}

double paramSquaredNorm(const torch::Tensor& g, const std::vector<torch::Tensor>& weights,
                        size_t i) {
  if (weights.empty()) return gradSquaredNorm({g});
  return gradSquaredNorm({g}, {weights[i]});
}

std::vector<FlatLayout> wholeLayouts(const std::vector<ModelParam>& params) {
  std::vector<FlatLayout> v;
  for (const ModelParam& p : params)
    v.push_back({{p}, {p.tensor.sizes().vec()}, {0}, 0, p.tensor.numel()});
  return v;
}

std::vector<torch::Tensor> GradSync::frozenParams() const {
  std::vector<torch::Tensor> v;
  for (const ModelParam& p : frozen_) v.push_back(p.tensor);
  return v;
}

std::vector<FlatLayout> GradSync::frozenLayout() const { return wholeLayouts(frozen_); }

}  // namespace ftb
