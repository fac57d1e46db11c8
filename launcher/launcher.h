// One node's launcher: rendezvous, then attempts until success, a final failure, or a
// shutdown signal. Node 0 coordinates; see outcome.h for the per-attempt protocol.
//
// Contract: run() returns the exit code every launcher of the job agreed on (0, the root
// cause worker's code or 128+signal, 2 for bad input found on any node). It throws
// FtbError when the launchers cannot agree (timeout, malformed message); the caller must
// then abort the whole job.
#pragma once

#include <optional>
#include <string>

#include "launcher/local_node.h"
#include "launcher/placement.h"
#include "launcher/runtime.h"

namespace ftb::launcher {

class Launcher {
 public:
  // `reaper` (may be null) learns every worker's process group.
  Launcher(const LaunchOptions& opts, Transport& transport, SignalChannel& signals,
           Clock::time_point start, Reaper* reaper = nullptr);
  int run();

 private:
  // Gathers every node's NodeInfo on node 0, which builds the plan and sends it back.
  // Returns nullopt (after node 0 printed why) when a node reported bad input.
  std::optional<Plan> rendezvous();
  Decision finishAttempt(const NodeEnd& end);
  // Waits for a message with `tag` until `deadline` (none = no limit until a stop is known;
  // a stop then sets it to now + grace + slack). Meanwhile handles signals and STOPs.
  Message await(int tag, int attempt, std::optional<Clock::time_point> deadline,
                const std::string& what);
  std::string describeNode(int node) const;  // "node 1 (host h, 10.77.0.12)"
  // Node 0: the workers' MASTER_PORT for the next attempt: --master-port, else a port
  // reserved until the next call or the launcher's exit (a worker's SO_REUSEADDR server
  // binds it; no other job can take it in between), never `avoid`.
  int holdMasterPort(int avoid);

  Runtime rt_;
  Plan plan_;
  ReservedPort master_port_hold_;
};

}  // namespace ftb::launcher
