// The fused RMSNorm and RoPE kernels (trainer/model/fused_ops.h) against the ATen
// composition they replace, forward and backward, in fp32 and bf16 (llm.c's habit: the
// fast version checked against a plain reference). Also: the result does not depend
// on the number of intra-op threads, and non-contiguous inputs (the transposed q/k
// views the model passes) give the same result as contiguous ones.
#include "trainer/model/fused_ops.h"

#include <gtest/gtest.h>

#include <ATen/Parallel.h>

namespace ftb {
namespace {

torch::Tensor refRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps,
                         torch::ScalarType out) {
  torch::Tensor xf = x.to(torch::kFloat32);
  torch::Tensor y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (y * w.to(torch::kFloat32)).to(out);
}

torch::Tensor refRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                      double scale) {
  int64_t T = x.size(2), half = x.size(3) / 2;
  torch::Tensor xf = x.to(torch::kFloat32);
  torch::Tensor c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);
  torch::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
  return (torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1) * scale).to(x.scalar_type());
}

double relErr(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  return ((a64 - b64).abs().max() / b64.abs().max().clamp_min(1e-30)).item<double>();
}

struct Result {
  torch::Tensor y;
  std::vector<torch::Tensor> grads;
};

// y = f(inputs), then y.backward(gy); the inputs' gradients.
template <typename F>
Result run(F f, std::vector<torch::Tensor> inputs, const torch::Tensor& gy) {
  for (auto& t : inputs) t = t.detach().clone().requires_grad_(true);
  torch::Tensor y = f(inputs);
  y.backward(gy.to(y.scalar_type()));
  Result r{y.detach(), {}};
  for (auto& t : inputs) r.grads.push_back(t.grad());
  return r;
}

TEST(FusedOps, RmsNormMatchesTheAtenCompositionInFp32AndBf16) {
  torch::manual_seed(1);
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor x = torch::randn({3, 37, 80}).to(dt), w = torch::randn({80}) * 0.5 + 1;
    torch::Tensor gy = torch::randn({3, 37, 80});
    auto fused = run([&](auto& in) { return fusedRmsNorm(in[0], in[1], 1e-5, dt); }, {x, w}, gy);
    auto ref = run([&](auto& in) { return refRmsNorm(in[0], in[1], 1e-5, dt); }, {x, w}, gy);
    const double tol = dt == torch::kFloat32 ? 1e-5 : 1e-2;  // bf16: one rounding apart
    EXPECT_EQ(fused.y.scalar_type(), dt);
    EXPECT_LT(relErr(fused.y, ref.y), tol) << dt;
    EXPECT_EQ(fused.grads[0].scalar_type(), dt);
    EXPECT_LT(relErr(fused.grads[0], ref.grads[0]), tol) << "dx " << dt;
    EXPECT_EQ(fused.grads[1].scalar_type(), torch::kFloat32);
    EXPECT_LT(relErr(fused.grads[1], ref.grads[1]), tol) << "dw " << dt;
  }
}

TEST(FusedOps, RmsNormBf16WeightGetsABf16Gradient) {  // ZeRO-3 gathers weights in bf16
  torch::Tensor x = torch::randn({4, 64}).to(torch::kBFloat16);
  torch::Tensor w = torch::ones({64}).to(torch::kBFloat16);
  auto r = run([&](auto& in) { return fusedRmsNorm(in[0], in[1], 1e-6, torch::kBFloat16); },
               {x, w}, torch::randn({4, 64}));
  EXPECT_EQ(r.grads[1].scalar_type(), torch::kBFloat16);
}

TEST(FusedOps, RopeMatchesTheAtenCompositionOnTransposedViews) {
  torch::manual_seed(2);
  const int64_t B = 2, T = 9, H = 3, hd = 16;
  torch::Tensor cos = torch::rand({12, hd / 2}), sin = torch::rand({12, hd / 2});
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor base = torch::randn({B, T, H, hd}).to(dt);
    torch::Tensor gy = torch::randn({B, H, T, hd});
    // The model's q: a [B,T,H,hd] projection viewed as [B,H,T,hd] (not contiguous).
    auto f = [&](auto& in) { return fusedRope(in[0].transpose(1, 2), cos, sin, 0.25); };
    auto g = [&](auto& in) { return refRope(in[0].transpose(1, 2), cos, sin, 0.25); };
    auto fused = run(f, {base}, gy), ref = run(g, {base}, gy);
    const double tol = dt == torch::kFloat32 ? 1e-6 : 1e-2;
    EXPECT_TRUE(fused.y.is_contiguous());
    EXPECT_LT(relErr(fused.y, ref.y), tol) << dt;
    EXPECT_LT(relErr(fused.grads[0], ref.grads[0]), tol) << "dx " << dt;
  }
}

TEST(FusedOps, ResultsDoNotDependOnTheThreadCount) {
  torch::manual_seed(3);
  torch::Tensor x = torch::randn({300, 96}), w = torch::randn({96});
  torch::Tensor gy = torch::randn({300, 96});
  torch::Tensor q = torch::randn({2, 4, 50, 32}), cos = torch::rand({50, 16}), sin = torch::rand({50, 16});
  auto once = [&] {
    auto n = run([&](auto& in) { return fusedRmsNorm(in[0], in[1], 1e-5, torch::kFloat32); },
                 {x, w}, gy);
    auto r = run([&](auto& in) { return fusedRope(in[0], cos, sin, 1.0); }, {q}, q);
    return std::vector<torch::Tensor>{n.y, n.grads[0], n.grads[1], r.y, r.grads[0]};
  };
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  auto one = once();
  at::set_num_threads(2);
  auto two = once();
  at::set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << i;
}

}  // namespace
}  // namespace ftb
