// Collectives of a group that spans hosts, in two levels: through memory among the
// ranks of each host (parallel/local_comm.h), and over the backend (Gloo) only among
// one rank per host. This is the intra-node / inter-node split of NCCL's and oneCCL's
// hierarchical algorithms, done with the trainer's own Comms.
//
// Nothing between ranks of one host passes through a socket, and fewer bytes cross
// hosts: per host, an all-reduce of S bytes over N hosts sends 2(N-1)/N·S (each of the
// L local ranks 2(N-1)/N of an S/L shard) where a flat ring crossing each host once per
// direction sends 2(NL-1)/(NL)·S; a reduce-scatter or all-gather sends (N-1)/N·S where
// Gloo's (alltoall, all-gather into views) sends L times that. Measured on 2 netns hosts
// x 2 ranks: tests/e2e/launcher/test_netns.py (test_two_ranks_per_host_*).
//   allReduceSum   = reduce-scatter within the host (each rank: 1/L of the tensor),
//                    all-reduce of that shard across hosts, all-gather within the host
//   allReduceMax   = all-reduce max within the host, then across hosts
//   allGather      = all-gather across hosts among the ranks of one local index (each
//                    shard crosses the network once), then within the host, reordered
//                    local-rank-major → host-major
//   reduceScatter  = the input's chunks reordered host-major → local-rank-major,
//                    reduce-scatter within the host, then across hosts
//   allReduceSumAsync = the reduce-scatter within the host at once, the cross-host
//                    all-reduce in flight on the backend, the all-gather in wait()
//   broadcast, barrier, non-CPU tensors: the flat backend group
//
// Contract (beyond comm.h's):
// - Invariant: the group's ranks are host-major: member g is local rank g % L of host
//   g / L, and every host holds L members (planHosts() decides whether a group is).
// - Reductions run in fp32 (or the tensor's wider dtype) through both levels: bf16/fp16
//   are upcast once here and cast back once, so the result rounds once as with the flat
//   Comm. Every member ends with the same bits; the summation order differs from the
//   flat backend's, so results agree with it to rounding, not bit for bit.
// - Every wait is the sub-Comm's, bounded by the group timeout and naming rank, host,
//   collective and size; ranks of one host wait for each other in memory, and one rank
//   per host waits on the network.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainer/comm/comm.h"

namespace ftb {

// How a group's members sit on hosts.
struct HostPlan {
  int hosts = 0;     // distinct hosts
  int per_host = 0;  // members on each host when every host has the same number, else 0
  int host = 0;      // this member's host index (hosts in order of first member)
  int local = 0;     // this member's index among its host's members
  std::string
      why_not;  // "" when the group can run hierarchically (hosts >= 2, per_host >= 2, host-major)
};

// From every member's localHostKey() in group order. REQUIRES: 0 <= me < keys.size().
HostPlan planHosts(const std::vector<std::string>& keys, int me);

// A Comm over `flat` (every member, the backend) that runs collectives through `intra`
// (this member's host: L members, local memory where it works) and `cross` (the members
// with this member's local index, one per host: N members).
// REQUIRES: flat->size() == intra->size() * cross->size() and
// flat->rank() == cross->rank() * intra->size() + intra->rank() on every member.
std::unique_ptr<Comm> makeHierarchicalComm(std::unique_ptr<Comm> flat, std::unique_ptr<Comm> intra,
                                           std::unique_ptr<Comm> cross);

}  // namespace ftb
