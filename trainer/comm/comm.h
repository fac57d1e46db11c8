// Comm: the collectives the trainer needs, over a c10d backend.
//
// Contracts:
// - Every collective blocks until done or until the timeout given at construction;
//   a timeout or backend failure throws DistError naming this rank, host, the
//   collective, the tensor size and the timeout.
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

// A Comm over a c10d Backend (Gloo; NCCL for CUDA tensors). Errors carry logPrefix()
// (rank, host), the backend and the first line of c10d's message (not its backtrace).
std::unique_ptr<Comm> makeBackendComm(c10::intrusive_ptr<c10d::Backend> backend,
                                      std::chrono::milliseconds timeout);

}  // namespace ftb
