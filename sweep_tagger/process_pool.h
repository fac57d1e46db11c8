// Runs independent jobs in forked worker processes, for work whose libraries are
// neither thread-safe nor trusted not to crash (serial libhdf5 on damaged files).
//
// Contract: mapInProcesses() returns f(i) for every i in [0, n), computed in up to
// `jobs` child processes (i assigned round-robin; jobs <= 1 or n <= 1: in this
// process, without fork). REQUIRES: f's result has no '\n'. A child that crashes or
// exits early loses the results it had not written; each lost i is then retried
// alone in a fresh child, and if that child crashes too the result is nullopt, so
// one bad input costs one result. The caller must not hold threads (fork).
// Deadline: with item_timeout_s > 0 every result is computed in a child (also for
// jobs <= 1), and a child that produces no result for item_timeout_s seconds is
// SIGKILLed and treated as crashed (a damaged HDF5 file can make libhdf5 loop), so
// mapInProcesses returns within about (n + 1) * item_timeout_s even if every f hangs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ftb {

std::vector<std::optional<std::string>> mapInProcesses(size_t n, int jobs,
                                                       const std::function<std::string(size_t)>& f,
                                                       double item_timeout_s = 0);

}  // namespace ftb
