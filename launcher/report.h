// Human-readable reports: the placement table, the --dry-run report and the root-cause
// table of a failed job. Pure functions of their inputs (golden-tested).
#pragma once

#include <string>
#include <vector>

#include "launcher/outcome.h"
#include "launcher/placement.h"

namespace ftb::launcher {

// node | host | ip | cores | gpus | nproc | global ranks | local ranks | threads
std::string placementTable(const Plan& plan);

// Everything a real run would do, per worker: argv (exactly as passed to execve) and the
// variables the launcher sets; the inherited environment is printed once.
std::string dryRunReport(const Plan& plan, const std::string& program_path,
                         const std::vector<std::string>& argv,
                         const std::vector<std::string>& inherited);

// Root cause first, then the other failures; last stderr lines of each (at most 4).
std::string failureReport(const Decision& d, int max_restarts);

// Shell-style quoting for display: 'a b' -> "'a b'", plain words unchanged.
std::string shellQuote(const std::string& s);
std::string formatTimeUs(int64_t time_us);    // "2024-11-22 10:01:02.345" local time
std::string rankRange(int first, int count);  // "0-1", "4"

}  // namespace ftb::launcher
