// The fp32 projection on OpenBLAS against ATen's matmul: same values and gradients to fp32
// rounding, no weight gradient where none is needed, and other dtypes left to ATen.
#include "trainer/model/linear.h"

#include <gtest/gtest.h>

#include "tests/unit/trainer/fp32_gemm_route.h"
#include "trainer/kernels/openblas.h"

namespace ftb {
namespace {

// Forward and both gradients of projection(x, w) on `route`, from fixed inputs.
std::vector<torch::Tensor> runProjection(Fp32Gemm route, bool weight_grad) {
  setFp32Gemm(route);
  torch::manual_seed(7);
  torch::Tensor x = torch::randn({3, 5, 24}).requires_grad_(true);
  torch::Tensor w = torch::randn({40, 24}).requires_grad_(weight_grad);
  torch::Tensor y = projection(x, w);
  (y * torch::linspace(-1, 1, 40)).sum().backward();
  return {y.detach(), x.grad(), weight_grad ? w.grad() : torch::Tensor()};
}

TEST(Projection, OpenBlasMatchesAtenForwardAndBackward) {
  if (!kernels::openblas()) GTEST_SKIP() << "libopenblas.so.0 does not load";
  RouteGuard guard;
  auto ref = runProjection(Fp32Gemm::kAten, true), got = runProjection(Fp32Gemm::kOpenBlas, true);
  EXPECT_EQ(got[0].sizes(), ref[0].sizes());
  for (int i = 0; i < 3; ++i) EXPECT_LT(relErr(got[i], ref[i]), 1e-5) << "tensor " << i;
}

TEST(Projection, FrozenWeightGetsNoGradient) {
  if (!kernels::openblas()) GTEST_SKIP() << "libopenblas.so.0 does not load";
  RouteGuard guard;
  auto ref = runProjection(Fp32Gemm::kAten, false), got = runProjection(Fp32Gemm::kOpenBlas, false);
  EXPECT_LT(relErr(got[1], ref[1]), 1e-5);
  EXPECT_FALSE(got[2].defined());
}

TEST(Projection, Bf16StaysOnAten) {
  if (!kernels::openblas()) GTEST_SKIP() << "libopenblas.so.0 does not load";
  RouteGuard guard;
  setFp32Gemm(Fp32Gemm::kOpenBlas);
  torch::Tensor x = torch::randn({4, 8}).to(torch::kBFloat16), w = torch::randn({6, 8});
  torch::Tensor y = projection(x, w.to(torch::kBFloat16));
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(y, torch::matmul(x, w.to(torch::kBFloat16).t())));
}

// A weight gradient deferred to a WeightGradStore: the backward leaves the weight's .grad
// untouched (and runs no hook of its accumulator), apply() then accumulates what the
// ordinary backward would, on each route and through a bf16 cast to an fp32 master.
TEST(Projection, DeferredWeightGradientEqualsTheOrdinaryOne) {
  RouteGuard guard;
  for (Fp32Gemm route : {Fp32Gemm::kAten, Fp32Gemm::kOpenBlas}) {
    if (route == Fp32Gemm::kOpenBlas && !kernels::openblas()) continue;
    setFp32Gemm(route);
    for (bool bf16 : {false, true}) {
      torch::manual_seed(11);
      const torch::Tensor x0 = torch::randn({2, 5, 24}), w0 = torch::randn({40, 24});
      const torch::Tensor weights = torch::linspace(-1, 1, 40);
      auto loss = [&](const torch::Tensor& y) { return (y.to(torch::kFloat32) * weights).sum(); };
      auto cast = [&](const torch::Tensor& t) { return bf16 ? t.to(torch::kBFloat16) : t; };
      torch::Tensor xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
      loss(projection(cast(xr), cast(wr))).backward();

      torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      int hooks = 0;
      w.register_hook([&hooks](const torch::Tensor&) { ++hooks; });
      WeightGradStore store;
      {
        ActiveWeightGradStore active(&store);
        EXPECT_TRUE(weightGradsDeferred());
        loss(blockProjection(cast(x), cast(w))).backward();
      }
      EXPECT_FALSE(weightGradsDeferred());
      EXPECT_FALSE(w.grad().defined());
      EXPECT_EQ(hooks, 0);
      ASSERT_FALSE(store.empty());
      EXPECT_TRUE(torch::equal(x.grad(), xr.grad())) << "bf16 " << bf16;
      store.apply();
      EXPECT_TRUE(store.empty());
      EXPECT_EQ(hooks, 1);
      ASSERT_TRUE(w.grad().defined());
      EXPECT_LT(relErr(w.grad(), wr.grad()), bf16 ? 1e-2 : 1e-6) << "bf16 " << bf16;
    }
  }
}

TEST(Projection, RouteNamesSayWhichBlas) {
  EXPECT_NE(fp32GemmName(Fp32Gemm::kAten).find("ATen"), std::string::npos);
  if (kernels::openblas()) {
    EXPECT_EQ(fp32GemmName(Fp32Gemm::kOpenBlas).rfind("OpenBLAS", 0), 0u);
    EXPECT_GT(measureFp32Gemm(Fp32Gemm::kOpenBlas, 64, 1), 0);
  }
  EXPECT_GT(measureFp32Gemm(Fp32Gemm::kAten, 64, 1), 0);
}

}  // namespace
}  // namespace ftb
