#include "trainer/model/lora.h"

#include "trainer/model/linear.h"

namespace ftb {

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

namespace {

// x * mask / (1 - p), the mask drawn from a generator of (seed, name).
torch::Tensor dropped(const torch::Tensor& x, double p, uint64_t seed, const std::string& name) {
  at::Generator gen = at::detail::createCPUGenerator(fnv1a(name, seed));
  // Drawn on the CPU (the generator is a CPU one), so every device draws the same mask.
  torch::Tensor keep = torch::empty(x.sizes(), torch::kFloat32)
                           .bernoulli_(1.0 - p, gen)
                           .to(x.device(), x.scalar_type());
  return x * keep / (1.0 - p);
}

// The weight in the compute dtype, differentiably (fp32 gradients for fp32 adapters).
torch::Tensor cast(const torch::Tensor& w, const torch::Tensor& like) {
  return w.scalar_type() == like.scalar_type() ? w : w.to(like.scalar_type());
}

}  // namespace

std::string loraAName(const std::string& prefix) { return prefix + ".lora_A.weight"; }
std::string loraBName(const std::string& prefix) { return prefix + ".lora_B.weight"; }

torch::Tensor loraDelta(const torch::Tensor& x, const LoraAdapter& ad, double scale, double dropout,
                        uint64_t mask_seed, const TpContext& tp) {
  torch::Tensor in = (dropout > 0 && mask_seed != 0) ? dropped(x, dropout, mask_seed, ad.name) : x;
  torch::Tensor z = blockProjection(in, cast(ad.a, x)) * scale;
  z = ad.row_parallel ? reduceFromTp(z, tp) : copyToTp(z, tp);
  return blockProjection(z, cast(ad.b, x));
}

}  // namespace ftb
