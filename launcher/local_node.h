// Facts about the machine this launcher runs on.
#pragma once

#include <string>
#include <vector>

#include "launcher/options.h"
#include "launcher/placement.h"

namespace ftb::launcher {

std::vector<int> allowedCpus();          // sched_getaffinity, sorted
std::vector<std::string> visibleGpus();  // CUDA_VISIBLE_DEVICES, else /dev/nvidiaN ids

// Fills n.cpus, cpu_model, isa and the OPENBLAS_CORETYPE check (coretype_fix/note) from
// this machine (common/cpu_info) and the inherited OPENBLAS_CORETYPE; tune_env/bind_cores
// from opts.
void fillTuning(const LaunchOptions& opts, NodeInfo& n);

// This node's contribution to the rendezvous. Local validation problems (unknown
// interface, nproc=gpu without GPUs, PROGRAM not found, log dir not creatable) are
// returned in `error` rather than thrown, so that every node learns about them and the
// whole job exits 2 together. `program_path` receives the resolved PROGRAM.
NodeInfo localNodeInfo(const LaunchOptions& opts, int node, std::string* program_path);

// A TCP port that is free right now on `addr` (bind to port 0), different from `avoid`.
int pickFreePort(const std::string& addr, int avoid);

// "20241122-101502-3fa9": local time plus 16 random bits.
std::string generateRunId();

}  // namespace ftb::launcher
