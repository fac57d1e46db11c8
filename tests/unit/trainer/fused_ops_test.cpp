// The fused RMSNorm, RoPE, causal-softmax and SwiGLU kernels (trainer/kernels/fused_ops.h)
// against the ATen composition they replace (the form a GPU runs), forward and backward, in fp32
// and bf16 (llm.c's habit: the fast version checked against a plain reference). Also: the result
// does not depend on the number of intra-op threads, and non-contiguous inputs (the transposed q/k
// views the model passes) give the same result as contiguous ones.
#include "trainer/kernels/fused_ops.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <limits>

namespace ftb {
namespace {

// The references are the composed forms the GPU runs (fused_ops.h, namespace composed).

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
    auto ref = run([&](auto& in) { return composed::rmsNorm(in[0], in[1], 1e-5, dt); }, {x, w}, gy);
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
  auto r = run([&](auto& in) { return fusedRmsNorm(in[0], in[1], 1e-6, torch::kBFloat16); }, {x, w},
               torch::randn({4, 64}));
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
    auto g = [&](auto& in) { return composed::rope(in[0].transpose(1, 2), cos, sin, 0.25); };
    auto fused = run(f, {base}, gy), ref = run(g, {base}, gy);
    const double tol = dt == torch::kFloat32 ? 1e-6 : 1e-2;
    EXPECT_TRUE(fused.y.is_contiguous());
    EXPECT_LT(relErr(fused.y, ref.y), tol) << dt;
    EXPECT_LT(relErr(fused.grads[0], ref.grads[0]), tol) << "dx " << dt;
  }
}

TEST(FusedOps, CausalSoftmaxMatchesMaskPlusSoftmaxAndZeroesTheMaskedHalf) {
  torch::manual_seed(4);
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor s = (torch::randn({2, 3, 33, 33}) * 4).to(dt), gy = torch::randn({2, 3, 33, 33});
    auto fused = run([&](auto& in) { return fusedCausalSoftmax(in[0], dt); }, {s}, gy);
    auto ref = run([&](auto& in) { return composed::causalSoftmax(in[0], dt); }, {s}, gy);
    const double tol = dt == torch::kFloat32 ? 1e-5 : 1e-2;
    EXPECT_LT(relErr(fused.y, ref.y), tol) << dt;
    EXPECT_LT(relErr(fused.grads[0], ref.grads[0]), tol) << "ds " << dt;
    torch::Tensor upper = torch::ones({33, 33}, torch::kBool).triu(1);
    EXPECT_EQ(fused.y.masked_select(upper).abs().max().item<float>(), 0.0f);
    EXPECT_EQ(fused.grads[0].masked_select(upper).abs().max().item<float>(), 0.0f);
    torch::Tensor rows = fused.y.to(torch::kFloat32).sum(-1);
    EXPECT_LT((rows - 1).abs().max().item<float>(), dt == torch::kFloat32 ? 1e-6 : 2e-2);
  }
}

TEST(FusedOps, SwiGluMatchesSiluTimesGateOverTheWholeRange) {
  torch::manual_seed(5);
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    // Beyond the exp clamp on both sides too (|a| up to ~120).
    torch::Tensor a = (torch::randn({5, 4099}) * 30).to(dt), b = torch::randn({5, 4099}).to(dt);
    torch::Tensor gy = torch::randn({5, 4099});
    auto fused = run([&](auto& in) { return fusedSwiGlu(in[0], in[1]); }, {a, b}, gy);
    auto ref = run([&](auto& in) { return composed::swiGlu(in[0], in[1]); }, {a, b}, gy);
    const double tol = dt == torch::kFloat32 ? 1e-5 : 1e-2;
    EXPECT_LT(relErr(fused.y, ref.y), tol) << dt;
    EXPECT_LT(relErr(fused.grads[0], ref.grads[0]), tol) << "da " << dt;
    EXPECT_LT(relErr(fused.grads[1], ref.grads[1]), tol) << "db " << dt;
  }
}

// A bf16 kernel reads its rows as fp32 and rounds its results back as c10 does: the fused
// SwiGLU of bf16 inputs equals the fp32 kernel on the widened inputs, rounded by ATen's
// .to(bf16), bit for bit, infinities included (sizes not a multiple of a vector).
TEST(FusedOps, Bf16RowsConvertExactlyAsAtenDoes) {
  torch::manual_seed(9);
  torch::Tensor a = (torch::randn({3, 1031}) * 4).to(torch::kBFloat16);
  torch::Tensor b = torch::randn({3, 1031}).to(torch::kBFloat16);
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  b.index_put_({0, torch::indexing::Slice(0, 4)}, torch::tensor({nan, inf, -inf, 3.0e38f}));
  torch::NoGradGuard no_grad;
  torch::Tensor got = fusedSwiGlu(a, b);
  torch::Tensor want =
      fusedSwiGlu(a.to(torch::kFloat32), b.to(torch::kFloat32)).to(torch::kBFloat16);
  ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
  // NaN stays NaN (ATen's vectorised rounding keeps the payload, c10's scalar one gives
  // 0x7FC0: both NaN); every other value bit for bit.
  EXPECT_TRUE(torch::equal(got.isnan(), want.isnan()));
  torch::Tensor num = want.isnan().logical_not();
  EXPECT_TRUE(torch::equal(got.view(torch::kInt16).masked_select(num),
                           want.view(torch::kInt16).masked_select(num)));
}

TEST(FusedOps, CrossEntropyMatchesLogSoftmaxNllAndChecksTargets) {
  torch::manual_seed(6);
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor logits = (torch::randn({7, 1001}) * 5).to(dt);
    torch::Tensor targets = torch::randint(0, 1001, {7}, torch::kInt64);
    torch::Tensor gy = torch::rand({7});
    auto fused = run([&](auto& in) { return fusedCrossEntropy(in[0], targets); }, {logits}, gy);
    auto ref = run(
        [&](auto& in) {
          return torch::nll_loss(torch::log_softmax(in[0].to(torch::kFloat32), -1), targets, {},
                                 at::Reduction::None);
        },
        {logits}, gy);
    auto comp = run([&](auto& in) { return composed::crossEntropy(in[0], targets); }, {logits}, gy);
    const double tol = dt == torch::kFloat32 ? 1e-5 : 1e-2;
    EXPECT_LT(relErr(fused.y, ref.y), 1e-5) << dt;  // fp32 statistics either way
    EXPECT_LT(relErr(comp.y, ref.y), 1e-5) << dt;
    EXPECT_LT(relErr(comp.grads[0], ref.grads[0]), tol) << "composed dlogits " << dt;
    EXPECT_EQ(fused.grads[0].scalar_type(), dt);
    EXPECT_LT(relErr(fused.grads[0], ref.grads[0]), tol) << "dlogits " << dt;
  }
  torch::Tensor bad = torch::tensor({0, 1001}, torch::kInt64);
  EXPECT_THROW(fusedCrossEntropy(torch::zeros({2, 1001}), bad), c10::Error);
}

// fp64 input (trainer logits --dtype fp64) is computed in fp64 throughout: each entry point
// equals the fp64 formula within fp64 rounding, far below what fp32 statistics would leave.
TEST(FusedOps, Fp64InputIsComputedInFp64) {
  torch::manual_seed(8);
  const auto f64 = torch::kFloat64;
  torch::Tensor x = torch::randn({2, 5, 64}, f64), w = torch::randn({64}, f64) * 0.5 + 1;
  torch::Tensor rms = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * w;
  EXPECT_LT(relErr(fusedRmsNorm(x, w, 1e-5, f64), rms), 1e-14);
  torch::Tensor a = torch::randn({4, 33}, f64), b = torch::randn({4, 33}, f64);
  EXPECT_LT(relErr(fusedSwiGlu(a, b), torch::silu(a) * b), 1e-14);
  torch::Tensor logits = torch::randn({7, 301}, f64) * 5;
  torch::Tensor targets = torch::randint(0, 301, {7}, torch::kInt64);
  torch::Tensor ce = -torch::log_softmax(logits, -1).gather(1, targets.unsqueeze(1)).squeeze(1);
  EXPECT_LT(relErr(fusedCrossEntropy(logits, targets), ce), 1e-14);
  torch::Tensor q = torch::randn({1, 2, 6, 8}, f64);
  torch::Tensor ang = torch::outer(torch::arange(6, f64), torch::rand({4}, f64));
  torch::Tensor x1 = q.narrow(-1, 0, 4), x2 = q.narrow(-1, 4, 4);
  torch::Tensor rope =
      torch::cat({x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin()}, -1);
  EXPECT_LT(relErr(fusedRope(q, ang.cos(), ang.sin(), 1.0), rope), 1e-14);
  EXPECT_EQ(fusedRmsNorm(x, w, 1e-5, f64).scalar_type(), f64);
}

TEST(FusedOps, ResultsDoNotDependOnTheThreadCount) {
  torch::manual_seed(3);
  torch::Tensor x = torch::randn({300, 96}), w = torch::randn({96});
  torch::Tensor gy = torch::randn({300, 96});
  torch::Tensor q = torch::randn({2, 4, 50, 32}), cos = torch::rand({50, 16}),
                sin = torch::rand({50, 16});
  torch::Tensor sc = torch::randn({2, 4, 50, 50});
  torch::Tensor tg = torch::randint(0, 96, {300}, torch::kInt64);
  auto once = [&] {
    auto n = run([&](auto& in) { return fusedRmsNorm(in[0], in[1], 1e-5, torch::kFloat32); },
                 {x, w}, gy);
    auto r = run([&](auto& in) { return fusedRope(in[0], cos, sin, 1.0); }, {q}, q);
    auto s = run([&](auto& in) { return fusedCausalSoftmax(in[0], torch::kFloat32); }, {sc}, sc);
    auto g = run([&](auto& in) { return fusedSwiGlu(in[0], in[1]); }, {x, gy}, x);
    auto c = run([&](auto& in) { return fusedCrossEntropy(in[0], tg); }, {x}, x.select(1, 0));
    return std::vector<torch::Tensor>{n.y, n.grads[0], n.grads[1], r.y, r.grads[0], s.y, s.grads[0],
                                      g.y, g.grads[0], g.grads[1], c.y, c.grads[0]};
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
