// A pipeline link (comm/p2p.h) between two ranks of one host, through memory.
//
// Over Gloo on one host every activation goes through TCP loopback: copied into the
// kernel and out again, by Gloo's threads competing with the ranks' compute for the same
// cores. Here the bytes move once, by Linux cross-memory attach (parallel/local_memory.h),
// on the thread that posts the second half of a message:
//
// - Both ends map one shared mailbox: a table of message slots under a process-shared
//   lock. A post (send or receive) looks for the other end's post of the same message
//   (same sender and tag). Found: the poster copies at once (a send writes into the posted
//   receive buffer with process_vm_writev, a receive reads the posted send buffer with
//   process_vm_readv), marks the slot done and wakes the other end (futex), and returns a
//   completed PendingWork. Not found: it records {tag, sender, address, bytes} in a free
//   slot and returns a PendingWork whose wait() sleeps on the slot until the other end has
//   copied. So a message completes once both ends have posted it, never needing both
//   waits: the same lenient matching as Gloo's, which keeps every schedule free of
//   deadlock. Pipelines post their receives at the start of a step, so the sender copies
//   as it posts and a send's wait() returns at once.
// - Invariant: a slot is freed by the end that posted it, after its wait() (or by its
//   PendingWork's destructor, which withdraws a post nobody copied), so an address in the
//   table always belongs to a live tensor of the poster.
// - Sizes that differ between the two posts are a DistError on both ends naming both
//   sizes, not a truncation. A tag posted twice by one end while in flight is a logic
//   error.
// - Every wait (the slot's, the lock's) is bounded by the link's timeout and throws
//   DistError naming this rank and host, what it waited for, its bytes and the peer's
//   stage, rank, host and pid; a peer process that no longer exists is reported at once.
// - At most kMaxInFlight (4096) messages may be in flight on a link (both directions);
//   beyond that a post throws DistError.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "trainer/comm/p2p.h"

namespace ftb {

// Collective over the link's two ends: `me` (0 or 1) is this end's index in `ranks` (the
// two global ranks, lower first), `store` the link's prefixed store. Returns the link when
// both ends are on this host and can reach each other's memory (joinLocalMemory); else
// null with `*why` saying why not.
std::unique_ptr<P2PLink> makeLocalLink(c10d::Store& store, int me, const std::vector<int>& ranks,
                                       PeerInfo peer, std::chrono::milliseconds timeout,
                                       std::string* why);

}  // namespace ftb
