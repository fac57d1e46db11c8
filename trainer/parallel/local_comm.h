// Collectives among the ranks of one host through memory, beside the backend (Gloo).
//
// Over TCP loopback, Gloo copies every gradient byte into and out of the kernel and
// runs its own threads on the cores the ranks compute on. Between processes of one
// host the bytes can move directly instead, as NCCL's and oneCCL's intra-node
// transports do: a LocalComm reads the peers' tensors with Linux cross-memory attach
// (process_vm_readv: one copy, no socket, no helper thread) and synchronises through a
// small shared-memory control block (one cache line per member, futex waits).
//
// Contract:
// - allReduceSum/Max, reduceScatterSum and allGather of contiguous CPU tensors run here
//   (reductions in fp32/fp64; bf16/fp16 reductions are upcast to fp32 as Comm
//   promises; allGather moves bytes of any dtype). Everything else (broadcast, barrier,
//   other dtypes or devices) goes to the backend Comm it wraps.
// - Chunk c of a reduction is reduced once, by member c (its own value first, then the
//   others in member order), and copied by the others, so every member ends with the
//   same bits. For two members this equals the backend's a + b.
// - Collectives are matched by issue order, as with any Comm. A member that posts a
//   different collective or size is an error (DistError naming both), not a hang.
// - Every wait is bounded by the group timeout and throws DistError naming this rank,
//   host, the collective, its bytes and the member (rank, pid) waited for; a peer
//   process that no longer exists is reported at once.
// - The call returns only when every member has finished reading this member's tensor,
//   so the caller may modify it at once (the same guarantee as a blocking collective).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "trainer/comm/comm.h"

namespace ftb {

// Collective over the group (every member calls it with the same `members`, which are
// the members' global ranks in group order; `store` is the group's prefixed store).
// Returns a LocalComm over `backend` when every member runs on this host (same boot id,
// network and pid namespaces) and each can read the others' memory (probed here);
// otherwise returns `backend` unchanged. Every member takes the same decision, and
// `*why` says which (the transport, or why it fell back). The set-up, its probe and its
// permissions are joinLocalMemory()'s (parallel/local_memory.h).
std::unique_ptr<Comm> makeLocalComm(std::unique_ptr<Comm> backend, c10d::Store& store,
                                    const std::vector<int>& members,
                                    std::chrono::milliseconds timeout, std::string* why);

// A zeroed 1-D fp32 tensor of `numel` elements for buffers the peers read often (DDP
// gradient buckets): anonymous memory advised for transparent huge pages. The kernel
// pins the source pages of a process_vm_readv one by one; with 2 MiB pages a 25 MiB
// read runs at memcpy speed (measured here: 22 GB/s against 6.9 GB/s with 4 KiB pages,
// memcpy 26 GB/s). Falls back to torch::zeros when the mapping fails.
torch::Tensor zerosForPeers(int64_t numel, torch::ScalarType dtype = torch::kFloat32);

}  // namespace ftb
