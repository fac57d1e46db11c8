// The flat AdamW of parameters that lie back to back in one buffer (DDP buckets,
// trainer/optim/optimizer.h; one fused pass, trainer/kernels/cpu_kernels.h) against the
// per-parameter update, and the gradient norm of such a buffer against the per-tensor one.
#include <gtest/gtest.h>

#include "trainer/kernels/tensor_runs.h"
#include "trainer/optim/optimizer.h"

namespace ftb {
namespace {

TEST(AdamW, FlatOverOneBufferMatchesSeparateParameters) {
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

// The gradient norm sums fp32 squares in fp64: over a dense run (a length that is not a
// multiple of the kernel's 16 lanes), a bucket of adjacent views and a strided gradient it
// matches an fp64 reference to 1e-12 relative, where fp32 accumulation misses by ~1e-6.
TEST(Optimizer, GradSquaredNormSumsInFp64) {
  torch::manual_seed(11);
  torch::Tensor dense = torch::randn({1000003}) * torch::rand({1000003}).pow(4) * 100;
  torch::Tensor bucket = torch::randn({5000});
  std::vector<torch::Tensor> views{bucket.narrow(0, 0, 3001), bucket.narrow(0, 3001, 1999)};
  torch::Tensor strided = torch::randn({37, 53}).t();
  auto ref = [](const torch::Tensor& t) {
    return t.to(torch::kFloat64).pow(2).sum().item<double>();
  };
  const double want = ref(dense) + ref(bucket) + ref(strided);
  const double got = gradSquaredNorm({dense, views[0], views[1], strided});
  EXPECT_NEAR(got, want, 1e-12 * want);
  const double fp32 = dense.pow(2).sum().item<float>();
  EXPECT_GT(std::abs(fp32 - ref(dense)), 1e-9 * ref(dense))
      << "the case would not tell fp32 from fp64";
}

// step(..., zero_grads = true) leaves every gradient zero and updates the parameters
// and moments bit for bit as step(...) does: the fused kernel (flat buffer) and the
// per-op fallback (a non-contiguous gradient), for AdamW and Adafactor.
TEST(Optimizer, ZeroGradsInTheUpdateChangesNothingElse) {
  for (const char* kind : {"adamw", "adafactor"}) {
    torch::manual_seed(5);
    OptimizerOptions o;
    o.kind = kind;
    o.weight_decay = 0.1;
    torch::Tensor p1 = torch::randn({4, 6}), q1 = torch::randn({6, 4});
    std::vector<torch::Tensor> a{p1.clone(), q1.clone()}, b{p1.clone(), q1.clone()};
    auto oa = makeOptimizer(a, o), ob = makeOptimizer(b, o);
    for (int step = 0; step < 3; ++step) {
      torch::Tensor g0 = torch::randn({4, 6}), g1 = torch::randn({4, 6}).t();  // g1: strided
      std::vector<torch::Tensor> ga{g0.clone(), g1.clone().t().contiguous().t()}, gb{g0, g1};
      oa->step(ga, 1e-2);
      ob->step(gb, 1e-2, /*zero_grads=*/true);
      for (size_t i = 0; i < 2; ++i) {
        EXPECT_TRUE(torch::equal(a[i], b[i])) << kind << " param " << i << " step " << step;
        EXPECT_EQ(gb[i].abs().sum().item<float>(), 0.0f) << kind << " grad " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ftb
