// One child command of `sweep_tagger tune` (a run or the probe), under a deadline.
//
// Contract of runCommand(): starts argv[0] (searched in PATH when it has no '/') with
// stdin from /dev/null and stdout and stderr appended to `log_path` (created with its
// directory), in the caller's process group, so a Ctrl-C at the terminal reaches the
// run's launcher too. Waits at most timeout_s: then SIGTERM (the launcher stops its
// workers) and, grace_s later, SIGKILL; the result says so. Never throws for the
// child's failure: exit_code is its status (128 + signal when killed); spawn_error says
// why it could not start (exit_code -1).
#pragma once

#include <string>
#include <vector>

namespace ftb {

struct CommandResult {
  int exit_code = -1;
  double wall_s = 0;
  bool timed_out = false;
  std::string spawn_error;  // "" when the child started
};

// REQUIRES: argv non-empty; timeout_s > 0, grace_s >= 0.
CommandResult runCommand(const std::vector<std::string>& argv, const std::string& log_path,
                         double timeout_s, double grace_s = 30);

}  // namespace ftb
