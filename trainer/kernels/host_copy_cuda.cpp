// SideCopies::Cuda in the CUDA build of the trainer (host_copy_cuda.h).
#include "trainer/kernels/host_copy_cuda.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

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

struct SideCopies::Cuda::State {
  c10::DeviceIndex index;
  c10::cuda::CUDAStream side;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> marks;
};

std::unique_ptr<SideCopies::Cuda> SideCopies::cudaFor(torch::Device device) {
  return std::make_unique<Cuda>(device);
}

SideCopies::Cuda::Cuda(torch::Device device) {
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  state = std::make_unique<State>(State{index, sideStream(index), {}});
}

SideCopies::Cuda::~Cuda() = default;

void SideCopies::Cuda::copy(const torch::Tensor& dst, const torch::Tensor& src,
                            const torch::Tensor& on_device) {
  // The side stream waits (on the device) for what the current stream has queued so far.
  at::cuda::CUDAEvent queued;
  queued.record(c10::cuda::getCurrentCUDAStream(state->index));
  queued.block(state->side);
  {
    c10::cuda::CUDAStreamGuard guard(state->side);
    dst.copy_(src, /*non_blocking=*/true);
  }
  c10::cuda::CUDACachingAllocator::recordStream(on_device.storage().data_ptr(), state->side);
}

void SideCopies::Cuda::mark() {
  auto ev = std::make_unique<at::cuda::CUDAEvent>();
  ev->record(state->side);
  state->marks.push_back(std::move(ev));
}

void SideCopies::Cuda::hostWait(size_t id) {
  if (id >= state->marks.size())
    throw std::logic_error("SideCopies::hostWait: no mark " + std::to_string(id));
  state->marks[id]->synchronize();
}

void SideCopies::Cuda::deviceWait() {
  state->marks.clear();
  at::cuda::CUDAEvent done;
  done.record(state->side);
  done.block(c10::cuda::getCurrentCUDAStream(state->index));
}

}  // namespace ftb
