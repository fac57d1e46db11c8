#include "launcher/wire.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace ftb::launcher {
namespace {

Failure sampleFailure() {
  Failure f;
  f.time_us = 1700000000123456;
  f.node = 1;
  f.host = "h";
  f.ip = "10.77.0.12";
  f.rank = 2;
  f.local_rank = 0;
  f.pid = 4242;
  f.signal = 9;
  f.note = "n";
  f.stderr_tail = {"line 1", "", "line\x00 3"};
  return f;
}

// The messages as the previous, hand-written to_json functions wrote them (JSON of the CBOR,
// keys sorted; produced by that code from these samples): the wire format is unchanged, so
// launchers of both builds still talk to each other.
Failure sampleWireFailure() {
  Failure f;
  f.time_us = 1700000000123456;
  f.node = 1;
  f.host = "h";
  f.ip = "10.77.0.12";
  f.rank = 2;
  f.local_rank = 0;
  f.pid = 4242;
  f.exit_code = 1;
  f.signal = 9;
  f.note = "n";
  f.stderr_tail = {"line 1", ""};
  return f;
}
NodeInfo sampleNodeInfo() {
  NodeInfo n;
  n.node = 3;
  n.host = "host-a";
  n.ip = "10.0.0.3";
  n.iface = "eth0";
  n.chosen = true;
  n.cores = 64;
  n.gpus = {"0", "1"};
  n.nproc = 8;
  n.preset = {{"OMP_NUM_THREADS", "2"}};
  n.addrs = {{"lo", "127.0.0.1", 8, true}};
  n.error = "boom";
  n.cpu_model = "cpu";
  n.worker_env = "A=1";
  return n;
}
PlanMsg samplePlan() {
  PlanMsg p;
  p.plan.nodes.resize(1);
  p.plan.nodes[0].host = "x";
  p.plan.master_addr = "10.0.0.1";
  p.plan.master_port = 1234;
  p.plan.run_id = "rid";
  p.plan.max_restarts = 2;
  p.error = "";
  return p;
}
StopMsg sampleStop() {
  StopMsg s;
  s.attempt = 1;
  s.from_node = 2;
  s.signal = 15;
  s.reason = "r";
  return s;
}
NodeEnd sampleNodeEnd() {
  NodeEnd e;
  e.attempt = 1;
  e.node = 0;
  e.shutdown_signal = 15;
  e.all_clean = false;
  e.stop_exit_code = 0;
  e.stop_exit_time_us = 5;
  e.failures = {sampleWireFailure()};
  return e;
}
Decision sampleDecision() {
  Decision d;
  d.attempt = 2;
  d.restart = true;
  d.exit_code = 0;
  d.next_port = 29501;
  d.shutdown_signal = 0;
  d.failures = {sampleWireFailure()};
  return d;
}

std::string jsonOf(const std::string& cbor) { return nlohmann::json::from_cbor(cbor).dump(); }

TEST(Wire, FormatIsTheOneTheHandWrittenFunctionsWrote) {
  // The hand-written format plus the placement fields (gpu_source, cpu_core, cpu_numa,
  // master_why): every field by its member name, keys sorted.
  EXPECT_EQ(jsonOf(encode(sampleNodeInfo())),
            R"({"addrs":[{"ip":"127.0.0.1","loopback":true,"name":"lo","prefix":8}],)"
            R"("bind_cores":false,"chosen":true,"cores":64,"coretype_fix":"","coretype_note":"",)"
            R"("cpu_core":[],"cpu_model":"cpu","cpu_numa":[],"cpus":[],"error":"boom",)"
            R"("gpu_source":"","gpus":["0","1"],"host":"host-a",)"
            R"("iface":"eth0","ip":"10.0.0.3","isa":"","node":3,"nproc":8,)"
            R"("preset":{"OMP_NUM_THREADS":"2"},"tune_env":true,"worker_env":"A=1"})");
  EXPECT_EQ(jsonOf(encode(samplePlan())),
            R"({"error":"","master_addr":"10.0.0.1","master_port":1234,"master_why":"",)"
            R"("max_restarts":2,"nodes":[{"addrs":[],"bind_cores":false,"chosen":false,)"
            R"("cores":1,"coretype_fix":"","coretype_note":"","cpu_core":[],"cpu_model":"",)"
            R"("cpu_numa":[],"cpus":[],"error":"","gpu_source":"","gpus":[],"host":"x",)"
            R"("iface":"","ip":"","isa":"","node":0,"nproc":1,"preset":{},"tune_env":true,)"
            R"("worker_env":""}],"run_id":"rid","source":""})");
  EXPECT_EQ(jsonOf(encode(sampleStop())),
            R"({"attempt":1,"from_node":2,"reason":"r","signal":15})");
  EXPECT_EQ(jsonOf(encode(sampleNodeEnd())),
            R"({"all_clean":false,"attempt":1,"failures":[{"exit_code":1,"host":"h",)"
            R"("ip":"10.77.0.12","local_rank":0,"node":1,"note":"n","pid":4242,"rank":2,)"
            R"("signal":9,)"
            R"("stderr_tail":["line 1",""],"time_us":1700000000123456}],"node":0,)"
            R"("shutdown_signal":15,"stop_exit_code":0,"stop_exit_time_us":5})");
  EXPECT_EQ(jsonOf(encode(sampleDecision())),
            R"({"attempt":2,"exit_code":0,"failures":[{"exit_code":1,"host":"h","ip":"10.77.0.12",)"
            R"("local_rank":0,"node":1,"note":"n","pid":4242,"rank":2,"signal":9,)"
            R"("stderr_tail":["line 1",""],"time_us":1700000000123456}],"next_port":29501,)"
            R"("restart":true,"shutdown_signal":0})");
}

TEST(Wire, NodeInfoRoundTrip) {
  NodeInfo n;
  n.node = 3;
  n.host = "host-a";
  n.ip = "10.0.0.3";
  n.iface = "eth0";
  n.chosen = true;
  n.cores = 64;
  n.gpus = {"0", "1"};
  n.gpu_source = "ids 0,1 from SLURM_JOB_GPUS";
  n.cpus = {0, 8, 1, 9};
  n.cpu_core = {0, 0, 1, 1};
  n.cpu_numa = {0, 0, 1, -1};
  n.nproc = 8;
  n.preset = {{"OMP_NUM_THREADS", "2"}};
  n.addrs = {{"lo", "127.0.0.1", 8, true}, {"eth0", "10.0.0.3", 24, false}};
  n.error = "boom";
  NodeInfo m = decodeNodeInfo(encode(n));
  EXPECT_EQ(m.node, 3);
  EXPECT_EQ(m.host, "host-a");
  EXPECT_EQ(m.ip, "10.0.0.3");
  EXPECT_EQ(m.iface, "eth0");
  EXPECT_TRUE(m.chosen);
  EXPECT_EQ(m.cores, 64);
  EXPECT_EQ(m.gpus, n.gpus);
  EXPECT_EQ(m.gpu_source, n.gpu_source);
  EXPECT_EQ(m.cpus, n.cpus);
  EXPECT_EQ(m.cpu_core, n.cpu_core);
  EXPECT_EQ(m.cpu_numa, n.cpu_numa);
  EXPECT_EQ(m.nproc, 8);
  EXPECT_EQ(m.preset, n.preset);
  ASSERT_EQ(m.addrs.size(), 2u);
  EXPECT_TRUE(m.addrs[0].loopback);
  EXPECT_EQ(m.addrs[1].prefix, 24);
  EXPECT_EQ(m.error, "boom");
}

TEST(Wire, PlanDecisionEndStopRoundTrip) {
  PlanMsg p;
  p.plan.nodes.resize(2);
  p.plan.nodes[1].host = "x";
  p.plan.master_addr = "10.0.0.1";
  p.plan.master_port = 1234;
  p.plan.run_id = "rid";
  p.plan.max_restarts = 3;
  p.plan.source = "mpi";
  p.plan.master_why = "eth0 10.0.0.1/24: its subnet holds an address of 1 of 1 other node(s)";
  PlanMsg q = decodePlan(encode(p));
  EXPECT_EQ(q.plan.master_why, p.plan.master_why);
  EXPECT_EQ(q.plan.nodes.size(), 2u);
  EXPECT_EQ(q.plan.nodes[1].host, "x");
  EXPECT_EQ(q.plan.master_port, 1234);
  EXPECT_EQ(q.plan.run_id, "rid");
  EXPECT_EQ(q.plan.max_restarts, 3);

  NodeEnd e;
  e.attempt = 2;
  e.node = 1;
  e.failures = {sampleFailure()};
  e.shutdown_signal = 15;
  e.all_clean = false;
  e.stop_exit_code = 75;
  e.stop_exit_time_us = 1700000000654321;
  NodeEnd e2 = decodeNodeEnd(encode(e));
  EXPECT_EQ(e2.stop_exit_code, 75);
  EXPECT_EQ(e2.stop_exit_time_us, 1700000000654321);
  EXPECT_EQ(e2.attempt, 2);
  EXPECT_EQ(e2.shutdown_signal, 15);
  EXPECT_FALSE(e2.all_clean);
  ASSERT_EQ(e2.failures.size(), 1u);
  EXPECT_EQ(e2.failures[0].time_us, 1700000000123456);
  EXPECT_EQ(e2.failures[0].stderr_tail, sampleFailure().stderr_tail);
  EXPECT_EQ(e2.failures[0].code(), 137);

  Decision d;
  d.attempt = 1;
  d.restart = true;
  d.exit_code = 137;
  d.next_port = 999;
  d.failures = e.failures;
  Decision d2 = decodeDecision(encode(d));
  EXPECT_TRUE(d2.restart);
  EXPECT_EQ(d2.next_port, 999);
  EXPECT_EQ(d2.failures[0].pid, 4242);

  StopMsg s{4, 1, 0, "rank 2 exited"};
  StopMsg s2 = decodeStop(encode(s));
  EXPECT_EQ(s2.attempt, 4);
  EXPECT_EQ(s2.from_node, 1);
  EXPECT_EQ(s2.reason, "rank 2 exited");
}

TEST(Wire, MalformedIsDistError) {
  std::string b = encode(StopMsg{1, 2, 3, "why"});
  EXPECT_THROW(decodeStop(b.substr(0, b.size() - 1)), DistError);
  EXPECT_THROW(decodeStop(b + "x"), DistError);
  EXPECT_THROW(decodeNodeEnd(std::string(8, '\xff')), DistError);
}

}  // namespace
}  // namespace ftb::launcher
