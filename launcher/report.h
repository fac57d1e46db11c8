// Human-readable reports: the placement table, the --dry-run report and the root-cause
// table of a failed job. Pure functions of their inputs (golden-tested).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "launcher/options.h"
#include "launcher/outcome.h"
#include "launcher/placement.h"

namespace ftb::launcher {

// node | host | ip | cores | gpus | nproc | global ranks | local ranks | threads
std::string placementTable(const Plan& plan);
// One line per node, "gpus node 1 (host h2): <source>", when any node has a GPU; else "".
std::string gpuSources(const Plan& plan);

// Plans with more workers than this print a summary unless --full is given.
inline constexpr int kFullListMaxWorkers = 64;

struct DryRunView {
  bool full = false;     // --full: every node row and every worker, however many
  bool summary = false;  // --summary: grouped node rows and the first node's workers only
  bool env_all = false;  // --env all: also the inherited environment (secrets masked)
};

inline DryRunView dryRunView(const LaunchOptions& o) { return {o.full, o.summary, o.env_all}; }

// What a real run would do, per worker: argv (exactly as passed to execve) and the
// variables the launcher sets or changes (with the inherited value it replaces). The
// inherited environment itself only with view.env_all. `launcher_env` is this launcher's
// environ (K=V). Full listing when view.full, or when !view.summary and the world size is
// at most kFullListMaxWorkers; otherwise consecutive nodes of equal shape share one row and
// only the first node's workers and the last worker are shown. Time and memory are linear
// in the nodes and in the workers printed.
void writeDryRunReport(std::ostream& o, const Plan& plan, const std::string& program_path,
                       const std::vector<std::string>& argv,
                       const std::vector<std::string>& launcher_env, const DryRunView& view);

// probeWorkerEnv()'s text (launcher/env_probe.h), one line each, prefixed by `indent`: the
// first as "worker environment (local rank 0, probed): ...", the others (warnings) as
// they are. Writes nothing for "".
void writeWorkerEnv(std::ostream& o, const std::string& probe, const std::string& indent);

// Consecutive nodes with equal cores, GPUs, nproc and threads in one row:
// nodes | hosts | count | cores | gpus | nproc | global ranks | local ranks | threads
std::string placementSummary(const Plan& plan);

// True when a variable's value must not be printed: its name contains TOKEN, KEY, SECRET
// or PASSWORD (any case).
bool isSecretName(const std::string& name);
// `value` shell-quoted for display, or "<masked>" for secret names.
std::string displayValue(const std::string& name, const std::string& value);

// Root cause first, then the other failures; last stderr lines of each (at most 4).
// Without failures: the stop signal, or (none) that the workers stopped themselves, with
// kExitRequeue named as the preemption it is (`launcher ctl stop`), not as a failure.
std::string failureReport(const Decision& d, int max_restarts);

// Shell-style quoting for display: 'a b' -> "'a b'", plain words unchanged.
std::string shellQuote(const std::string& s);
std::string formatTimeUs(int64_t time_us);    // "2024-11-22 10:01:02.345" local time
std::string rankRange(int first, int count);  // "0-1", "4"

}  // namespace ftb::launcher
