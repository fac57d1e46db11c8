// The fp32 projection on OpenBLAS against ATen's matmul: same values and gradients to fp32
// rounding, no weight gradient where none is needed, and other dtypes left to ATen.
#include "trainer/model/linear.h"

#include <gtest/gtest.h>

#include "trainer/kernels/openblas.h"

namespace ftb {
namespace {

struct RouteGuard {  // restores the process-wide route whatever a test does
  Fp32Gemm saved = fp32Gemm();
  ~RouteGuard() { setFp32Gemm(saved); }
};

double relErr(const torch::Tensor& a, const torch::Tensor& ref) {
  return ((a - ref).abs().max() / ref.abs().max()).item<double>();
}

// Forward and both gradients of projection(x, w) on `route`, from fixed inputs.
std::vector<torch::Tensor> run(Fp32Gemm route, bool weight_grad) {
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
  auto ref = run(Fp32Gemm::kAten, true), got = run(Fp32Gemm::kOpenBlas, true);
  EXPECT_EQ(got[0].sizes(), ref[0].sizes());
  for (int i = 0; i < 3; ++i) EXPECT_LT(relErr(got[i], ref[i]), 1e-5) << "tensor " << i;
}

TEST(Projection, FrozenWeightGetsNoGradient) {
  if (!kernels::openblas()) GTEST_SKIP() << "libopenblas.so.0 does not load";
  RouteGuard guard;
  auto ref = run(Fp32Gemm::kAten, false), got = run(Fp32Gemm::kOpenBlas, false);
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

// Forward and both gradients of batchedProduct(a, b) on `route`: a [2, 3, 5, 4] and b a
// [2, 3, 4, 6] operand given either contiguous or as the transpose of a [2, 3, 6, 4] tensor
// (attention's kᵀ), a permuted a (heads transposed out of a [2, 5, 3, 4] tensor), and
// one-row matrices.
std::vector<torch::Tensor> runBatched(Fp32Gemm route, bool b_transposed, int64_t m) {
  setFp32Gemm(route);
  torch::manual_seed(11);
  torch::Tensor a0 = torch::randn({2, m, 3, 4}).requires_grad_(true);
  torch::Tensor b0 = b_transposed ? torch::randn({2, 3, 6, 4}).requires_grad_(true)
                                  : torch::randn({2, 3, 4, 6}).requires_grad_(true);
  torch::Tensor a = a0.transpose(1, 2), b = b_transposed ? b0.transpose(-2, -1) : b0;
  torch::Tensor c = batchedProduct(a, b);
  (c * torch::linspace(-1, 1, 6)).sum().backward();
  return {c.detach(), a0.grad(), b0.grad()};
}

TEST(BatchedProduct, OpenBlasMatchesAtenForStridedOperands) {
  if (!kernels::openblas()) GTEST_SKIP() << "libopenblas.so.0 does not load";
  RouteGuard guard;
  for (bool bt : {false, true})
    for (int64_t m : {5, 1}) {
      auto ref = runBatched(Fp32Gemm::kAten, bt, m), got = runBatched(Fp32Gemm::kOpenBlas, bt, m);
      ASSERT_EQ(got[0].sizes(), ref[0].sizes());
      for (int i = 0; i < 3; ++i)
        EXPECT_LT(relErr(got[i], ref[i]), 1e-5)
            << "tensor " << i << ", b transposed " << bt << ", rows " << m;
    }
}

TEST(BatchedProduct, Bf16AndBroadcastStayOnAten) {
  if (!kernels::openblas()) GTEST_SKIP() << "libopenblas.so.0 does not load";
  RouteGuard guard;
  setFp32Gemm(Fp32Gemm::kOpenBlas);
  torch::Tensor a = torch::randn({2, 3, 4}).to(torch::kBFloat16);
  torch::Tensor b = torch::randn({2, 4, 5}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(batchedProduct(a, b), torch::matmul(a, b)));
  torch::Tensor a32 = torch::randn({2, 3, 4}), w = torch::randn({4, 5});  // broadcast b
  EXPECT_TRUE(torch::equal(batchedProduct(a32, w), torch::matmul(a32, w)));
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
