// The fused fp32 CPU ops (trainer/model/fused_ops.h, trainer/kernels/cpu_kernels.h)
// against the ATen compositions they replace: same values and gradients within fp32
// rounding; and the flat AdamW of back-to-back parameters (DDP buckets) against the
// per-parameter update.
#include "trainer/model/fused_ops.h"

#include <gtest/gtest.h>

#include "trainer/optim/optimizer.h"

namespace ftb {
namespace {

torch::Tensor atenRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

TEST(FusedOps, RmsNormMatchesAtenValuesAndGradients) {
  torch::manual_seed(3);
  for (int64_t d : {1, 7, 128, 133}) {
    torch::Tensor x0 = torch::randn({2, 5, d}), w0 = torch::randn({d}), g = torch::randn({2, 5, d});
    torch::Tensor x1 = x0.clone().requires_grad_(), w1 = w0.clone().requires_grad_();
    torch::Tensor x2 = x0.clone().requires_grad_(), w2 = w0.clone().requires_grad_();
    ASSERT_TRUE(fusedRmsNormApplies(x1, w1));
    torch::Tensor y1 = fusedRmsNorm(x1, w1, 1e-5), y2 = atenRmsNorm(x2, w2, 1e-5);
    (y1 * g).sum().backward();
    (y2 * g).sum().backward();
    EXPECT_TRUE(torch::allclose(y1, y2, 1e-5, 1e-6)) << "d=" << d;
    EXPECT_TRUE(torch::allclose(x1.grad(), x2.grad(), 1e-4, 1e-5)) << "d=" << d;
    EXPECT_TRUE(torch::allclose(w1.grad(), w2.grad(), 1e-4, 1e-5)) << "d=" << d;
  }
}

TEST(FusedOps, RmsNormLeavesBf16ToAten) {
  EXPECT_FALSE(fusedRmsNormApplies(torch::ones({2, 4}, torch::kBFloat16), torch::ones({4})));
  EXPECT_FALSE(fusedRmsNormApplies(torch::ones({2, 4}), torch::ones({3})));
}

TEST(FusedOps, FlatAdamWOverOneBufferMatchesSeparateParameters) {
  torch::manual_seed(4);
  OptimizerOptions o;
  o.weight_decay = 0.1;
  torch::Tensor flat_p = torch::randn({30}), flat_g = torch::zeros({30});
  std::vector<torch::Tensor> ps{flat_p.narrow(0, 0, 12).view({3, 4}), flat_p.narrow(0, 12, 18)};
  std::vector<torch::Tensor> gs{flat_g.narrow(0, 0, 12).view({3, 4}), flat_g.narrow(0, 12, 18)};
  std::vector<torch::Tensor> sep{ps[0].clone(), ps[1].clone()};
  auto flat_opt = makeOptimizer(ps, o), sep_opt = makeOptimizer(sep, o);
  for (int step = 0; step < 5; ++step) {
    flat_g.copy_(torch::randn({30}));
    std::vector<torch::Tensor> sep_g{gs[0].clone(), gs[1].clone()};
    flat_opt->step(gs, 1e-2);
    sep_opt->step(sep_g, 1e-2);
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(torch::allclose(ps[i], sep[i], 1e-6, 1e-7)) << i;
    EXPECT_TRUE(torch::allclose(flat_opt->state(i)[1].second, sep_opt->state(i)[1].second))
        << "exp_avg_sq " << i;
  }
  // One fp32 reduction over the buffer instead of one per tensor: equal up to rounding.
  const double sep_sq = gradSquaredNorm({gs[0].clone(), gs[1].clone()});
  EXPECT_NEAR(gradSquaredNorm(gs), sep_sq, 1e-6 * sep_sq);
}

}  // namespace
}  // namespace ftb
