// Process-group backends behind one factory, so the training code never names one.
//
// Contract: makeBackend(kind, store, rank, size, timeout, local_addr) returns a c10d
// Backend of that kind, rendezvoused through `store`, or throws:
// ConfigError when the kind is not compiled into this build (NCCL needs a CUDA
// libtorch; FTB_USE_NCCL decides at configure time which of backend_nccl.cpp or
// backend_nccl_off.cpp is built), DistError when the rendezvous fails.
#pragma once

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/run_config.h"  // ncclCompiledIn()

namespace ftb {

enum class BackendKind { kGloo, kNccl };

// "auto" -> the backend for the device the tensors live on: NCCL for CUDA tensors in a
// build with NCCL, else Gloo (NCCL cannot reduce CPU tensors; Gloo reduces CUDA tensors
// staged through the CPU, comm/comm.h).
BackendKind resolveBackend(const std::string& name, bool tensors_on_cuda = false);

// Where a rank's tensors live (training.device) and what that means for the backend.
struct DeviceChoice {
  std::string device;  // "cpu" or "cuda:N"
  bool cuda = false;
  std::string problem_key;  // "" = fine; else the key to name in the error
  std::string problem;      // what is wrong, with the fix
};
// Pure. Whether training.device `device` with parallel.backend `backend` places tensors on
// a GPU: "cuda..." always; "auto" with backend "nccl" or a visible GPU (cuda_devices > 0).
bool wantsCuda(const std::string& device, const std::string& backend, int cuda_devices);
// Pure. training.device "auto" -> cuda:local_rank when a GPU is visible (cuda_devices
// = torch::cuda::device_count()) or the backend is "nccl", else cpu; "cuda" ->
// cuda:local_rank; "cuda:N" as given. Problems: a CUDA device that does not exist (also
// "auto" on a rank whose local rank has no GPU: ranks never mix devices), and NCCL asked
// for CPU tensors (NCCL reduces only CUDA tensors). REQUIRES: validDeviceName(device).
DeviceChoice resolveDevice(const std::string& device, const std::string& backend, int local_rank,
                           int cuda_devices);

c10::intrusive_ptr<c10d::Backend> makeBackend(BackendKind kind,
                                              c10::intrusive_ptr<c10d::Store> store, int rank,
                                              int size, std::chrono::milliseconds timeout,
                                              const std::string& local_addr);

// Implemented by backend_nccl.cpp (CUDA builds) or backend_nccl_off.cpp.
c10::intrusive_ptr<c10d::Backend> makeNcclBackend(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                  int size, std::chrono::milliseconds timeout);

}  // namespace ftb
