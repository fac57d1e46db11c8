#include "trainer/kernels/host_copy.h"

#include "trainer/kernels/host_copy_cuda.h"

namespace ftb {

torch::Tensor hostBufferLike(const torch::Tensor& x) {
  return torch::empty(x.sizes(),
                      x.options().device(torch::kCPU).pinned_memory(x.device().is_cuda()));
}

SideCopies::SideCopies(torch::Device device)
    : cuda_(device.is_cuda() ? cudaFor(device) : nullptr) {}

SideCopies::~SideCopies() = default;

void SideCopies::toHost(const torch::Tensor& dst, const torch::Tensor& src) {
  if (!cuda_) return void(dst.copy_(src));
  cuda_->copy(dst, src, src);
}

void SideCopies::toDevice(const torch::Tensor& dst, const torch::Tensor& src) {
  if (!cuda_) return void(dst.copy_(src));
  cuda_->copy(dst, src, dst);
}

size_t SideCopies::mark() {
  if (cuda_) cuda_->mark();
  return marks_++;
}

void SideCopies::hostWait(size_t id) {
  if (cuda_) cuda_->hostWait(id);
}

void SideCopies::deviceWait() {
  marks_ = 0;
  if (cuda_) cuda_->deviceWait();
}

}  // namespace ftb
