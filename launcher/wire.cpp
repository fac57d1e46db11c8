// Messages as JSON objects (nlohmann-json), sent as CBOR: field names make a
// malformed or mismatched message fail loudly, and CBOR carries stderr bytes that
// are not UTF-8 unchanged.
#include "launcher/wire.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace ftb::launcher {

using Json = nlohmann::json;

// Field name = member name, every field required on decode (a missing one throws): the
// object each macro writes is the one the hand-written functions wrote before.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(IfAddr, name, ip, prefix, loopback)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(NodeInfo, node, host, ip, iface, chosen, cores, gpus, nproc,
                                   preset, addrs, error, tune_env, bind_cores, cpus, cpu_model, isa,
                                   coretype_fix, coretype_note, worker_env, gpu_source, cpu_core,
                                   cpu_numa)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Failure, time_us, node, host, ip, rank, local_rank, pid,
                                   exit_code, signal, note, stderr_tail)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StopMsg, attempt, from_node, signal, reason)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(NodeEnd, attempt, node, shutdown_signal, all_clean,
                                   stop_exit_code, stop_exit_time_us, failures)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Decision, attempt, restart, exit_code, next_port,
                                   shutdown_signal, failures)

// The plan travels flat (its fields beside `error`), which no macro writes.
void to_json(Json& j, const PlanMsg& v) {
  j = Json{{"error", v.error},
           {"master_addr", v.plan.master_addr},
           {"master_port", v.plan.master_port},
           {"run_id", v.plan.run_id},
           {"max_restarts", v.plan.max_restarts},
           {"source", v.plan.source},
           {"master_why", v.plan.master_why},
           {"nodes", v.plan.nodes}};
}
void from_json(const Json& j, PlanMsg& v) {
  j.at("error").get_to(v.error);
  j.at("master_addr").get_to(v.plan.master_addr);
  j.at("master_port").get_to(v.plan.master_port);
  j.at("run_id").get_to(v.plan.run_id);
  j.at("max_restarts").get_to(v.plan.max_restarts);
  j.at("source").get_to(v.plan.source);
  j.at("master_why").get_to(v.plan.master_why);
  j.at("nodes").get_to(v.plan.nodes);
}

namespace {

template <typename T>
std::string encodeAs(const T& v) {
  std::vector<std::uint8_t> bytes = Json::to_cbor(Json(v));
  return std::string(bytes.begin(), bytes.end());
}

// Any parse error, trailing byte, missing field or wrong type is a DistError.
template <typename T>
T decodeAs(const std::string& b, const char* kind) {
  try {
    return Json::from_cbor(b, /*strict=*/true).get<T>();
  } catch (const Json::exception& e) {
    throw DistError(std::string("malformed ") + kind + " message (" + std::to_string(b.size()) +
                    " bytes): " + e.what());
  }
}

}  // namespace

std::string encode(const NodeInfo& v) { return encodeAs(v); }
std::string encode(const PlanMsg& v) { return encodeAs(v); }
std::string encode(const StopMsg& v) { return encodeAs(v); }
std::string encode(const NodeEnd& v) { return encodeAs(v); }
std::string encode(const Decision& v) { return encodeAs(v); }

NodeInfo decodeNodeInfo(const std::string& b) { return decodeAs<NodeInfo>(b, "node info"); }
PlanMsg decodePlan(const std::string& b) { return decodeAs<PlanMsg>(b, "plan"); }
StopMsg decodeStop(const std::string& b) { return decodeAs<StopMsg>(b, "stop"); }
NodeEnd decodeNodeEnd(const std::string& b) { return decodeAs<NodeEnd>(b, "attempt end"); }
Decision decodeDecision(const std::string& b) { return decodeAs<Decision>(b, "decision"); }

}  // namespace ftb::launcher
