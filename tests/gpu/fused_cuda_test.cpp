// The hand-written CUDA kernels of trainer/kernels/fused_cuda.h against the composed ATen forms
// of trainer/kernels/fused_ops.h (namespace composed: ATen's own CUDA kernels, differentiated by
// autograd), forward and backward, fp32 (1e-5 of the reference's largest magnitude) and bf16
// (1e-2), on odd shapes, strided inputs and the vocabulary sizes of real models; the same call
// twice gives the same bits. Without a GPU every test skips (FTB_REQUIRE_GPU=1 makes that a
// failure: scripts/gpu_check.sh sets it). tests/gpu/README.md says how to run it.
#include "trainer/kernels/fused_cuda.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "trainer/kernels/fused_ops.h"

namespace ftb {
namespace {

class FusedCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (torch::cuda::is_available()) return;
    const char* require = getenv("FTB_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1")
      FAIL() << "FTB_REQUIRE_GPU=1 but torch::cuda::is_available() is false";
    GTEST_SKIP() << "no CUDA device (torch::cuda::is_available() is false): nothing to check";
  }
};

torch::Tensor onGpu(const torch::Tensor& t) { return t.to(torch::Device(torch::kCUDA, 0)); }

// max |got - want| / max |want|, in fp64 on the host.
double relErr(const torch::Tensor& got, const torch::Tensor& want) {
  torch::Tensor a = got.to(torch::kCPU, torch::kFloat64), b = want.to(torch::kCPU, torch::kFloat64);
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

double tolOf(torch::ScalarType dt) { return dt == torch::kFloat32 ? 1e-5 : 1e-2; }

struct Result {
  torch::Tensor y;
  std::vector<torch::Tensor> grads;
};

// y = f(leaves) for fresh leaves copied from `inputs`, and the gradients of <y, gy> with
// respect to them (torch::autograd::grad).
template <typename F>
Result run(const F& f, std::vector<torch::Tensor> inputs, const torch::Tensor& gy) {
  for (auto& t : inputs) t = t.detach().clone().requires_grad_(true);
  torch::Tensor y = f(inputs);
  std::vector<torch::Tensor> grads = torch::autograd::grad({y}, inputs, {gy.to(y.scalar_type())});
  return {y.detach(), grads};
}

// The fused result equals the reference within `tols` (one per output: y, then each gradient),
// with the same dtypes.
void expectClose(const Result& got, const Result& want, const std::vector<double>& tols,
                 const std::string& what) {
  ASSERT_EQ(got.grads.size() + 1, tols.size()) << what;
  EXPECT_EQ(got.y.scalar_type(), want.y.scalar_type()) << what;
  EXPECT_EQ(got.y.sizes(), want.y.sizes()) << what;
  EXPECT_LT(relErr(got.y, want.y), tols[0]) << "forward, " << what;
  for (size_t i = 0; i < got.grads.size(); ++i) {
    EXPECT_EQ(got.grads[i].scalar_type(), want.grads[i].scalar_type())
        << "grad " << i << ", " << what;
    EXPECT_LT(relErr(got.grads[i], want.grads[i]), tols[i + 1]) << "grad " << i << ", " << what;
  }
}

// Two runs give the same bits, forward and backward.
void expectSameBits(const Result& a, const Result& b, const std::string& what) {
  EXPECT_TRUE(torch::equal(a.y, b.y)) << "forward, " << what;
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(torch::equal(a.grads[i], b.grads[i])) << "grad " << i << ", " << what;
}

std::string describe(at::IntArrayRef sizes, torch::ScalarType dt) {
  return c10::str(sizes, " ", dt);
}

// ---- RMSNorm ---------------------------------------------------------------------

struct NormCase {
  std::vector<int64_t> shape;  // x [..., D]
  torch::ScalarType x, w, out;
};

TEST_F(FusedCuda, RmsNormMatchesTheComposedForm) {
  torch::manual_seed(1);
  const auto f32 = torch::kFloat32, bf16 = torch::kBFloat16;
  // Rows below one weight-gradient chunk (8), several chunks with a partial one, over 8192
  // rows (chunks of more than 8 rows); D not a multiple of 32 or 128, and a real width.
  const std::vector<NormCase> cases = {
      {{5, 7}, f32, f32, f32},       {{3, 37, 80}, f32, f32, f32},
      {{77, 1000}, bf16, f32, bf16}, {{2, 300, 4100}, bf16, bf16, bf16},
      {{1100, 4096}, f32, f32, f32}, {{1100, 4096}, bf16, f32, f32},
      {{40000, 72}, f32, bf16, f32}, {{40000, 72}, bf16, bf16, bf16},
      {{40007, 72}, f32, f32, f32},  // chunks of more than 8 rows, a partial last one, fp32
      {{64, 2048}, f32, f32, bf16}};
  for (const auto& c : cases) {
    torch::Tensor x = onGpu(torch::randn(c.shape)).to(c.x);
    torch::Tensor w = onGpu(torch::randn({c.shape.back()}) * 0.5 + 1).to(c.w);
    torch::Tensor gy = onGpu(torch::randn(c.shape)).to(c.out);
    auto fused = [&](auto& in) { return cuda_fused::rmsNorm(in[0], in[1], 1e-5, c.out); };
    auto ref = [&](auto& in) { return composed::rmsNorm(in[0], in[1], 1e-5, c.out); };
    const std::string what = c10::str("x ", describe(c.shape, c.x), ", w ", c.w, ", out ", c.out);
    const Result got = run(fused, {x, w}, gy);
    expectClose(got, run(ref, {x, w}, gy), {tolOf(c.out), tolOf(c.x), tolOf(c.w)}, what);
    expectSameBits(got, run(fused, {x, w}, gy), what);
  }
}

// ---- RoPE ------------------------------------------------------------------------

// Tables of real rotary angles: cos/sin(t * theta^(-2i/hd)), fp32 [rows, hd/2].
std::pair<torch::Tensor, torch::Tensor> ropeTables(int64_t rows, int64_t hd) {
  torch::Tensor inv = torch::pow(10000.0, -torch::arange(0, hd / 2, torch::kFloat64) * 2 / hd);
  torch::Tensor ang = torch::outer(torch::arange(rows, torch::kFloat64), inv).to(torch::kFloat32);
  return {onGpu(ang.cos()), onGpu(ang.sin())};
}

struct RopeCase {
  std::vector<int64_t> base;  // the leaf's shape; `view` makes x [B, H, T, hd] of it
  std::function<torch::Tensor(const torch::Tensor&)> view;
  int64_t table_rows;
  double scale;
  bool strided_grad;  // the upstream gradient a transposed view
};

TEST_F(FusedCuda, RopeMatchesTheComposedFormOnStridedViews) {
  torch::manual_seed(2);
  const std::vector<RopeCase> cases = {
      // the model's q: a [B, T, H, hd] projection viewed as [B, H, T, hd]
      {{2, 9, 3, 16}, [](const torch::Tensor& t) { return t.transpose(1, 2); }, 12, 0.25, false},
      // every other element of the last dimension (stride 2), rows of 2*hd apart
      {{1, 4, 33, 256},
       [](const torch::Tensor& t) { return t.slice(3, 0, 256, 2); },
       33,
       1.0,
       true},
      // half = 3, contiguous, tables exactly T long
      {{3, 5, 7, 6}, [](const torch::Tensor& t) { return t; }, 7, 0.5, true},
      // a real head size over many rows, a narrowed last dimension (gaps between rows)
      {{2, 8, 300, 160},
       [](const torch::Tensor& t) { return t.narrow(3, 16, 128); },
       4096,
       0.125,
       false}};
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& c : cases) {
      torch::Tensor base = onGpu(torch::randn(c.base)).to(dt);
      const torch::Tensor x0 = c.view(base);
      const auto tables = ropeTables(c.table_rows, x0.size(3));
      const torch::Tensor &cos = tables.first, &sin = tables.second;
      torch::Tensor gy = onGpu(torch::randn(x0.sizes())).to(dt);
      if (c.strided_grad) gy = gy.transpose(0, 3).contiguous().transpose(0, 3);
      auto fused = [&](auto& in) { return cuda_fused::rope(c.view(in[0]), cos, sin, c.scale); };
      auto ref = [&](auto& in) { return composed::rope(c.view(in[0]), cos, sin, c.scale); };
      const std::string what = c10::str("x ", describe(x0.sizes(), dt), " strides ", x0.strides());
      const Result got = run(fused, {base}, gy);
      EXPECT_TRUE(got.y.is_contiguous()) << what;
      expectClose(got, run(ref, {base}, gy), {tolOf(dt), tolOf(dt)}, what);
      expectSameBits(got, run(fused, {base}, gy), what);
    }
  }
}

// ---- SwiGLU ----------------------------------------------------------------------

TEST_F(FusedCuda, SwiGluMatchesTheComposedFormAlignedOrNot) {
  torch::manual_seed(3);
  using View = std::function<torch::Tensor(const torch::Tensor&)>;
  const View same = [](const torch::Tensor& t) { return t; };
  // One element in: contiguous but 4 (fp32) or 2 (bf16) bytes off 16-byte alignment.
  const View offset = [](const torch::Tensor& t) { return t.narrow(0, 1, t.size(0) - 1); };
  const View transposed = [](const torch::Tensor& t) { return t.t(); };
  const std::vector<std::pair<std::vector<int64_t>, View>> cases = {
      {{7}, same},       {{3, 1001}, same}, {{4, 2, 4099}, same},
      {{2, 8192}, same}, {{4097}, offset},  {{1000, 37}, transposed}};
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& [shape, view_of] : cases) {
      const View& view = view_of;  // a lambda may not capture a structured binding (C++17)
      torch::Tensor a = onGpu(torch::randn(shape) * 3).to(dt),
                    b = onGpu(torch::randn(shape)).to(dt);
      torch::Tensor gy = onGpu(torch::randn(view(a).sizes())).to(dt);
      auto fused = [&](auto& in) { return cuda_fused::swiGlu(view(in[0]), view(in[1])); };
      auto ref = [&](auto& in) { return composed::swiGlu(view(in[0]), view(in[1])); };
      const std::string what = describe(view(a).sizes(), dt);
      const Result got = run(fused, {a, b}, gy);
      expectClose(got, run(ref, {a, b}, gy), {tolOf(dt), tolOf(dt), tolOf(dt)}, what);
      expectSameBits(got, run(fused, {a, b}, gy), what);
    }
  }
}

// ---- cross-entropy ---------------------------------------------------------------

// Targets in [0, V), the first 0 and the last V - 1.
torch::Tensor targetsFor(int64_t n, int64_t V, torch::ScalarType dt) {
  torch::Tensor t = torch::randint(0, V, {n}, torch::kInt64);
  t[0] = 0;
  t[n - 1] = V - 1;
  return t.to(dt);
}

TEST_F(FusedCuda, CrossEntropyMatchesTheComposedForm) {
  torch::manual_seed(4);
  // Small vocabularies, 50000, GPT-2's (odd) and Llama 3's; odd row counts take int32 targets.
  const std::vector<std::pair<int64_t, int64_t>> sizes = {
      {1, 10}, {3, 1000}, {300, 1000}, {37, 50000}, {9, 50257}, {5, 128256}, {64, 128256}};
  for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& [n, V] : sizes) {
      torch::Tensor logits = onGpu(torch::randn({n, V}) * 3).to(dt);
      torch::Tensor tg = onGpu(targetsFor(n, V, n % 2 ? torch::kInt32 : torch::kInt64));
      torch::Tensor gy = onGpu(torch::randn({n}));
      auto fused = [&](auto& in) { return cuda_fused::crossEntropy(in[0], tg); };
      auto ref = [&](auto& in) { return composed::crossEntropy(in[0], tg); };
      const std::string what = c10::str("logits [", n, ", ", V, "] ", dt);
      const Result got = run(fused, {logits}, gy);
      EXPECT_EQ(got.y.scalar_type(), torch::kFloat32) << what;
      expectClose(got, run(ref, {logits}, gy), {1e-5, tolOf(dt)}, what);
      expectSameBits(got, run(fused, {logits}, gy), what);
    }
  }
}

// A masked vocabulary (-inf logits, never the target) and a row of +inf: the same losses and
// gradients as ATen's logsumexp, non-finite where ATen's are.
TEST_F(FusedCuda, CrossEntropyWithInfiniteLogits) {
  torch::manual_seed(5);
  const int64_t n = 4, V = 5000;
  torch::Tensor z = torch::randn({n, V});
  torch::Tensor tg = torch::tensor({0, 1, 2, 3}, torch::kInt64);
  z.narrow(1, 100, V - 100).fill_(-std::numeric_limits<float>::infinity());  // masked tail
  z[3][7] = std::numeric_limits<float>::infinity();
  z[3][4000] = std::numeric_limits<float>::infinity();  // two +inf in one row
  torch::Tensor got = cuda_fused::crossEntropy(onGpu(z), onGpu(tg)).cpu();
  torch::Tensor ref = composed::crossEntropy(z, tg);
  EXPECT_TRUE(torch::allclose(got.narrow(0, 0, 3), ref.narrow(0, 0, 3), 1e-5, 1e-5)) << got << ref;
  EXPECT_FALSE(std::isfinite(got[3].item<float>())) << got;  // ATen: inf - (-inf or finite)
  EXPECT_EQ(std::isnan(got[3].item<float>()), std::isnan(ref[3].item<float>())) << got << ref;
}

TEST_F(FusedCuda, CrossEntropyTargetsOutsideTheVocabulary) {
  const int64_t n = 6, V = 1000;
  torch::Tensor logits = onGpu(torch::randn({n, V}));
  torch::Tensor tg = targetsFor(n, V, torch::kInt64);
  tg[2] = V;  // one past the end
  tg[4] = -1;
  // On the host: an error naming the first bad row, before anything runs.
  try {
    cuda_fused::crossEntropy(logits, tg);
    ADD_FAILURE() << "no error for host targets outside [0, V)";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 1000 of row 2"), std::string::npos) << e.what();
  }
  // On the device: no sync, no device assert; those rows' nll and gradients are NaN.
  torch::Tensor x = logits.clone().requires_grad_(true);
  torch::Tensor nll = cuda_fused::crossEntropy(x, onGpu(tg));
  torch::Tensor g = torch::autograd::grad({nll}, {x}, {onGpu(torch::ones({n}))})[0].cpu();
  torch::Tensor bad = torch::tensor({false, false, true, false, true, false});
  EXPECT_TRUE(torch::equal(nll.detach().cpu().isnan(), bad)) << nll;
  EXPECT_TRUE(torch::equal(g.isnan().all(1), bad));
  EXPECT_FALSE(g.isnan().any(1).masked_select(~bad).any().item<bool>());
  torch::Tensor ok = torch::tensor({0, 1, 3, 5});
  torch::Tensor want =
      composed::crossEntropy(logits.cpu().index_select(0, ok), tg.index_select(0, ok));
  EXPECT_LT(relErr(nll.detach().cpu().index_select(0, ok), want), 1e-5);
}

// ---- contracts -------------------------------------------------------------------

TEST_F(FusedCuda, IsAvailableAndRefusesTensorsItCannotRun) {
  EXPECT_TRUE(cuda_fused::available());
  torch::Tensor x = torch::randn({4, 8});
  EXPECT_THROW(cuda_fused::rmsNorm(x, torch::ones({8}), 1e-5, torch::kFloat32), c10::Error);
  EXPECT_THROW(cuda_fused::swiGlu(onGpu(x), onGpu(x).to(torch::kFloat64)), c10::Error);
  EXPECT_THROW(cuda_fused::swiGlu(onGpu(x).to(torch::kHalf), onGpu(x).to(torch::kHalf)),
               c10::Error);
  EXPECT_THROW(cuda_fused::crossEntropy(onGpu(x), onGpu(torch::zeros({4}))), c10::Error);
  auto [cos, sin] = ropeTables(2, 8);  // shorter than T = 4
  EXPECT_THROW(cuda_fused::rope(onGpu(torch::randn({1, 1, 4, 8})), cos, sin, 1.0), c10::Error);
}

}  // namespace
}  // namespace ftb
