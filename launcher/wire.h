// Byte encoding of the messages launchers exchange (rendezvous, stop, end, decision).
//
// Contract: decode(encode(x)) == x (nlohmann-json objects, CBOR bytes). Decoding malformed
// bytes, a missing field or a wrong type throws DistError naming the
// message kind; peers always run the same launcher binary, so there is no versioning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/outcome.h"
#include "launcher/placement.h"

namespace ftb::launcher {

// Message tags; one MPI tag per kind.
enum Tag : int { kTagInfo = 11, kTagPlan = 12, kTagStop = 13, kTagEnd = 14, kTagDecision = 15 };

// A request to stop every worker of `attempt` (a failure or a shutdown signal elsewhere).
struct StopMsg {
  int attempt = 0;
  int from_node = 0;
  int signal = 0;      // shutdown signal that caused it, 0 for a worker failure
  std::string reason;  // for the log: "rank 2 exited with SIGKILL (137)"
};

// A Plan is sent with an `error` field: non-empty means every node must exit 2 with it.
struct PlanMsg {
  Plan plan;
  std::string error;
};

std::string encode(const NodeInfo& v);
std::string encode(const PlanMsg& v);
std::string encode(const StopMsg& v);
std::string encode(const NodeEnd& v);
std::string encode(const Decision& v);

NodeInfo decodeNodeInfo(const std::string& b);
PlanMsg decodePlan(const std::string& b);
StopMsg decodeStop(const std::string& b);
NodeEnd decodeNodeEnd(const std::string& b);
Decision decodeDecision(const std::string& b);

}  // namespace ftb::launcher
