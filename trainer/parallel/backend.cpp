#include "trainer/parallel/backend.h"

// Gloo's own headers come from parallel/gloo_decl (see its README).
#include <torch/cuda.h>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace ftb {

BackendKind resolveBackend(const std::string& name, bool tensors_on_cuda) {
  if (name == "gloo") return BackendKind::kGloo;
  // TrainConfig::fromConfig already refused "nccl" in a build without it (with
  // file:line); makeNcclBackend of backend_nccl_off.cpp is the runtime guard.
  if (name == "nccl") return BackendKind::kNccl;
  return tensors_on_cuda && ncclCompiledIn() && torch::cuda::is_available() ? BackendKind::kNccl
                                                                            : BackendKind::kGloo;
}

bool wantsCuda(const std::string& device, const std::string& backend, int cuda_devices) {
  return device.rfind("cuda", 0) == 0 ||
         (device == "auto" && (backend == "nccl" || cuda_devices > 0));
}

DeviceChoice resolveDevice(const std::string& device, const std::string& backend, int local_rank,
                           int cuda_devices) {
  DeviceChoice c;
  if (!wantsCuda(device, backend, cuda_devices)) {
    c.device = "cpu";
    if (backend == "nccl") {
      c.problem_key = "parallel.backend";
      c.problem =
          "\"nccl\" reduces CUDA tensors only, but training.device is \"cpu\"; use "
          "backend \"gloo\" or \"auto\", or a CUDA device";
    }
    return c;
  }
  const int index = device.size() > 5 ? std::stoi(device.substr(5)) : local_rank;
  c.cuda = true;
  c.device = "cuda:" + std::to_string(index);
  if (index >= cuda_devices) {
    c.problem_key = "training.device";
    c.problem =
        "\"" + device + "\" resolves to " + c.device +
        (device != "auto"    ? ""
         : backend == "nccl" ? " (backend nccl)"
                             : " (local rank " + std::to_string(local_rank) + ")") +
        " but " + std::to_string(cuda_devices) + " CUDA device(s) are visible" +
        (cuda_devices == 0 ? " (no GPU on this machine, or CUDA_VISIBLE_DEVICES hides them)" : "") +
        (device == "auto" ? "; set training.device = \"cpu\", or start at most one rank per GPU"
                          : "; use \"cpu\" or \"auto\"");
  }
  return c;
}

c10::intrusive_ptr<c10d::Backend> makeBackend(BackendKind kind,
                                              c10::intrusive_ptr<c10d::Store> store, int rank,
                                              int size, std::chrono::milliseconds timeout,
                                              const std::string& local_addr) {
  if (kind == BackendKind::kNccl) return makeNcclBackend(std::move(store), rank, size, timeout);
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(local_addr.empty()
                              ? c10d::ProcessGroupGloo::createDefaultDevice()
                              : c10d::ProcessGroupGloo::createDeviceForHostname(local_addr));
  opts->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(std::move(store), rank, size, opts);
}

}  // namespace ftb
