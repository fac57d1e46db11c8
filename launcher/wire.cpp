// Messages as JSON objects (nlohmann-json), sent as CBOR: field names make a
// malformed or mismatched message fail loudly, and CBOR carries stderr bytes that
// are not UTF-8 unchanged.
#include "launcher/wire.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace ftb::launcher {

using Json = nlohmann::json;

void to_json(Json& j, const IfAddr& a) {
  j = Json{{"name", a.name}, {"ip", a.ip}, {"prefix", a.prefix}, {"loopback", a.loopback}};
}
void from_json(const Json& j, IfAddr& a) {
  j.at("name").get_to(a.name);
  j.at("ip").get_to(a.ip);
  j.at("prefix").get_to(a.prefix);
  j.at("loopback").get_to(a.loopback);
}

void to_json(Json& j, const NodeInfo& v) {
  j = Json{{"node", v.node},   {"host", v.host},   {"ip", v.ip},       {"iface", v.iface},
           {"chosen", v.chosen}, {"cores", v.cores}, {"gpus", v.gpus},   {"nproc", v.nproc},
           {"preset", v.preset}, {"addrs", v.addrs}, {"error", v.error},
           {"tune_env", v.tune_env}, {"bind_cores", v.bind_cores}, {"cpus", v.cpus},
           {"cpu_model", v.cpu_model}, {"isa", v.isa}, {"coretype_fix", v.coretype_fix},
           {"coretype_note", v.coretype_note}, {"worker_env", v.worker_env},
           {"gpu_source", v.gpu_source}, {"cpu_core", v.cpu_core}, {"cpu_numa", v.cpu_numa}};
}
void from_json(const Json& j, NodeInfo& v) {
  j.at("node").get_to(v.node);
  j.at("host").get_to(v.host);
  j.at("ip").get_to(v.ip);
  j.at("iface").get_to(v.iface);
  j.at("chosen").get_to(v.chosen);
  j.at("cores").get_to(v.cores);
  j.at("gpus").get_to(v.gpus);
  j.at("nproc").get_to(v.nproc);
  j.at("preset").get_to(v.preset);
  j.at("addrs").get_to(v.addrs);
  j.at("error").get_to(v.error);
  j.at("tune_env").get_to(v.tune_env);
  j.at("bind_cores").get_to(v.bind_cores);
  j.at("cpus").get_to(v.cpus);
  j.at("cpu_model").get_to(v.cpu_model);
  j.at("isa").get_to(v.isa);
  j.at("coretype_fix").get_to(v.coretype_fix);
  j.at("coretype_note").get_to(v.coretype_note);
  j.at("worker_env").get_to(v.worker_env);
  j.at("gpu_source").get_to(v.gpu_source);
  j.at("cpu_core").get_to(v.cpu_core);
  j.at("cpu_numa").get_to(v.cpu_numa);
}

void to_json(Json& j, const Failure& f) {
  j = Json{{"time_us", f.time_us},   {"node", f.node}, {"host", f.host},
           {"ip", f.ip},             {"rank", f.rank}, {"local_rank", f.local_rank},
           {"pid", f.pid},           {"exit_code", f.exit_code}, {"signal", f.signal},
           {"note", f.note},         {"stderr_tail", f.stderr_tail}};
}
void from_json(const Json& j, Failure& f) {
  j.at("time_us").get_to(f.time_us);
  j.at("node").get_to(f.node);
  j.at("host").get_to(f.host);
  j.at("ip").get_to(f.ip);
  j.at("rank").get_to(f.rank);
  j.at("local_rank").get_to(f.local_rank);
  j.at("pid").get_to(f.pid);
  j.at("exit_code").get_to(f.exit_code);
  j.at("signal").get_to(f.signal);
  j.at("note").get_to(f.note);
  j.at("stderr_tail").get_to(f.stderr_tail);
}

void to_json(Json& j, const PlanMsg& v) {
  j = Json{{"error", v.error},          {"master_addr", v.plan.master_addr},
           {"master_port", v.plan.master_port}, {"run_id", v.plan.run_id},
           {"max_restarts", v.plan.max_restarts}, {"source", v.plan.source},
           {"master_why", v.plan.master_why}, {"nodes", v.plan.nodes}};
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

void to_json(Json& j, const StopMsg& v) {
  j = Json{{"attempt", v.attempt}, {"from_node", v.from_node}, {"signal", v.signal},
           {"reason", v.reason}};
}
void from_json(const Json& j, StopMsg& v) {
  j.at("attempt").get_to(v.attempt);
  j.at("from_node").get_to(v.from_node);
  j.at("signal").get_to(v.signal);
  j.at("reason").get_to(v.reason);
}

void to_json(Json& j, const NodeEnd& v) {
  j = Json{{"attempt", v.attempt},
           {"node", v.node},
           {"shutdown_signal", v.shutdown_signal},
           {"all_clean", v.all_clean},
           {"stop_exit_code", v.stop_exit_code},
           {"stop_exit_time_us", v.stop_exit_time_us},
           {"failures", v.failures}};
}
void from_json(const Json& j, NodeEnd& v) {
  j.at("attempt").get_to(v.attempt);
  j.at("node").get_to(v.node);
  j.at("shutdown_signal").get_to(v.shutdown_signal);
  j.at("all_clean").get_to(v.all_clean);
  j.at("stop_exit_code").get_to(v.stop_exit_code);
  j.at("stop_exit_time_us").get_to(v.stop_exit_time_us);
  j.at("failures").get_to(v.failures);
}

void to_json(Json& j, const Decision& v) {
  j = Json{{"attempt", v.attempt},     {"restart", v.restart},
           {"exit_code", v.exit_code}, {"next_port", v.next_port},
           {"shutdown_signal", v.shutdown_signal}, {"failures", v.failures}};
}
void from_json(const Json& j, Decision& v) {
  j.at("attempt").get_to(v.attempt);
  j.at("restart").get_to(v.restart);
  j.at("exit_code").get_to(v.exit_code);
  j.at("next_port").get_to(v.next_port);
  j.at("shutdown_signal").get_to(v.shutdown_signal);
  j.at("failures").get_to(v.failures);
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
