// SideCopies::Cuda (host_copy.h): the side stream's copies, marks and waits of one device.
// Two definitions, one per build of the trainer (trainer/CMakeLists.txt): host_copy_cuda.cpp
// (streams and events) in `trainer_cuda`, host_copy_cuda_off.cpp (never made: cudaFor
// throws) in `trainer` and the unit tests.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>

#include "trainer/kernels/host_copy.h"

namespace ftb {

struct SideCopies::Cuda {
  struct State;  // the device, its side stream, the events of the marks
  std::unique_ptr<State> state;

  explicit Cuda(torch::Device device);
  ~Cuda();
  // dst.copy_(src) on the side stream after the current stream's queued work; `on_device`
  // (src or dst) is kept from the caching allocator until the copy has run.
  void copy(const torch::Tensor& dst, const torch::Tensor& src, const torch::Tensor& on_device);
  void mark();               // an event after the copies queued so far
  void hostWait(size_t id);  // the host waits for mark `id`
  void deviceWait();         // the current stream waits for every copy; marks forgotten
};

}  // namespace ftb
