// Copies between a GPU and pinned host memory on one side stream per device, ordered after
// the work the current stream has queued: what activation offload
// (trainer/model/activation_checkpoint.h) and optimizer-state offload (trainer/optim/offload.h)
// share. For tensors on the CPU every call is a plain synchronous copy and the waits return
// at once, so the code above them runs (and is unit-tested) unchanged on a CPU.
//
// Contracts:
// - hostBufferLike(x): an uninitialised host tensor of x's shape and dtype, in pinned (page-
//   locked) memory when x is on a GPU, so that copies to and from it can be asynchronous.
// - SideCopies(device): toHost(dst, src) and toDevice(dst, src) queue dst.copy_(src) on the
//   device's side stream after everything the current stream has queued so far (so src is
//   produced and dst no longer read). The device tensor of a copy (toHost's src, toDevice's
//   dst) is not reused by the caching allocator before the copy has run; the pinned host side
//   is kept by the host allocator's own event. mark() records the copies queued so far and
//   returns an id; hostWait(id) blocks the host until they have run; deviceWait() makes the
//   current stream wait, on the device (the host does not block), for every copy queued so
//   far, and ends the batch: the marks taken before it are forgotten (ids start again at 0).
// - One side stream per device, first in, first out, shared by every SideCopies of the
//   process: a mark covers every copy queued before it on that device, by any object and
//   across earlier deviceWait()s (what optim/offload.cpp relies on to reuse its host buffers).
// - Not thread-safe: one thread at a time per object.
// - The stream and event work is in host_copy_cuda.cpp, linked into the CUDA build of the
//   trainer only (trainer/CMakeLists.txt: `trainer` loads no CUDA library).
// REQUIRES: toHost's dst is a host tensor (pinned for an asynchronous copy), toDevice's src
//   one; neither is written or freed by the host before a hostWait covering the copy.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace ftb {

torch::Tensor hostBufferLike(const torch::Tensor& x);

class SideCopies {
 public:
  explicit SideCopies(torch::Device device);
  ~SideCopies();
  SideCopies(const SideCopies&) = delete;
  SideCopies& operator=(const SideCopies&) = delete;

  void toHost(const torch::Tensor& dst, const torch::Tensor& src);
  void toDevice(const torch::Tensor& dst, const torch::Tensor& src);
  size_t mark();
  void hostWait(size_t id);
  void deviceWait();

 private:
  struct Cuda;  // streams and events; absent on the CPU
  // REQUIRES: device.is_cuda(). Defined by host_copy_cuda.cpp in the CUDA build of the
  // trainer; the CPU build's (host_copy_cuda_off.cpp) throws std::logic_error.
  static std::unique_ptr<Cuda> cudaFor(torch::Device device);
  std::unique_ptr<Cuda> cuda_;
  size_t marks_ = 0;
};

}  // namespace ftb
