#include "trainer/parallel/grad_sync.h"

namespace ftb {

std::vector<torch::Tensor> tpNormWeights(const std::vector<ModelParam>& params, int64_t tp) {
  std::vector<torch::Tensor> w;
  if (tp == 1) return w;
  for (const auto& p : params)
    w.push_back(p.tpReplicated() ? torch::full({}, 1.0 / double(tp), torch::kFloat64)
                                 : torch::Tensor());
  return w;
}

}  // namespace ftb
