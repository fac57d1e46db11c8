// One trainer process from config to closed metrics file.
//
// Contract: runSession() never throws. Bad input (ConfigError) is reported before
// any file or socket is created and returns 2; the one exception is a run directory
// held by another run (its run.lock), refused with 2 after the rendezvous, nothing in
// that directory changed. A layout whose memory estimate exceeds the per-rank budget
// (parallel.memory_limit_gb, else node memory / ranks on the node) is recorded as
// "oom" (exit 5) before anything is allocated. Stop signals are handled from the start:
// between set-up phases they end the run as "preempted" (128+signal), and a phase
// that does not return within 10 s of the signal is ended by a watchdog. Once the metrics file
// exists, every failure is recorded in its /status (failed, oom, preempted) before returning the
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
  bool fit = false;  // with estimate_memory: the table of memory techniques (common/memory_fit.h)
  int world_size = 0;  // > 0: plan for this world size (--estimate-memory, --max-micro-batch)
  bool max_micro_batch = false;  // search the largest fitting micro-batch (max_micro_batch.h)
  double safety_margin = 0.10;   // of the budget, for --max-micro-batch
  // --probe: measure the GEMM and the link this config's run would get, print one JSON line
  // on rank 0 and exit 0 (trainer/docs/run.md § Probe); no run directory is written.
  bool probe = false;
  // The command line as given (argv[0] first): a run on a GPU execs `trainer_cuda` with it
  // (trainer/metrics/device.h, cudaTrainerPath).
  std::vector<std::string> argv;
};

int runSession(const SessionOptions& opts);

}  // namespace ftb
