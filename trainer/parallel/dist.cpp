#include "trainer/parallel/dist.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/error.h"
#include "common/fd.h"
#include "common/log.h"
#include "trainer/metrics/device.h"
#include "trainer/parallel/backend.h"
#include "trainer/parallel/hier_comm.h"
#include "trainer/parallel/local_comm.h"
#include "trainer/parallel/local_link.h"
#include "trainer/parallel/local_memory.h"

namespace ftb {
namespace {

// The local IPv4 address the kernel would use to reach `host` (no packet is sent).
// Falls back to "" (Gloo then resolves the hostname) when `host` cannot be resolved.
std::string localAddressTowards(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  Fd s(socket(AF_INET, SOCK_DGRAM, 0));
  std::string out;
  if (s.get() >= 0 && connect(s.get(), res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (getsockname(s.get(), reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf))) out = buf;
    }
  }
  freeaddrinfo(res);
  return out;
}

std::string where(const DistEnv& env) {
  std::ostringstream os;
  os << "rank " << env.rank << "/" << env.world_size << " on " << hostName();
  return os.str();
}

}  // namespace

Distributed initDistributed(const DistEnv& env, std::chrono::milliseconds timeout,
                            const std::string& backend, const std::string& local_collectives) {
  Distributed d;
  d.env = env;
  d.backend = backend;
  d.local_collectives = local_collectives;
  if (env.world_size == 1) {
    d.world = makeSelfComm();
    return d;
  }
  std::string master = env.master_addr + ":" + std::to_string(env.master_port);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = env.rank == 0 && !env.agent_store;
  opts.numWorkers = env.world_size;
  opts.waitWorkers = true;
  opts.timeout = timeout;
  try {
    d.store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const std::exception& e) {
    throw DistError(
        where(env) + ": TCPStore at " + master + " (" +
        (opts.isServer
             ? "serving, waiting for all " + std::to_string(env.world_size) + " ranks to connect"
             : std::string(env.agent_store ? "connecting to torchrun's agent store"
                                           : "connecting to rank 0")) +
        ") failed after at most " + std::to_string(timeout.count() / 1000) +
        " s: " + firstLine(e.what()));
  }
  d.timeout = timeout;
  const std::string my_ip = localAddressTowards(env.master_addr);
  const std::vector<std::string> where_all =
      gatherThroughStore(*d.store, "ftb/members/", env.rank, env.world_size,
                         hostName() + "\n" + my_ip, "host and address");
  for (int r = 0; r < env.world_size; ++r) {
    const std::string& v = where_all[r];
    const size_t nl = v.find('\n');
    d.members.push_back(
        CommMember{r, v.substr(0, nl), nl == std::string::npos ? "" : v.substr(nl + 1)});
  }
  std::vector<int> all(env.world_size);
  for (int r = 0; r < env.world_size; ++r) all[r] = r;
  d.world = d.newGroup("world", all);
  return d;
}

namespace {

std::unique_ptr<Comm> makeGroup(Distributed& d, const std::string& name,
                                const std::vector<int>& ranks, std::string* how);

// Where a multi-rank group's collectives run (parallel.local_collectives = "auto"): in
// memory when every member is on this host; in two levels (hier_comm.h) when the group
// spans hosts host-major with the same number of members on each; else on `comm`, the
// backend. Collective over the group; every member takes the same decision.
std::unique_ptr<Comm> placeCollectives(Distributed& d, const std::string& name,
                                       const std::vector<int>& ranks, std::unique_ptr<Comm> comm,
                                       c10d::Store& store, std::string* how) {
  const int me = comm->rank(), n = comm->size();
  HostPlan plan =
      planHosts(gatherThroughStore(store, "hosts/", me, n, localHostKey(), "host keys"), me);
  if (plan.hosts == 1) return makeLocalComm(std::move(comm), store, ranks, d.timeout, how);
  if (!plan.why_not.empty()) {
    *how = "backend (" + std::to_string(plan.hosts) + " hosts: " + plan.why_not + ")";
    return comm;
  }
  std::vector<int> host_ranks, peer_ranks;
  for (int g = 0; g < n; ++g) {
    if (g / plan.per_host == plan.host) host_ranks.push_back(ranks[g]);
    if (g % plan.per_host == plan.local) peer_ranks.push_back(ranks[g]);
  }
  std::string intra_how, cross_how;  // cross: "backend (N hosts: one rank per host)"
  auto intra = makeGroup(d, name + "/host" + std::to_string(plan.host), host_ranks, &intra_how);
  auto cross = makeGroup(d, name + "/peers" + std::to_string(plan.local), peer_ranks, &cross_how);
  *how = "hierarchical: " + intra_how + " among the " + std::to_string(plan.per_host) +
         " ranks of each host, backend across the " + std::to_string(plan.hosts) + " hosts";
  return makeHierarchicalComm(std::move(comm), std::move(intra), std::move(cross));
}

// newGroup() without recording: `*how` gets the transport ("" for a size-1 group or
// parallel.local_collectives = "off").
std::unique_ptr<Comm> makeGroup(Distributed& d, const std::string& name,
                                const std::vector<int>& ranks, std::string* how) {
  const DistEnv& env = d.env;
  auto it = std::find(ranks.begin(), ranks.end(), env.rank);
  if (it == ranks.end()) throw DistError(where(env) + ": not a member of group " + name);
  if (ranks.size() == 1) return makeSelfComm();
  std::string master = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, d.store);
    auto pg = makeBackend(resolveBackend(d.backend, computeOnCuda()), prefixed,
                          static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()),
                          d.timeout, localAddressTowards(env.master_addr));
    std::vector<CommMember> members;
    if (d.members.size() == static_cast<size_t>(env.world_size))
      for (int r : ranks) members.push_back(d.members[r]);
    std::unique_ptr<Comm> comm = makeBackendComm(pg, d.timeout, std::move(members));
    if (d.local_collectives == "off") return comm;
    return placeCollectives(d, name, ranks, std::move(comm), *prefixed, how);
  } catch (const FtbError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(where(env) + ": " +
                    std::string(resolveBackend(d.backend, computeOnCuda()) == BackendKind::kNccl
                                    ? "NCCL"
                                    : "Gloo") +
                    " rendezvous of group '" + name + "' (" + std::to_string(ranks.size()) +
                    " ranks) through " + master +
                    " (waiting for all members to connect) failed: " + firstLine(e.what()));
  }
}

}  // namespace

std::unique_ptr<Comm> Distributed::newGroup(const std::string& name,
                                            const std::vector<int>& ranks) {
  std::string how;
  std::unique_ptr<Comm> comm = makeGroup(*this, name, ranks, &how);
  if (!how.empty()) transports.push_back(name + ": " + how);
  return comm;
}

std::unique_ptr<P2PLink> Distributed::newLink(const std::string& name, const PeerInfo& peer) {
  if (peer.rank == env.rank || !store)
    throw DistError(where(env) + ": a point-to-point link needs another rank, got " + peer.text());
  const int me = env.rank < peer.rank ? 0 : 1;
  const std::vector<int> ranks = {std::min(env.rank, peer.rank), std::max(env.rank, peer.rank)};
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(name, store);
    std::string why = "parallel.pp_local_p2p = false";
    if (pp_local_p2p && !computeOnCuda()) {
      if (auto link = makeLocalLink(*prefixed, me, ranks, peer, timeout, &why)) {
        transports.push_back(name + ": " + link->transport());
        return link;
      }
    } else if (computeOnCuda()) {
      why = "tensors on the GPU";
    }
    auto pg = makeBackend(resolveBackend(backend), prefixed, me, 2, timeout,
                          localAddressTowards(env.master_addr));
    auto link = makeBackendLink(pg, 1 - me, peer, timeout);
    transports.push_back(name + ": " + link->transport() + " (" + why + ")");
    return link;
  } catch (const FtbError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(where(env) + ": rendezvous of point-to-point link '" + name + "' with " +
                    peer.text() + " through " + env.master_addr + ":" +
                    std::to_string(env.master_port) + " failed: " + firstLine(e.what()));
  }
}

std::vector<std::string> gatherThroughStore(c10d::Store& store, const std::string& prefix, int me,
                                            int n, const std::string& value,
                                            const std::string& what) {
  // Every value is sent with a one-byte prefix. c10d 1.13's TCPStore server sends a
  // value's 8-byte length with MSG_MORE and then the value; for an empty value nothing
  // uncorks the length, so the GET waits for the kernel's 200 ms cork timeout (measured
  // with strace -T: 0.2 s per gather of "", 0.44 s of a 1 MB checkpoint save at world 2).
  std::vector<uint8_t> framed{'v'};
  framed.insert(framed.end(), value.begin(), value.end());
  store.set(prefix + std::to_string(me), framed);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) {
    std::string k = prefix + std::to_string(r);
    try {
      store.wait({k});
    } catch (const std::exception& e) {
      throw DistError(logPrefix() + ": waiting for member " + std::to_string(r) + " to publish '" +
                      what + "' in the store: " + firstLine(e.what()));
    }
    std::vector<uint8_t> v = store.get(k);
    if (v.empty() || v[0] != 'v')
      throw DistError(logPrefix() + ": member " + std::to_string(r) + "'s value for '" + what +
                      "' in the store is not one gatherThroughStore wrote (" +
                      std::to_string(v.size()) + " bytes, no 'v' prefix)");
    out.emplace_back(v.begin() + 1, v.end());
  }
  return out;
}

std::vector<std::string> Distributed::allGatherString(const std::string& key,
                                                      const std::string& value) {
  if (!store) return {value};
  return gatherThroughStore(*store, "ftb/" + key + "/", env.rank, env.world_size, value, key);
}

void Distributed::leaveAfterGather(const std::string& key) {
  if (!store) return;
  const std::string prefix = "ftb/" + key + "/left/";
  if (env.rank != 0) {
    store->set(prefix + std::to_string(env.rank), std::vector<uint8_t>{'v'});
    return;
  }
  const auto bound = std::min(timeout, std::chrono::milliseconds(10000));
  for (int r = 1; r < env.world_size; ++r) {
    try {
      store->wait({prefix + std::to_string(r)}, bound);
    } catch (const std::exception& e) {
      FTB_WARN(where(env) << ": rank " << r << " did not confirm reading '" << key << "' within "
                          << bound.count() / 1000.0
                          << " s; leaving anyway: " << firstLine(e.what()));
      return;
    }
  }
}

}  // namespace ftb
