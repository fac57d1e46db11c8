#include "launcher/launcher.h"

#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "common/error.h"
#include "common/log.h"
#include "launcher/env_probe.h"
#include "launcher/local_node.h"
#include "launcher/report.h"
#include "launcher/supervisor.h"

extern char** environ;

namespace ftb::launcher {
Launcher::Launcher(const LaunchOptions& opts, Transport& transport, SignalChannel& signals,
                   Clock::time_point start, Reaper* reaper)
    : rt_(opts, transport, signals, inheritableEnv(environ), allowedCpus(), start) {
  rt_.reaper = reaper;
}

std::string Launcher::describeNode(int node) const {
  if (node < static_cast<int>(plan_.nodes.size())) {
    const NodeInfo& n = plan_.nodes[node];
    return "node " + std::to_string(node) + " (host " + n.host + ", " + n.ip + ")";
  }
  std::string host = node == rt_.transport.rank() ? "host " + hostName() + ", " : "";
  std::string what = rt_.opts.tcpRendezvous() ? "node rank " : "MPI rank ";
  return "node " + std::to_string(node) + " (" + host + what + std::to_string(node) + ")";
}

Message Launcher::await(int tag, int attempt, std::optional<Clock::time_point> deadline,
                        const std::string& what) {
  auto& t = rt_.transport;
  const auto t0 = Clock::now();
  const double stop_wait = rt_.opts.grace_s + kKillWaitS + kStopSlackS;
  bool noted = false;
  for (int polls = 0;; ++polls) {
    if (auto m = t.tryRecv(tag)) return *m;
    for (int sig : rt_.signals.drain()) {
      if (!isShutdownSignal(sig)) continue;
      if (attempt < 0) {  // rendezvous: nothing started yet
        throw FtbError(describeNode(t.rank()) + ": " + signalName(sig) + " while " + what,
                       128 + sig);
      }
      if (!rt_.shutdown_signal) {
        rt_.shutdown_signal = sig;
        rt_.broadcastStop(attempt, sig,
                          "launcher on " + describeNode(t.rank()) + " received " + signalName(sig));
      }
    }
    if (attempt >= 0) {
      rt_.pollStops();
      if (!deadline && rt_.stops.count(attempt)) deadline = after(stop_wait);
    }
    if (!noted && Clock::now() - t0 > std::chrono::seconds(2)) {
      FTB_INFO("still " << what);
      noted = true;
    }
    if (deadline && Clock::now() > *deadline)
      throw DistError(describeNode(t.rank()) + ": timed out after " +
                      std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) +
                      " s " + what + " (" + t.describe() + ")");
    pollfd p{rt_.signals.fd(), POLLIN, 0};
    poll(&p, 1, polls < 200 ? 1 : 10);  // fast at first: rendezvous latency matters
  }
}

std::optional<Plan> Launcher::rendezvous() {
  auto& t = rt_.transport;
  NodeInfo me = localNodeInfo(rt_.opts, t.rank(), &rt_.program_path);
  if (rt_.opts.dry_run && me.error.empty())
    me.worker_env = probeWorkerEnv(me, rt_.program_path, rt_.inherited_env);
  t.send(0, kTagInfo, encode(me));
  const auto deadline = after(rt_.opts.rdzv_timeout_s);
  PlanMsg msg;
  if (t.rank() == 0) {
    std::vector<std::optional<NodeInfo>> nodes(t.size());
    for (int got = 0; got < t.size(); ++got) {
      std::string missing;
      for (int n = 0; n < t.size(); ++n)
        if (!nodes[n]) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
      Message m = await(
          kTagInfo, -1, deadline,
          "waiting at rendezvous for node info from " +
              std::string(rt_.opts.tcpRendezvous() ? "node rank(s) " : "MPI rank(s) ") + missing);
      nodes[m.source] = decodeNodeInfo(m.payload);
      nodes[m.source]->node = m.source;
    }
    for (auto& n : nodes) {
      msg.plan.nodes.push_back(*n);
      if (msg.error.empty() && !n->error.empty())
        msg.error = "node " + std::to_string(n->node) + " (host " + n->host + "): " + n->error;
    }
    Plan& p = msg.plan;
    p.source = rt_.opts.tcpRendezvous() ? "TCP rendezvous (--nnodes)"
               : t.size() > 1           ? "mpi"
                                        : "this node";
    p.master_addr = assignAddresses(p.nodes, &p.master_why);
    p.run_id = rt_.opts.run_id.empty() ? generateRunId() : rt_.opts.run_id;
    p.max_restarts = rt_.opts.max_restarts;
    if (msg.error.empty()) p.master_port = holdMasterPort(0);
    for (auto& n : p.nodes) n.addrs.clear();  // only needed for assignAddresses
    for (int n = 1; n < t.size(); ++n) t.send(n, kTagPlan, encode(msg));
  } else {
    msg = decodePlan(await(kTagPlan, -1, deadline + std::chrono::seconds(5),
                           "waiting for the placement plan from node 0")
                         .payload);
  }
  if (!msg.error.empty()) {
    if (t.rank() == 0) FTB_ERROR(msg.error);
    return std::nullopt;
  }
  return msg.plan;
}

int Launcher::holdMasterPort(int avoid) {
  if (rt_.opts.master_port) return rt_.opts.master_port;
  master_port_hold_ = reserveFreePort(avoid);
  return master_port_hold_.port;
}

Decision Launcher::finishAttempt(const NodeEnd& end) {
  auto& t = rt_.transport;
  const int attempt = end.attempt;
  const double stop_wait = rt_.opts.grace_s + kKillWaitS + kStopSlackS;
  t.send(0, kTagEnd, encode(end));
  const bool known =
      !end.failures.empty() || isShutdownSignal(end.shutdown_signal) || rt_.stops.count(attempt);
  std::optional<Clock::time_point> deadline;
  if (known) deadline = after(stop_wait);
  if (t.rank() != 0) {
    if (deadline) *deadline += after(stop_wait) - Clock::now();  // node 0 waits too
    return decodeDecision(
        await(kTagDecision, attempt, deadline,
              "waiting for node 0's decision after attempt " + std::to_string(attempt))
            .payload);
  }
  std::vector<std::optional<NodeEnd>> ends(t.size());
  for (int got = 0; got < t.size();) {
    std::string missing;
    for (int n = 0; n < t.size(); ++n)
      if (!ends[n]) missing += (missing.empty() ? "" : ", ") + describeNode(n);
    Message m = await(kTagEnd, attempt, deadline,
                      "waiting for the end of attempt " + std::to_string(attempt) + " on " +
                          missing + " (workers still running there)");
    NodeEnd e = decodeNodeEnd(m.payload);
    if (e.attempt != attempt || ends[m.source]) continue;  // stale or duplicate
    if (!deadline && (!e.failures.empty() || isShutdownSignal(e.shutdown_signal)))
      deadline = after(stop_wait);
    ends[m.source] = std::move(e);
    ++got;
  }
  std::vector<NodeEnd> all;
  for (auto& e : ends) all.push_back(*e);
  auto late = rt_.stop_signals.find(attempt);
  Decision d = decide(all, attempt, rt_.opts.max_restarts,
                      late == rt_.stop_signals.end() ? 0 : late->second);
  if (d.restart) d.next_port = holdMasterPort(plan_.master_port);
  for (int n = 1; n < t.size(); ++n) t.send(n, kTagDecision, encode(d));
  return d;
}

int Launcher::run() {
  auto& t = rt_.transport;
  setLogPrefix("[launcher node " + std::to_string(t.rank()) + "/" + std::to_string(t.size()) + " " +
               hostName() + "]");
  FTB_DEBUG(t.describe() << " ready " << msSince(rt_.start) << " ms after start");
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (std::getenv("OMPI_MCA_orte_bound_at_launch") && online > 0 &&
      static_cast<long>(rt_.cpus.size()) < online)
    FTB_WARN("mpirun bound this launcher to " << rt_.cpus.size() << " of " << online
                                              << " CPUs and every worker inherits that; "
                                                 "run mpirun with --bind-to none");
  auto plan = rendezvous();
  if (!plan) return kExitBadInput;
  FTB_DEBUG("rendezvous done " << msSince(rt_.start) << " ms after start");
  plan_ = *plan;
  const NodeInfo& me = plan_.nodes[t.rank()];
  setLogPrefix("[launcher node " + std::to_string(t.rank()) + "/" + std::to_string(t.size()) + " " +
               me.host + " " + me.ip + "]");
  if (rt_.opts.dry_run) {
    if (t.rank() == 0)
      writeDryRunReport(std::cout, plan_, rt_.program_path, rt_.opts.program, environList(),
                        dryRunView(rt_.opts));
    std::cout << std::flush;
    return 0;
  }
  if (t.rank() == 0)
    FTB_INFO(t.describe() << "; run id " << plan_.run_id << "; MASTER_ADDR:PORT "
                          << plan_.master_addr << ":" << plan_.master_port << " (MASTER_ADDR "
                          << plan_.master_why << ")\n"
                          << placementTable(plan_) << gpuSources(plan_));
  for (int attempt = 0;; ++attempt) {
    NodeEnd end = Supervisor(rt_, plan_, attempt).run();
    FTB_DEBUG("attempt " << attempt << " ended locally " << msSince(rt_.start)
                         << " ms after start");
    Decision d = finishAttempt(end);
    FTB_DEBUG("decision " << (d.restart ? "restart" : "exit " + std::to_string(d.exit_code)) << " "
                          << msSince(rt_.start) << " ms after start");
    if (d.restart) {
      plan_.master_port = d.next_port;
      if (t.rank() == 0)
        FTB_WARN("restart " << attempt + 1 << " of " << rt_.opts.max_restarts << " after rank "
                            << d.failures.front().rank << " " << d.failures.front().describe()
                            << "; new MASTER_PORT " << plan_.master_port);
      continue;
    }
    if (t.rank() == 0 && d.exit_code != 0) {
      std::string report = failureReport(d, rt_.opts.max_restarts);
      fputs(report.c_str(), stderr);
      fflush(stderr);
    }
    return d.exit_code;
  }
}

}  // namespace ftb::launcher
