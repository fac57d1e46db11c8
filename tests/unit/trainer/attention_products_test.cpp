// Causal attention's products on OpenBLAS over the lower block triangle against ATen's full
// products: the attention output and the gradients of q, k and v agree to fp32 rounding,
// with the fused causal softmax between them as the model runs it, for sequence lengths
// of one block, several blocks and a short last block, and for strided inputs.
#include "trainer/model/attention_products.h"

#include <gtest/gtest.h>

#include "tests/unit/trainer/fp32_gemm_route.h"
#include "trainer/kernels/fused_ops.h"
#include "trainer/kernels/openblas.h"
#include "trainer/model/linear.h"

namespace ftb {
namespace {

// softmax_causal(q kᵀ) v on `route` and the gradients of q, k, v, from fixed inputs; q is
// the transposed view the model's heads give when `strided`.
std::vector<torch::Tensor> attention(Fp32Gemm route, int64_t T, bool strided) {
  setFp32Gemm(route);
  torch::manual_seed(3);
  const int64_t B = 2, H = 3, d = 8;
  torch::Tensor q0 = strided ? torch::randn({B, T, H, d}) : torch::randn({B, H, T, d});
  torch::Tensor k0 = torch::randn({B, H, T, d}), v0 = torch::randn({B, H, T, d});
  for (auto* t : {&q0, &k0, &v0}) t->requires_grad_(true);
  torch::Tensor q = strided ? q0.transpose(1, 2) : q0;
  torch::Tensor o = causalWeighted(fusedCausalSoftmax(causalScores(q, k0), torch::kFloat32), v0);
  (o * torch::linspace(-1, 1, d)).sum().backward();
  return {o.detach(), q0.grad(), k0.grad(), v0.grad()};
}

TEST(AttentionProducts, LowerBlockTriangleMatchesFullProducts) {
  if (!kernels::openblas()) GTEST_SKIP() << "libopenblas.so.0 does not load";
  RouteGuard guard;
  for (int64_t T : {int64_t(5), kCausalBlockRows, 2 * kCausalBlockRows + 44})
    for (bool strided : {false, true}) {
      auto ref = attention(Fp32Gemm::kAten, T, strided);
      auto got = attention(Fp32Gemm::kOpenBlas, T, strided);
      ASSERT_EQ(got[0].sizes(), ref[0].sizes());
      for (int i = 0; i < 4; ++i)
        EXPECT_LT(relErr(got[i], ref[i]), 1e-5)
            << "tensor " << i << " (o, gq, gk, gv), T " << T << ", strided " << strided;
    }
}

TEST(AttentionProducts, ScoresPastTheBlockDiagonalAreZero) {
  if (!kernels::openblas()) GTEST_SKIP() << "libopenblas.so.0 does not load";
  RouteGuard guard;
  setFp32Gemm(Fp32Gemm::kOpenBlas);
  const int64_t T = 2 * kCausalBlockRows + 3;
  torch::Tensor q = torch::randn({1, 2, T, 4}), k = torch::randn({1, 2, T, 4});
  torch::Tensor s = causalScores(q, k), full = torch::matmul(q, k.transpose(-2, -1));
  for (int64_t r : {int64_t(0), kCausalBlockRows - 1, kCausalBlockRows, T - 1}) {
    const int64_t e = std::min(T, (r / kCausalBlockRows + 1) * kCausalBlockRows);
    EXPECT_LT(relErr(s[0][1][r].narrow(0, 0, e), full[0][1][r].narrow(0, 0, e)), 1e-5) << r;
    if (e < T) {
      EXPECT_EQ(s[0][1][r].narrow(0, e, T - e).abs().max().item<float>(), 0.f) << r;
    }
  }
}

TEST(AttentionProducts, Bf16StaysOnAten) {
  RouteGuard guard;
  if (kernels::openblas()) setFp32Gemm(Fp32Gemm::kOpenBlas);
  torch::Tensor q = torch::randn({1, 2, 6, 4}).to(torch::kBFloat16);
  torch::Tensor k = torch::randn({1, 2, 6, 4}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(causalScores(q, k), torch::matmul(q, k.transpose(-2, -1))));
  torch::Tensor p = torch::rand({1, 2, 6, 6}).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(causalWeighted(p, k), torch::matmul(p, k)));
}

}  // namespace
}  // namespace ftb
