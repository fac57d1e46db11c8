#include "trainer/kernels/host_copy.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#include <stdexcept>

namespace ftb {
namespace {

// The side stream of a device: one pool stream per device, fixed for the process.
c10::cuda::CUDAStream sideStream(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams.find(device);
  if (it == streams.end())
    it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
  return it->second;
}

}  // namespace

torch::Tensor hostBufferLike(const torch::Tensor& x) {
  return torch::empty(x.sizes(),
                      x.options().device(torch::kCPU).pinned_memory(x.device().is_cuda()));
}

struct SideCopies::Cuda {
  c10::DeviceIndex index;
  c10::cuda::CUDAStream side;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> marks;

  // The side stream waits (on the device) for what the current stream has queued so far.
  void afterCurrent() {
    at::cuda::CUDAEvent queued;
    queued.record(c10::cuda::getCurrentCUDAStream(index));
    queued.block(side);
  }
  void copy(const torch::Tensor& dst, const torch::Tensor& src, const torch::Tensor& on_device) {
    afterCurrent();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      dst.copy_(src, /*non_blocking=*/true);
    }
    c10::cuda::CUDACachingAllocator::recordStream(on_device.storage().data_ptr(), side);
  }
};

SideCopies::SideCopies(torch::Device device) {
  if (!device.is_cuda()) return;
  const c10::DeviceIndex index =
      device.has_index() ? device.index() : c10::cuda::current_device();
  cuda_ = std::make_unique<Cuda>(Cuda{index, sideStream(index), {}});
}

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
  if (!cuda_) return marks_++;
  auto ev = std::make_unique<at::cuda::CUDAEvent>();
  ev->record(cuda_->side);
  cuda_->marks.push_back(std::move(ev));
  return marks_++;
}

void SideCopies::hostWait(size_t id) {
  if (!cuda_) return;
  if (id >= cuda_->marks.size())
    throw std::logic_error("SideCopies::hostWait: no mark " + std::to_string(id));
  cuda_->marks[id]->synchronize();
}

void SideCopies::deviceWait() {
  marks_ = 0;
  if (!cuda_) return;
  cuda_->marks.clear();
  at::cuda::CUDAEvent done;
  done.record(cuda_->side);
  done.block(c10::cuda::getCurrentCUDAStream(cuda_->index));
}

}  // namespace ftb
