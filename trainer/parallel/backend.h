// Process-group backends behind one factory, so the training code never names one.
//
// Contract: makeProcessGroup(kind, store, rank, size, timeout, local_addr) returns a
// c10d ProcessGroup of that kind, rendezvoused through `store`, or throws:
// ConfigError when the kind is not compiled into this build (NCCL needs a CUDA
// libtorch; FTB_USE_NCCL decides at configure time which of backend_nccl.cpp or
// backend_nccl_off.cpp is built), DistError when the rendezvous fails.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "common/run_config.h"  // ncclCompiledIn()

namespace ftb {

enum class BackendKind { kGloo, kNccl };

// "auto" -> NCCL when compiled in and CUDA is available, else Gloo.
BackendKind resolveBackend(const std::string& name);

c10::intrusive_ptr<c10d::ProcessGroup> makeProcessGroup(BackendKind kind,
                                                        c10::intrusive_ptr<c10d::Store> store,
                                                        int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        const std::string& local_addr);

// Implemented by backend_nccl.cpp (CUDA builds) or backend_nccl_off.cpp.
c10::intrusive_ptr<c10d::ProcessGroup> makeNcclProcessGroup(c10::intrusive_ptr<c10d::Store> store,
                                                            int rank, int size,
                                                            std::chrono::milliseconds timeout);

}  // namespace ftb
