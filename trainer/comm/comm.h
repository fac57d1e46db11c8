// Comm: the collectives the trainer needs, over a c10d backend.
//
// Contracts:
// - Every collective blocks until done or until the timeout given at construction;
//   a timeout or backend failure throws DistError naming this rank, host, the
//   collective, the tensor size, the timeout and the member(s) it waited for
//   (awaitedMembers()).
// - Reductions are computed in fp32 (or the tensor's wider dtype): bf16/fp16 inputs
//   are upcast, reduced and cast back once, as torchtitan's reduce dtype does. Pure data
//   movement (all-gather, broadcast) keeps the tensor's dtype.
// - allGather/reduceScatter work on one flat buffer (out/in of size() * shard
//   elements). On Gloo, reduce_scatter is alltoall + local sum (the bytes of a ring
//   reduce-scatter; Gloo's own is an all-reduce, twice the bytes).
// - A Comm of size 1 performs no communication.
// - Tensors may live on the CPU or the compute device (metrics/device.h). A backend
//   reduces on its own device (NCCL: the GPU; Gloo: the CPU); a tensor elsewhere is
//   copied there and the result copied back before the call returns. So every layout
//   runs over either backend, and a CPU-side scalar (the step agreement) over NCCL.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace ftb {

// A collective in flight. wait() blocks until it is done (or the Comm's timeout:
// DistError naming rank, host, the collective and its size). REQUIRES: wait() is
// called exactly once, and the tensors given to the collective stay alive until then.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  virtual void wait() = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  // Starts allReduceSum(t) and returns without waiting where the backend runs
  // collectives asynchronously (Gloo: its worker threads), so compute overlaps it.
  // The default runs it to completion here. Collectives are matched by issue order:
  // every rank issues the same sequence.
  virtual std::unique_ptr<PendingWork> allReduceSumAsync(torch::Tensor& t);
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void allReduceSum(torch::Tensor& t) = 0;  // in place
  virtual void allReduceMax(torch::Tensor& t) = 0;  // in place
  // REQUIRES: out.numel() == size() * in.numel(), both contiguous, same dtype.
  virtual void allGather(torch::Tensor& out, const torch::Tensor& in) = 0;
  // REQUIRES: in.numel() == size() * out.numel(); out = sum over ranks of in's chunk rank().
  virtual void reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) = 0;
  virtual void broadcast(torch::Tensor& t, int root) = 0;
  virtual void barrier() = 0;
};

// Process-wide seconds spent blocked in collectives so far (monotonic): every Comm
// call that communicates adds the time it blocked (a Gloo wait, a local-memory
// collective). The training loop moves what accrues during forward and backward
// (tensor-parallel all-reduces, ZeRO gathers and reduce-scatters, gradient buckets
// reduced inline) from those phases to comm_s.
double collectiveSeconds();
// For Comm implementations: adds its lifetime to collectiveSeconds() (also when the
// collective throws). Timers nest: one alive inside another on the same thread (a
// composite Comm calling the Comms it is built from) adds nothing, so each span counts once.
class CollectiveTimer {
 public:
  CollectiveTimer();
  ~CollectiveTimer();
  CollectiveTimer(const CollectiveTimer&) = delete;
  CollectiveTimer& operator=(const CollectiveTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point t0_;
};

// bf16 or fp16: the dtypes every Comm reduces in fp32 (upcast, reduce, cast back once).
bool isReducedPrecision(const torch::Tensor& t);

// Single-process Comm (world size 1): every collective is the identity.
std::unique_ptr<Comm> makeSelfComm();

// A member of a backend group, for error messages: its global rank, host name, and the
// address its backend binds ("" when unknown; hosts may share a name, not an address).
struct CommMember {
  int rank = 0;
  std::string host;
  std::string ip;
};
std::string describeMember(const CommMember& m);  // "rank 2 (host n2, 10.0.0.12)"

// Whom member `me` of `members` waited for when a collective failed with `backend_error`,
// as far as it can be known: the members whose address the backend's message names (Gloo
// names the peer of a broken connection); else the other member of a group of two; else
// the members on other hosts than `me`'s (a cut link, a stopped host), else every other
// member. At most 8 are listed ("and N more"). "" when `members` is empty.
std::string awaitedMembers(const std::vector<CommMember>& members, int me,
                           const std::string& backend_error);

// A Comm over a c10d Backend (Gloo; NCCL for CUDA tensors). Errors carry logPrefix()
// (rank, host), the backend, awaitedMembers() and the first line of c10d's message (not
// its backtrace). `members`: one per group rank, in group order, or empty (not named).
std::unique_ptr<Comm> makeBackendComm(c10::intrusive_ptr<c10d::Backend> backend,
                                      std::chrono::milliseconds timeout,
                                      std::vector<CommMember> members = {});

}  // namespace ftb
