#include "trainer/parallel/backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/cuda.h>


namespace ftb {

BackendKind resolveBackend(const std::string& name, bool tensors_on_cuda) {
  if (name == "gloo") return BackendKind::kGloo;
  // TrainConfig::fromConfig already refused "nccl" in a build without it (with
  // file:line); makeNcclProcessGroup of backend_nccl_off.cpp is the runtime guard.
  if (name == "nccl") return BackendKind::kNccl;
  return tensors_on_cuda && ncclCompiledIn() && torch::cuda::is_available() ? BackendKind::kNccl
                                                                           : BackendKind::kGloo;
}

c10::intrusive_ptr<c10d::ProcessGroup> makeProcessGroup(BackendKind kind,
                                                        c10::intrusive_ptr<c10d::Store> store,
                                                        int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& local_addr) {
  if (kind == BackendKind::kNccl) return makeNcclProcessGroup(std::move(store), rank, size, timeout);
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(local_addr.empty()
                              ? c10d::ProcessGroupGloo::createDefaultDevice()
                              : c10d::ProcessGroupGloo::createDeviceForHostname(local_addr));
  opts->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(std::move(store), rank, size, opts);
}

}  // namespace ftb
