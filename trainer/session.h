// One trainer process from config to closed metrics file.
//
// Contract: runSession() never throws. Bad input (ConfigError) is reported before
// any file or socket is created and returns 2. Once the metrics file exists, every
// failure is recorded in its /status (failed, oom, preempted) before returning the
// error's exit code; a clean run records "completed" and returns 0.
#pragma once

#include <string>
#include <vector>

namespace ftb {

struct SessionOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  std::string generate_data;  // non-empty: write the synthetic dataset and exit
  bool estimate_memory = false;
  int world_size = 0;  // > 0: plan for this world size (--estimate-memory)
};

int runSession(const SessionOptions& opts);

}  // namespace ftb
