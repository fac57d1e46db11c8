// The all-reduce bus bandwidth of a run's own Comm, measured before its first step and by
// `trainer --probe` (the definitions, sizes and repetitions: common/link_bandwidth.h).
//
// Contract of probeLink(comm, transport, nodes, grad_bytes):
// - Collective over `comm`: every member calls it with the same grad_bytes and issues the
//   same all-reduces in the same order (the repetition counts are agreed through `comm`).
// - Per size of linkProbeSizes(grad_bytes): an fp32 buffer on the compute device (on the
//   CPU in memory the peers may read, as the DDP gradient buckets are: zerosForPeers);
//   one warm-up all-reduce, whose slowest time over the ranks sets the repetitions
//   (linkProbeReps); each repetition starts after a one-element all-reduce that lines the
//   ranks up and is timed to the end of the device's work; a repetition's time is the
//   slowest rank's (allReduceMax), so every rank returns the same figure. The result is the
//   largest size's median.
// - Every wait is the Comm's own (its timeout: parallel.timeout_seconds). A failure throws
//   DistError naming this rank, host, "link probe", the collective, its bytes and the
//   repetition, then the Comm's message (which names the member waited for).
// - comm.size() == 1: unmeasuredLink(kNoLinkSource), no collective.
// Cost: at most 2 x (1 + kLinkProbeMaxReps) all-reduces of at most 16 MiB, plus as many of one
// element; 0.04-0.2 s on a 2-rank run of one host through local memory (trainer/docs/metrics.md
// § Link bandwidth).
#pragma once

#include <cstdint>
#include <string>

#include "common/link_bandwidth.h"
#include "trainer/comm/comm.h"
#include "trainer/parallel/dist.h"

namespace ftb {

LinkFigure probeLink(Comm& comm, const std::string& transport, int nodes, int64_t grad_bytes);

// How `dist`'s world group communicates, for link_source: the transport dist.transports
// recorded for it ("local memory (process_vm_readv)", "hierarchical: ..."), with a leading
// "backend" spelled as the backend ("Gloo", "NCCL"); the backend's name alone where none was
// recorded (parallel.local_collectives = "off"); "" for world size 1.
std::string worldTransport(const Distributed& dist);

}  // namespace ftb
