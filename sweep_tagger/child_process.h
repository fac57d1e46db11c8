// Child processes of sweep_tagger under a deadline: tune's runs and probe, aggregate's gnuplot.
//
// Contract of reapWithin(): waits (polling every 20 ms) until `pid` exits or `timeout_s` has
// passed; true with its wait status in `status` when it was reaped (or cannot be waited for:
// status 0), false on the deadline with the child still running. Signals nothing.
//
// Contract of runCommand(): starts argv[0] (searched in PATH when it has no '/') with
// stdin from /dev/null and stdout and stderr appended to `log_path` (created with its
// directory), in the caller's process group, so a Ctrl-C at the terminal reaches the
// run's launcher too. Waits at most timeout_s: then SIGTERM (the launcher stops its
// workers) and, grace_s later, SIGKILL; the result says so. Never throws for the
// child's failure: exit_code is its status (128 + signal when killed); spawn_error says
// why it could not start (exit_code -1).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ftb {

struct CommandResult {
  int exit_code = -1;
  double wall_s = 0;
  bool timed_out = false;
  std::string spawn_error;  // "" when the child started
};

bool reapWithin(pid_t pid, double timeout_s, int& status);

// REQUIRES: argv non-empty; timeout_s > 0, grace_s >= 0.
CommandResult runCommand(const std::vector<std::string>& argv, const std::string& log_path,
                         double timeout_s, double grace_s = 30);

}  // namespace ftb
