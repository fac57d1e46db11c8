// Process-group bring-up: TCPStore at MASTER_ADDR:MASTER_PORT, then c10d Gloo.
//
// Contract: initDistributed() returns when every rank has joined, or throws
// DistError after `timeout` naming this rank, host, the master address and what it
// was waiting for (store connection, peers). World size 1 creates no store and no
// sockets. The Gloo device binds the local address that routes to MASTER_ADDR (so
// namespaces that share a hostname still work).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "common/dist_env.h"
#include "trainer/comm/comm.h"
#include "trainer/comm/p2p.h"

namespace ftb {

struct Distributed {
  DistEnv env;
  c10::intrusive_ptr<c10d::Store> store;  // null when world size 1
  std::unique_ptr<Comm> world;            // all ranks
  // Every rank's host name and backend address (index = global rank), gathered once at
  // start; the backend groups name from it the member(s) a failed collective waited for,
  // and the pipeline links their peer's host.
  std::vector<CommMember> members;

  // Every rank passes its `value` (any bytes, empty included, at the same speed);
  // returns all ranks' values in rank order (through the store). Used to agree on the
  // run tag and directory and to coordinate checkpoint saves.
  std::vector<std::string> allGatherString(const std::string& key, const std::string& value);
  // Every rank, after an allGatherString(key) whose result makes every rank leave (an
  // error they all throw): rank 0 hosts the store and its exit would cut off a peer still
  // reading the gather. Peers say they are done; rank 0 waits for each (at most
  // min(timeout, 10 s), then warns naming the rank) before returning.
  void leaveAfterGather(const std::string& key);

  // A communicator over `ranks` (global ranks, ascending; must contain this rank),
  // rendezvoused through the store under `name`. Size 1 gives a self Comm. Every
  // member must call it with the same name and ranks.
  std::unique_ptr<Comm> newGroup(const std::string& name, const std::vector<int>& ranks);
  // A point-to-point link between this rank and global rank peer.rank (pipeline
  // neighbours, comm/p2p.h), rendezvoused through the store under `name`; both ends call
  // it with the same name and take the same decision: through local memory
  // (parallel/local_link.h) when pp_local_p2p is set, the tensors live on the CPU and both
  // ranks share this host and may read each other's memory; else on the backend (Gloo).
  // Records "name: transport" (with the reason for the backend) in `transports`.
  std::unique_ptr<P2PLink> newLink(const std::string& name, const PeerInfo& peer);

  std::chrono::milliseconds timeout{300000};
  std::string backend = "auto";
  // parallel.local_collectives: "auto" lets newGroup() move the collectives of a group
  // whose ranks share this host through memory (parallel/local_comm.h), and run those
  // of a group spanning hosts (host-major, the same number of ranks on each) in two
  // levels, memory within each host and the backend across hosts
  // (parallel/hier_comm.h); "off" keeps every collective on the backend.
  std::string local_collectives = "auto";
  // parallel.pp_local_p2p: pipeline links between ranks of one host through memory
  // (newLink); false keeps them on the backend.
  bool pp_local_p2p = true;
  std::vector<std::string> transports;  // "group: transport (or why not)", per group made
};

// Every member `me` of `n` publishes `value` under `prefix` + its index in `store` and
// gets all n values in member order (any bytes, empty included; each travels framed by
// one byte, see dist.cpp). Waits are the store's timeout; a failed wait throws DistError
// naming this rank, host, the member waited for and `what`.
std::vector<std::string> gatherThroughStore(c10d::Store& store, const std::string& prefix, int me,
                                            int n, const std::string& value,
                                            const std::string& what);

// backend: "auto" | "gloo" | "nccl" (parallel.backend).
Distributed initDistributed(const DistEnv& env, std::chrono::milliseconds timeout,
                            const std::string& backend = "auto",
                            const std::string& local_collectives = "auto");

}  // namespace ftb
