// NF4 storage (trainer/kernels/nf4.h) against the published code values and a float64
// reference, its packed layout byte by byte, and the NF4 projection's gradient against
// autograd through the dequantized weight (trainer/model/linear.h).
// tests/e2e/trainer/test_nf4.py compares the same quantization with bitsandbytes' through
// the files Nf4.WritesTensorsForTheBitsandbytesCheck writes.
#include "trainer/kernels/nf4.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/unit/trainer/fp32_gemm_route.h"
#include "trainer/model/linear.h"

namespace ftb {
namespace {

// The QLoRA paper's NF4 values (bitsandbytes functional.get_4bit_type("nf4")).
constexpr double kPublished[16] = {-1.0,
                                   -0.6961928009986877,
                                   -0.5250730514526367,
                                   -0.39491748809814453,
                                   -0.28444138169288635,
                                   -0.18477343022823334,
                                   -0.09105003625154495,
                                   0.0,
                                   0.07958029955625534,
                                   0.16093020141124725,
                                   0.24611230194568634,
                                   0.33791524171829224,
                                   0.44070982933044434,
                                   0.5626170039176941,
                                   0.7229568362236023,
                                   1.0};

// Float64 reference: per block of 64 (the last one shorter) absmax, and each element's
// nearest published code value of x / absmax (ties to the lower code).
std::pair<std::vector<int>, std::vector<double>> reference(const torch::Tensor& x) {
  torch::Tensor f = x.reshape(-1).to(torch::kFloat64).contiguous();
  const double* v = f.data_ptr<double>();
  const int64_t n = f.numel();
  std::vector<int> codes(n);
  std::vector<double> absmax;
  for (int64_t b = 0; b < n; b += 64) {
    double m = 0;
    for (int64_t i = b; i < std::min(n, b + 64); ++i) m = std::max(m, std::abs(v[i]));
    absmax.push_back(m);
    for (int64_t i = b; i < std::min(n, b + 64); ++i) {
      const double s = m > 0 ? v[i] / m : 0.0;
      int best = 0;
      for (int c = 1; c < 16; ++c)
        if (std::abs(s - kPublished[c]) < std::abs(s - kPublished[best])) best = c;
      codes[i] = best;
    }
  }
  return {codes, absmax};
}

// Code of element i of a packed tensor: the high nibble for even i.
int codeAt(const torch::Tensor& packed, int64_t i) {
  const uint8_t byte = packed.data_ptr<uint8_t>()[i / 2];
  return i % 2 == 0 ? byte >> 4 : byte & 15;
}

TEST(Nf4, CodeValuesAreThePublishedOnes) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(kNf4Codes[c], static_cast<float>(kPublished[c])) << c;
  EXPECT_EQ(kNf4Codes[7], 0.0f);
}

TEST(Nf4, QuantizeMatchesTheFloat64Reference) {
  torch::manual_seed(3);
  // 64 | numel, a short last block, an odd numel, a zero block.
  for (auto shape : std::vector<std::vector<int64_t>>{{8, 64}, {5, 39}, {7, 13}, {3, 64}}) {
    torch::Tensor x = torch::randn(shape) * 0.02;
    if (shape[1] == 64 && shape[0] == 3) x[1].zero_();
    const Nf4Tensor q = nf4Quantize(x);
    const auto [codes, absmax] = reference(x);
    const int64_t n = x.numel();
    ASSERT_EQ(q.codes.numel(), (n + 1) / 2);
    ASSERT_EQ(q.absmax.numel(), (n + 63) / 64);
    EXPECT_EQ(q.codes.scalar_type(), torch::kUInt8);
    EXPECT_EQ(q.shape, shape);
    int wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += codeAt(q.codes, i) != codes[i];
    EXPECT_EQ(wrong, 0) << "of " << n;
    for (size_t b = 0; b < absmax.size(); ++b)
      EXPECT_EQ(q.absmax[b].item<float>(), static_cast<float>(absmax[b]));
    if (n % 2) EXPECT_EQ(codeAt(q.codes, n), 7) << "the pad nibble is code 7 (0)";
  }
}

TEST(Nf4, PackedLayoutIsBitsandbytes) {
  // bitsandbytes 0.50: quantize_4bit of [0.1, -1, 0.5, 0, 0.01 x 60] gives bytes 0x80 0xC7,
  // absmax 1: 0.1 -> code 8 in the high nibble, -1 -> code 0 in the low one.
  torch::Tensor x = torch::full({64}, 0.01f);
  x[0] = 0.1f, x[1] = -1.0f, x[2] = 0.5f, x[3] = 0.0f;
  const Nf4Tensor q = nf4Quantize(x);
  EXPECT_EQ(q.codes[0].item<int>(), 0x80);
  EXPECT_EQ(q.codes[1].item<int>(), 0xC7);
  EXPECT_EQ(q.absmax[0].item<float>(), 1.0f);
  EXPECT_EQ(q.bytes(), 32 + 4);
}

TEST(Nf4, DequantizeIsCodeTimesAbsmax) {
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({6, 50});
  const Nf4Tensor q = nf4Quantize(x);
  const auto [codes, absmax] = reference(x);
  torch::Tensor w = nf4Dequantize(q, torch::kFloat32);
  ASSERT_EQ(w.sizes(), x.sizes());
  torch::Tensor flat = w.reshape(-1);
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float want = kNf4Codes[codes[i]] * static_cast<float>(absmax[i / 64]);
    EXPECT_EQ(flat[i].item<float>(), want) << i;
    // Nearest code: the error is at most half the widest gap (1 - 0.7230) times absmax.
    worst =
        std::max(worst, std::abs(x.reshape(-1)[i].item<double>() - double(want)) / absmax[i / 64]);
  }
  EXPECT_LE(worst, (1.0 - kPublished[14]) / 2 + 1e-6);
  EXPECT_TRUE(torch::equal(nf4Dequantize(q, torch::kBFloat16), w.to(torch::kBFloat16)));
}

TEST(Nf4, RequantizeOverwritesInPlace) {
  torch::manual_seed(5);
  Nf4Tensor q = nf4Quantize(torch::randn({4, 64}));
  const Nf4Tensor alias = q;  // the model's registered tensors share the storage
  const void* where = q.codes.data_ptr();
  torch::Tensor y = torch::randn({4, 64}, torch::kFloat64);
  nf4Requantize(q, y);
  EXPECT_EQ(q.codes.data_ptr(), where);
  const Nf4Tensor fresh = nf4Quantize(y.to(torch::kFloat32));
  EXPECT_TRUE(torch::equal(alias.codes, fresh.codes));
  EXPECT_TRUE(torch::equal(alias.absmax, fresh.absmax));
  EXPECT_THROW(nf4Requantize(q, torch::randn({64, 4})), c10::Error);
}

// nf4Projection against autograd through projection(x, dequantized W): forward and the
// input gradient to fp32 rounding (bf16: to bf16 rounding), no gradient for the codes.
TEST(Nf4Projection, GradientMatchesTheDequantizedWeight) {
  RouteGuard guard;
  setFp32Gemm(Fp32Gemm::kAten);
  for (torch::ScalarType dt : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(6);
    const Nf4Tensor q = nf4Quantize(torch::randn({48, 128}) * 0.05);
    torch::Tensor x0 = torch::randn({2, 5, 128}).to(dt), g = torch::randn({2, 5, 48}).to(dt);
    torch::Tensor x = x0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
    torch::Tensor y = nf4Projection(x, q);
    y.backward(g);
    torch::Tensor yr = projection(xr, nf4Dequantize(q, dt));
    yr.backward(g);
    const double tol = dt == torch::kFloat32 ? 1e-6 : 1e-2;
    EXPECT_EQ(y.scalar_type(), dt);
    EXPECT_LT(relErr(y.to(torch::kFloat32), yr.to(torch::kFloat32)), tol);
    EXPECT_LT(relErr(x.grad().to(torch::kFloat32), xr.grad().to(torch::kFloat32)), tol);
    EXPECT_FALSE(q.codes.requires_grad());
  }
}

// Writes x, the codes and absmax of one quantization for the bitsandbytes comparison
// (tests/e2e/trainer/test_nf4.py) into $FTB_NF4_OUT: raw little-endian fp32 / uint8.
TEST(Nf4, WritesTensorsForTheBitsandbytesCheck) {
  const char* out = std::getenv("FTB_NF4_OUT");
  if (!out) GTEST_SKIP() << "FTB_NF4_OUT unset: run by tests/e2e/trainer/test_nf4.py";
  torch::manual_seed(11);
  torch::Tensor x = torch::cat({torch::randn({4096}) * 0.03, torch::randn({999}) * 2});
  const Nf4Tensor q = nf4Quantize(x);
  auto write = [&](const char* name, const torch::Tensor& t) {
    std::ofstream f(std::filesystem::path(out) / name, std::ios::binary);
    f.write(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
    ASSERT_TRUE(f.good()) << name;
  };
  write("x.f32", x);
  write("codes.u8", q.codes);
  write("absmax.f32", q.absmax);
  write("dequant.f32", nf4Dequantize(q, torch::kFloat32));
}

}  // namespace
}  // namespace ftb
