// Built only when FTB_USE_NCCL resolves ON (libtorch with CUDA). Not run on the CPU
// machines this project is developed on.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "trainer/parallel/backend.h"

namespace ftb {

c10::intrusive_ptr<c10d::Backend> makeNcclBackend(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                  int size, std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(std::move(store), rank, size, opts);
}

}  // namespace ftb
