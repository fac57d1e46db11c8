#include "trainer/kernels/nf4.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ftb {

const std::array<float, 16> kNf4Codes = {-1.0f,
                                         -0.6961928009986877f,
                                         -0.5250730514526367f,
                                         -0.39491748809814453f,
                                         -0.28444138169288635f,
                                         -0.18477343022823334f,
                                         -0.09105003625154495f,
                                         0.0f,
                                         0.07958029955625534f,
                                         0.16093020141124725f,
                                         0.24611230194568634f,
                                         0.33791524171829224f,
                                         0.44070982933044434f,
                                         0.5626170039176941f,
                                         0.7229568362236023f,
                                         1.0f};

namespace {

// The 16 code values as an fp32 tensor on `device`, made there once: a copy from the host at
// every use would wait for the device (and cannot be captured in a CUDA graph). The tables
// are never freed (a GPU tensor freed after the CUDA runtime shut down at exit would fail).
torch::Tensor nf4CodeTable(const torch::Device& device) {
  static std::mutex mu;
  static auto* tables = new std::map<std::string, torch::Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  torch::Tensor& t = (*tables)[device.str()];
  if (!t.defined())
    t = torch::tensor(std::vector<float>(kNf4Codes.begin(), kNf4Codes.end()), torch::kFloat32)
            .to(device);
  return t;
}

// The NF4 codes of x's elements (uint8, two per byte) and its block absmax, computed as
// bitsandbytes' quantize_4bit does: x * (1 / absmax), clamped to [-1, 1], bucketized
// against the fp32 midpoints of neighbouring code values.
std::pair<torch::Tensor, torch::Tensor> nf4Codes(const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  torch::Tensor flat = x.detach().reshape(-1).to(torch::kFloat32);
  const int64_t n = flat.numel(), blocks = (n + kNf4Block - 1) / kNf4Block;
  if (blocks * kNf4Block != n)  // zeros change no block's absmax and take code 7
    flat = torch::constant_pad_nd(flat, {0, blocks * kNf4Block - n});
  torch::Tensor grid = flat.view({blocks, kNf4Block});
  torch::Tensor absmax = grid.abs().amax(1);
  torch::Tensor scaled = (grid * absmax.clamp_min(1e-38).reciprocal().unsqueeze(1)).clamp_(-1, 1);
  const torch::Tensor table = nf4CodeTable(x.device());
  const torch::Tensor mid = (table.narrow(0, 0, 15) + table.narrow(0, 1, 15)) / 2;
  const int64_t even = (n + 1) / 2 * 2;
  torch::Tensor idx = torch::bucketize(scaled.view(-1).narrow(0, 0, even), mid,
                                       /*out_int32=*/true)
                          .to(torch::kUInt8);
  torch::Tensor codes = torch::bitwise_or(torch::bitwise_left_shift(idx.slice(0, 0, even, 2), 4),
                                          idx.slice(0, 1, even, 2));
  return {codes.contiguous(), absmax.contiguous()};
}

}  // namespace

int64_t Nf4Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Nf4Tensor::bytes() const {
  return codes.numel() * codes.element_size() + absmax.numel() * absmax.element_size();
}

Nf4Tensor nf4Quantize(const torch::Tensor& x) {
  auto [codes, absmax] = nf4Codes(x);
  return {codes, absmax, x.sizes().vec()};
}

void nf4Requantize(Nf4Tensor& q, const torch::Tensor& x) {
  TORCH_CHECK(x.sizes().vec() == q.shape, "nf4Requantize: shape ", x.sizes(), ", expected ",
              c10::IntArrayRef(q.shape));
  torch::NoGradGuard no_grad;
  auto [codes, absmax] = nf4Codes(x.to(q.codes.device()));
  q.codes.copy_(codes);
  q.absmax.copy_(absmax);
}

torch::Tensor nf4Dequantize(const Nf4Tensor& q, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  const int64_t n = q.numel(), full = n / kNf4Block;
  // The two nibbles of each byte side by side (high first), as int32 indices.
  torch::Tensor nibbles =
      torch::stack({torch::bitwise_right_shift(q.codes, 4), torch::bitwise_and(q.codes, 15)}, 1)
          .to(torch::kInt32);
  torch::Tensor w = nf4CodeTable(q.codes.device()).index_select(0, nibbles.view(-1));
  nibbles.reset();
  w = w.narrow(0, 0, n);
  w.narrow(0, 0, full * kNf4Block)
      .view({full, kNf4Block})
      .mul_(q.absmax.narrow(0, 0, full).unsqueeze(1));
  if (full * kNf4Block < n)
    w.narrow(0, full * kNf4Block, n - full * kNf4Block).mul_(q.absmax[full]);
  return w.view(q.shape).to(dtype);
}

}  // namespace ftb
