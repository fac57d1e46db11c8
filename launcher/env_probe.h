// The environment check (common/env_check.h) from the launcher's side: what the program
// it starts will compute with, shown by --dry-run (before anything starts) and in the
// launcher log (right after the workers exec'd, attempt 0).
//
// Contracts:
// - probeWorkerEnv() starts this launcher binary again (/proc/self/exe) as
//   `launcher __env-probe PROGRAM` with the complete environment and CPU binding local
//   worker 0 of `n` gets (inherited variables plus tunedEnv()). That process asks
//   PROGRAM's ELF interpreter for PROGRAM's libraries (`INTERP --list PROGRAM`, what `ldd`
//   prints: the loader resolves them, PROGRAM's own code never runs), then loads the BLAS
//   and allocator found there and describes them with common/env_check.h (detectEnvOf,
//   envSummary, envWarnings' thread check). The BLAS chooses its kernels and threads when
//   loaded, under that environment, as the worker's will.
// - It waits at most `timeout_s` for the probe, then kills it. It never throws and never
//   stops a launch: a failure is the returned text ("not probed: ..."). The first line is
//   the summary; each further line is one warning.
// - A PROGRAM that is not a dynamically linked ELF (a script, a static binary) is named as
//   such: its BLAS and allocator are unknown (an interpreter may load them at run time).
#pragma once

#include <string>
#include <vector>

#include "launcher/placement.h"

namespace ftb::launcher {

inline constexpr double kEnvProbeTimeoutS = 20.0;

std::string probeWorkerEnv(const NodeInfo& n, const std::string& program_path,
                           const std::vector<std::string>& inherited_env,
                           double timeout_s = kEnvProbeTimeoutS);

// The ELF interpreter (PT_INTERP) of `path`; "" with the reason in *why when `path` is
// not a dynamically linked 64-bit ELF executable.
std::string elfInterpreter(const std::string& path, std::string* why);

// `launcher __env-probe PROGRAM`: prints the description to stdout; returns the exit code.
int runEnvProbe(const std::vector<std::string>& args);

}  // namespace ftb::launcher
