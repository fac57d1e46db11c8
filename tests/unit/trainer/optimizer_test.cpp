// Optimizers against hand-written references in double precision:
// - AdamW (Loshchilov & Hutter): m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
//   p <- p - lr wd p - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
// - Adafactor (Shazeer & Stern 2018): rho_t = 1 - t^-0.8, R = rho R + (1-rho) rowmean(g^2+e1),
//   C likewise over columns, V = outer(R, C) / mean(R), u = g / sqrt(V),
//   u <- u / max(1, RMS(u)), p <- p - lr wd p - lr u.
#include "trainer/optim/optimizer.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "trainer/kernels/tensor_runs.h"

namespace ftb {
namespace {

using Mat = std::vector<std::vector<double>>;

torch::Tensor fromMat(const Mat& m) {
  std::vector<float> flat;
  for (const auto& row : m)
    for (double v : row) flat.push_back(static_cast<float>(v));
  return torch::tensor(flat).view({static_cast<int64_t>(m.size()), -1});
}

Mat toMat(const torch::Tensor& t) {
  torch::Tensor d = t.to(torch::kFloat64).contiguous();
  if (d.dim() == 1) d = d.view({1, -1});
  Mat m(d.size(0), std::vector<double>(d.size(1)));
  auto a = d.accessor<double, 2>();
  for (int64_t i = 0; i < d.size(0); ++i)
    for (int64_t j = 0; j < d.size(1); ++j) m[i][j] = a[i][j];
  return m;
}

void expectNear(const torch::Tensor& got, const Mat& want, double tol, const char* what) {
  Mat g = toMat(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(g[i].size(), want[i].size()) << what;
    for (size_t j = 0; j < want[i].size(); ++j)
      EXPECT_NEAR(g[i][j], want[i][j], tol) << what << " [" << i << "][" << j << "]";
  }
}

// A parameter tensor (the optimizer updates it in place; gradients are passed to step()).
torch::Tensor paramTensor(const torch::Tensor& value) { return value.clone(); }

// ------------------------------------------------------------------------ AdamW

struct AdamRef {
  double lr, b1, b2, eps, wd;
  std::vector<double> p, m, v;
  int t = 0;
  void step(const std::vector<double>& g) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      double mhat = m[i] / (1 - std::pow(b1, t));
      double vhat = v[i] / (1 - std::pow(b2, t));
      p[i] = p[i] - lr * wd * p[i] - lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

TEST(AdamW, FirstStepClosedForm) {
  // Step 1: mhat = g, vhat = g^2, so the step is lr * g / (|g| + eps) after decay.
  torch::Tensor p = paramTensor(torch::tensor({0.5f, -1.0f, 2.0f, 0.25f}));
  torch::Tensor g = torch::tensor({0.1f, -0.2f, 0.0f, 3.0f});
  OptimizerOptions o;
  o.kind = "adamw";
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  auto opt = makeOptimizer({p}, o);
  opt->step({g}, 0.01);
  // 0.5 * (1 - 0.01*0.1) - 0.01 * 0.1 / (0.1 + 1e-8)
  EXPECT_NEAR(p[0].item<double>(), 0.4995 - 0.01 * 0.1 / (0.1 + 1e-8), 1e-7);
  EXPECT_NEAR(p[0].item<double>(), 0.489500001, 1e-7);
  EXPECT_NEAR(p[1].item<double>(), -0.999 + 0.01 * 0.2 / (0.2 + 1e-8), 1e-7);  // -0.989
  EXPECT_NEAR(p[2].item<double>(), 2.0 * 0.999, 1e-7);  // zero gradient: decay only
  EXPECT_NEAR(p[3].item<double>(), 0.25 * 0.999 - 0.01, 1e-7);
  EXPECT_EQ(opt->stateBytes(), 2 * 4 * 4);  // m and v, fp32
}

// The CPU update runs on the intra-op threads in fixed chunks of 65536 elements: one thread or
// four give the same bits, on a span that starts off any vector alignment and ends in a partial
// chunk, with and without the gradient zeroed in the same pass.
TEST(AdamW, ThreadCountDoesNotChangeTheBits) {
  const int64_t n = 3 * 65536 + 77;
  torch::manual_seed(7);
  const torch::Tensor p0 = torch::randn({n + 1}), g0 = torch::randn({n + 1});
  OptimizerOptions o;
  o.kind = "adamw";
  o.weight_decay = 0.1;
  const int threads = at::get_num_threads();
  auto twoSteps = [&](int t, bool zero_grads) {
    at::set_num_threads(t);
    torch::Tensor buf = p0.clone();
    torch::Tensor p = buf.narrow(0, 1, n);  // one float past the allocation's alignment
    auto opt = makeOptimizer({p}, o);
    for (int step = 0; step < 2; ++step) {
      torch::Tensor g = g0.narrow(0, 1, n).clone() * (step + 1);
      opt->step({g}, 1e-2, zero_grads);
      if (zero_grads) EXPECT_EQ(g.abs().max().item<float>(), 0.0f);
    }
    return p.detach().clone();
  };
  for (bool zero_grads : {false, true}) {
    const torch::Tensor one = twoSteps(1, zero_grads), four = twoSteps(4, zero_grads);
    EXPECT_TRUE(torch::equal(one, four)) << "zero_grads " << zero_grads;
    EXPECT_FALSE(torch::equal(one, p0.narrow(0, 1, n)));  // it did update
  }
  at::set_num_threads(threads);
}

TEST(AdamW, TwoStepsMatchReference) {
  std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25, -0.75, 1e-3};
  std::vector<double> g1 = {0.1, -0.2, 0.05, 3.0, -1e-3, 0.7};
  std::vector<double> g2 = {-0.3, -0.1, 0.05, 1.0, 2e-3, -0.7};
  auto asTensor = [](const std::vector<double>& v) {
    return torch::tensor(std::vector<float>(v.begin(), v.end()));
  };
  for (double wd : {0.0, 0.1}) {
    torch::Tensor p = paramTensor(asTensor(p0));
    OptimizerOptions o;
    o.beta1 = 0.9;
    o.beta2 = 0.95;
    o.eps = 1e-8;
    o.weight_decay = wd;
    auto opt = makeOptimizer({p}, o);
    AdamRef ref{0.02, 0.9, 0.95, 1e-8, wd, p0, std::vector<double>(6), std::vector<double>(6)};
    // The reference sees the fp32-rounded inputs the optimizer sees.
    for (double& x : ref.p) x = static_cast<float>(x);
    auto f32 = [](std::vector<double> v) {
      for (double& x : v) x = static_cast<float>(x);
      return v;
    };
    opt->step({asTensor(g1)}, 0.02);
    ref.step(f32(g1));
    expectNear(p.detach(), {ref.p}, 2e-7, "AdamW step 1");
    opt->step({asTensor(g2)}, 0.02);
    ref.step(f32(g2));
    expectNear(p.detach(), {ref.p}, 2e-7, "AdamW step 2");
    // Sanity on the data: the two-step update of element 0 is far from two sign-like
    // steps (2.0), so bias-corrected mixing of two different gradients is exercised.
    EXPECT_GT(std::abs((p0[0] - ref.p[0]) / 0.02 - 2.0), 0.1);
  }
}

// The kernel AdamW uses off the CPU (ATen's fused AdamW; it has a CPU kernel too): the
// same two steps as the reference, within its other rounding.
TEST(AdamW, AtenFusedKernelMatchesTheReference) {
  std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25, -0.75, 1e-3};
  std::vector<std::vector<double>> gs = {{0.1, -0.2, 0.05, 3.0, -1e-3, 0.7},
                                         {-0.3, -0.1, 0.05, 1.0, 2e-3, -0.7}};
  auto f32 = [](const std::vector<double>& v) {
    return torch::tensor(std::vector<float>(v.begin(), v.end()));
  };
  for (double wd : {0.0, 0.1}) {
    OptimizerOptions o;
    o.weight_decay = wd;
    torch::Tensor p = f32(p0), m = torch::zeros({6}), v = torch::zeros({6});
    AdamRef ref{
        0.02, o.beta1, o.beta2, o.eps, wd, {}, std::vector<double>(6), std::vector<double>(6)};
    for (double x : p0) ref.p.push_back(static_cast<float>(x));
    for (int t = 1; t <= 2; ++t) {
      std::vector<double> g;
      for (double x : gs[t - 1]) g.push_back(static_cast<float>(x));
      atenFusedAdamW({p}, {f32(g)}, {m}, {v}, t, 0.02, o);
      ref.step(g);
      expectNear(p, {ref.p}, 1e-6, "fused AdamW");
    }
  }
}

// One multi-tensor call over several tensors (AdamW's step off the CPU) gives each tensor the
// bits a call over that tensor alone gives: the kernel's arithmetic is per element.
TEST(AdamW, AtenFusedKernelOverManyTensorsEqualsOneTensorAtATime) {
  torch::manual_seed(3);
  OptimizerOptions o;
  o.weight_decay = 0.1;
  std::vector<torch::Tensor> p, g, m, v;
  for (int64_t n : {7, 1, 300, 65}) {
    p.push_back(torch::randn({n}));
    g.push_back(torch::randn({n}));
    m.push_back(torch::randn({n}) * 0.1);
    v.push_back(torch::rand({n}) * 0.1);
  }
  auto clones = [](const std::vector<torch::Tensor>& ts) {
    std::vector<torch::Tensor> c;
    for (const torch::Tensor& t : ts) c.push_back(t.clone());
    return c;
  };
  const std::vector<torch::Tensor> p0 = clones(p);
  std::vector<torch::Tensor> p1 = clones(p), m1 = clones(m), v1 = clones(v);
  for (int64_t t = 1; t <= 3; ++t) {
    atenFusedAdamW(p, g, m, v, t, 0.01, o);
    for (size_t i = 0; i < p.size(); ++i)
      atenFusedAdamW({p1[i]}, {g[i]}, {m1[i]}, {v1[i]}, t, 0.01, o);
  }
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(torch::equal(p[i], p1[i])) << "tensor " << i;
    EXPECT_TRUE(torch::equal(m[i], m1[i])) << "tensor " << i;
    EXPECT_TRUE(torch::equal(v[i], v1[i])) << "tensor " << i;
    EXPECT_FALSE(torch::equal(p[i], p0[i])) << "tensor " << i << " was not stepped";
  }
}

TEST(AdamW, SkipsParametersWithoutGradient) {
  torch::Tensor with = paramTensor(torch::ones({3}));
  torch::Tensor without = torch::full({2}, 3.0f);
  OptimizerOptions o;
  o.weight_decay = 0.5;
  auto opt = makeOptimizer({with, without}, o);
  opt->step({torch::full({3}, 0.5f), torch::Tensor()}, 0.1);
  EXPECT_TRUE(torch::equal(without.detach(), torch::full({2}, 3.0f)));  // not even decayed
  EXPECT_NEAR(with[0].item<double>(), 1.0 * (1 - 0.05) - 0.1 * 0.5 / (0.5 + 1e-8), 1e-7);
}

// ------------------------------------------------------------------------ Adafactor

struct AdafactorRef {
  Mat p, R = {}, C = {};  // R [rows], C [cols] stored as 1-row matrices
  int t = 0;
  double lastRms = 0;
  Mat lastV = {};
  void step(const Mat& g, double lr, double wd) {
    ++t;
    const double rho = 1.0 - std::pow(double(t), -0.8), e1 = 1e-30;
    size_t n = g.size(), m = g[0].size();
    if (R.empty()) {
      R.assign(1, std::vector<double>(n, 0.0));
      C.assign(1, std::vector<double>(m, 0.0));
    }
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      for (size_t j = 0; j < m; ++j) s += g[i][j] * g[i][j] + e1;
      R[0][i] = rho * R[0][i] + (1 - rho) * s / m;
    }
    for (size_t j = 0; j < m; ++j) {
      double s = 0;
      for (size_t i = 0; i < n; ++i) s += g[i][j] * g[i][j] + e1;
      C[0][j] = rho * C[0][j] + (1 - rho) * s / n;
    }
    double meanR = 0;
    for (double r : R[0]) meanR += r / n;
    Mat u(n, std::vector<double>(m));
    lastV.assign(n, std::vector<double>(m));
    double sq = 0;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < m; ++j) {
        lastV[i][j] = R[0][i] * C[0][j] / meanR;
        u[i][j] = g[i][j] / std::sqrt(lastV[i][j]);
        sq += u[i][j] * u[i][j];
      }
    lastRms = std::sqrt(sq / (n * m));
    double div = std::max(1.0, lastRms);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < m; ++j) p[i][j] = p[i][j] * (1 - lr * wd) - lr * u[i][j] / div;
  }
};

Mat roundF32(Mat m) {
  for (auto& r : m)
    for (double& x : r) x = static_cast<float>(x);
  return m;
}

TEST(Adafactor, FirstStepUsesRankOneSecondMoment) {
  // Not rank-1, so the factored estimate differs from g^2 and the test can tell.
  Mat g = roundF32({{0.1, -0.2, 0.3}, {0.4, 0.5, -0.6}});
  Mat p0 = roundF32({{1.0, 2.0, -1.0}, {0.5, -0.5, 0.0}});
  torch::Tensor p = paramTensor(fromMat(p0));
  OptimizerOptions o;
  o.kind = "adafactor";
  auto opt = makeOptimizer({p}, o);
  const double lr = 0.01;
  opt->step({fromMat(g)}, lr);

  // By hand, t = 1 so rho = 0: R = row means of g^2 = [0.14/3, 0.77/3],
  // C = column means = [0.17/2, 0.29/2, 0.45/2], mean(R) = 0.91/6.
  // V[0][0] = (0.14/3)(0.17/2) / (0.91/6) = 0.0238/0.91 = 0.026153846...
  AdafactorRef ref{p0};
  ref.step(g, lr, 0.0);
  // (Relative 1e-6: g holds the fp32 roundings of the decimal values.)
  EXPECT_NEAR(ref.lastV[0][0], 0.14 * 0.17 / 0.91, 1e-6 * ref.lastV[0][0]);
  EXPECT_NEAR(ref.lastV[1][2], 0.77 * 0.45 / 0.91, 1e-6 * ref.lastV[1][2]);
  EXPECT_GT(std::abs(ref.lastV[0][0] - 0.01), 1e-3);  // differs from g^2
  expectNear(p.detach(), ref.p, 1e-6, "Adafactor step 1");

  // The applied update u = (p0 - p1) / lr equals g / sqrt(outer(R,C)/mean(R)) / max(1, rms).
  Mat p1 = toMat(p.detach());
  double div = std::max(1.0, ref.lastRms), sq = 0;
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 3; ++j) {
      double u = (p0[i][j] - p1[i][j]) / lr;
      EXPECT_NEAR(u, g[i][j] / std::sqrt(ref.lastV[i][j]) / div, 2e-4) << i << "," << j;
      sq += u * u;
    }
  EXPECT_LE(std::sqrt(sq / 6), 1.0 + 1e-4);
  EXPECT_EQ(opt->stateBytes(), (2 + 3) * 4);  // factored: one row + one column vector
}

TEST(Adafactor, UpdateRmsClippedToOne) {
  // One large entry makes the rank-1 estimate tiny at [1][1]: unclipped RMS >> 1.
  Mat g = roundF32({{10.0, 0.01, 0.01}, {0.01, 0.01, 0.01}});
  Mat p0 = roundF32({{0.0, 0.0, 0.0}, {0.0, 0.0, 0.0}});
  torch::Tensor p = paramTensor(fromMat(p0));
  OptimizerOptions o;
  o.kind = "adafactor";
  o.weight_decay = 0.0;
  auto opt = makeOptimizer({p}, o);
  opt->step({fromMat(g)}, 1.0);
  AdafactorRef ref{p0};
  ref.step(g, 1.0, 0.0);
  ASSERT_GT(ref.lastRms, 100.0) << "test data no longer exercises the clip";
  Mat u = toMat(-p.detach());
  double sq = 0;
  for (auto& r : u)
    for (double x : r) sq += x * x;
  EXPECT_NEAR(std::sqrt(sq / 6), 1.0, 1e-5) << "update RMS must be clipped to exactly 1";
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 3; ++j) EXPECT_NEAR(u[i][j], -ref.p[i][j], 1e-5) << i << "," << j;
}

TEST(Adafactor, SecondStepAndWeightDecay) {
  Mat g1 = roundF32({{0.1, -0.2, 0.3}, {0.4, 0.5, -0.6}});
  Mat g2 = roundF32({{-0.3, 0.1, 0.2}, {0.05, -0.5, 0.6}});
  Mat p0 = roundF32({{1.0, 2.0, -1.0}, {0.5, -0.5, 0.25}});
  torch::Tensor p = paramTensor(fromMat(p0));
  OptimizerOptions o;
  o.kind = "adafactor";
  o.weight_decay = 0.1;
  auto opt = makeOptimizer({p}, o);
  AdafactorRef ref{p0};
  opt->step({fromMat(g1)}, 0.05);
  ref.step(g1, 0.05, 0.1);
  expectNear(p.detach(), ref.p, 1e-6, "Adafactor step 1");
  opt->step({fromMat(g2)}, 0.05);
  ref.step(g2, 0.05, 0.1);  // rho_2 = 1 - 2^-0.8 = 0.4257...
  expectNear(p.detach(), ref.p, 1e-6, "Adafactor step 2");
}

TEST(Adafactor, OneDimensionalParameterUnfactored) {
  // 1-D: V = g^2 + e1 at step 1, so u = g / |g| = sign(g) (RMS 1, no clip); zero stays zero.
  torch::Tensor p = paramTensor(torch::tensor({1.0f, 1.0f, 1.0f, 1.0f}));
  OptimizerOptions o;
  o.kind = "adafactor";
  auto opt = makeOptimizer({p}, o);
  opt->step({torch::tensor({0.3f, -2.0f, 0.0f, 1e-3f})}, 0.1);
  expectNear(p.detach(), {{0.9, 1.1, 1.0, 0.9}}, 1e-6, "Adafactor 1-D");
  EXPECT_EQ(opt->stateBytes(), 4 * 4);
}

TEST(GradUtils, SquaredNormAndScale) {
  // An undefined gradient is ignored.
  std::vector<torch::Tensor> gs = {torch::tensor({3.0f, 4.0f}), torch::tensor({12.0f}),
                                   torch::Tensor()};
  EXPECT_DOUBLE_EQ(gradSquaredNorm(gs), 9.0 + 16.0 + 144.0);
  // Per-element weights (e.g. 1/tp for replicated parameters); undefined = ones.
  std::vector<torch::Tensor> ws = {torch::tensor({0.5f, 0.25f}), torch::Tensor(), torch::Tensor()};
  EXPECT_DOUBLE_EQ(gradSquaredNorm(gs, ws), 9.0 * 0.5 + 16.0 * 0.25 + 144.0);
  scaleGrads(gs, 0.5);
  EXPECT_DOUBLE_EQ(gradSquaredNorm(gs), (9.0 + 16.0 + 144.0) / 4);
  EXPECT_TRUE(torch::equal(gs[0], torch::tensor({1.5f, 2.0f})));
  EXPECT_FALSE(gs[2].defined());
}

// A DDP bucket's norm is exact to fp64 rounding whatever the bucketing: an fp32 reduction
// of these 350 K gradients (the tiny model with 4 blocks) was off by 1.2e-5 relative, so a
// layout with one bucket and one with a bucket per pipeline stage reported norms 1e-5 apart.
TEST(GradUtils, SquaredNormOfALargeBucketIsExactInFp64) {
  torch::manual_seed(0);
  torch::Tensor g =
      (torch::randn({350000}) * torch::rand({350000}).pow(4) * 1e-2).to(torch::kFloat32);
  const double exact = g.to(torch::kFloat64).pow(2).sum().item<double>();
  EXPECT_NEAR(gradSquaredNorm({g}), exact, 1e-12 * exact);
  std::vector<torch::Tensor> parts = g.split(90000);
  EXPECT_NEAR(
      gradSquaredNorm({parts[0].clone(), parts[1].clone(), parts[2].clone(), parts[3].clone()}),
      exact, 1e-12 * exact);
}

// The norm of gradients off the CPU (one _foreach_norm, fp32 per tensor, fp64 across them),
// checked where it also runs, on the CPU: within fp32 reduction error of the fp64 sum, for
// fp32 and bf16 gradients, one of them empty.
TEST(GradUtils, ForeachSquaredNormMatchesTheFp64Sum) {
  torch::manual_seed(1);
  std::vector<torch::Tensor> gs = {torch::randn({350000}) * 1e-2, torch::randn({3, 5}),
                                   torch::zeros({0}), torch::randn({4096}).to(torch::kBFloat16)};
  double exact = 0;
  for (const torch::Tensor& g : gs) exact += g.to(torch::kFloat64).pow(2).sum().item<double>();
  EXPECT_NEAR(foreachSquaredNorm(gs), exact, 1e-5 * exact);  // measured 1.1e-6 here
  EXPECT_EQ(foreachSquaredNorm({}), 0.0);
}

}  // namespace
}  // namespace ftb
