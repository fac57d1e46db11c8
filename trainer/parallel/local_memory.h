// What the local-memory transports share (parallel/local_comm.h: collectives among the
// ranks of one host; parallel/local_link.h: the pipeline's point-to-point links): a
// shared-memory control segment that every member maps, futex waits on its words, Linux
// cross-memory attach (process_vm_readv / process_vm_writev) to the peers' tensors, and
// the set-up that decides whether a group may use them.
//
// Contract of joinLocalMemory(): collective over the group; every member takes the same
// decision. It succeeds when every member runs on this host (same boot id, network and
// pid namespaces: localHostKey()), member 0 could create the segment, and each member can
// map it and read and write the others' memory (probed on a word of this library). Under
// Yama ptrace_scope 1 it first declares any process of this user a permitted reader
// (prctl PR_SET_PTRACER_ANY, the state without Yama); ptrace_scope 2 or 3, or a seccomp
// policy, makes it fail with the reason.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace ftb {

// A shared mapping of a control segment; unmapped on destruction. payload() is the
// caller's part (after a header this library owns), zeroed and initialised by the
// creator before any other member can map it.
class SharedSegment {
 public:
  SharedSegment() = default;
  SharedSegment(void* p, size_t n) : p_(p), n_(n) {}
  SharedSegment(SharedSegment&& o) noexcept;
  SharedSegment& operator=(SharedSegment&& o) noexcept;
  ~SharedSegment();
  char* payload() const;

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// The members of a group that joinLocalMemory() admitted: the segment, each member's pid
// (group order).
struct LocalMembers {
  SharedSegment segment;
  std::vector<pid_t> pids;
};

// Collective over the members of a group (`ranks`: their global ranks in group order;
// this one is `me`) whose prefixed store is `store`. Member 0 creates a segment with
// `payload_bytes` for the caller and runs `init` on its payload (placement-new of the
// caller's atomics) before publishing it. Returns "" and fills `out`, or the reason every
// member falls back ("ranks on more than one host", "rank 3: pid 812: process_vm_readv:
// Operation not permitted (ptrace permission: ...)").
std::string joinLocalMemory(c10d::Store& store, int me, const std::vector<int>& ranks,
                            size_t payload_bytes, const std::function<void(char*)>& init,
                            LocalMembers* out);

// The control segment's life: member 0 creates /dev/shm/ftb-comm-<pid>-<pid namespace>-<n>
// and removes it as soon as every member has opened it (or failed to), on every way out of
// joinLocalMemory (a peer's timeout, a fallback) as on success; a segment that cannot be
// sized (a full /dev/shm) is removed at once. Only a member 0 killed in that window leaves
// one, and the next member 0 on this host removes it (removeStaleSegments).

// Removes every ftb-comm segment of this pid namespace whose creator process no longer
// exists; returns how many. Best effort: a segment it cannot remove (another user's, one
// another process removed first) is skipped.
int removeStaleSegments();

// What identifies the kernel and namespaces this process runs in: ranks with equal
// keys can address each other's memory by pid.
std::string localHostKey();

// Copies `bytes` between local memory and address `remote` of process `pid`
// (process_vm_readv into `local`, or process_vm_writev from it when `write`), resuming
// partial transfers. Returns "" or what failed ("process_vm_readv: No such process").
std::string copyWithPeer(pid_t pid, bool write, void* local, uint64_t remote, int64_t bytes);

// True when no process `pid` exists any more (a crashed peer: report it at once).
bool processGone(pid_t pid);

// Sleeps while *a == expected, at most `ns` nanoseconds (spurious returns allowed).
void futexWait(std::atomic<uint32_t>* a, uint32_t expected, long ns);
// Wakes every process sleeping on `a`.
void futexWake(std::atomic<uint32_t>* a);

std::string errnoText(int e);

}  // namespace ftb
