#include "trainer/parallel/comm.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <atomic>
#include <chrono>
#include <sstream>

#include "common/error.h"
#include "common/log.h"

namespace ftb {

namespace {
class DoneWork final : public PendingWork {
 public:
  void wait() override {}
};
std::atomic<int64_t> g_collective_ns{0};  // collectiveSeconds(), in ns
}  // namespace

double collectiveSeconds() { return double(g_collective_ns.load(std::memory_order_relaxed)) * 1e-9; }
namespace {
thread_local int t_timer_depth = 0;  // CollectiveTimers alive on this thread
}  // namespace

CollectiveTimer::CollectiveTimer() : t0_(std::chrono::steady_clock::now()) { ++t_timer_depth; }

CollectiveTimer::~CollectiveTimer() {
  if (--t_timer_depth > 0) return;  // an enclosing timer counts this span
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_);
  g_collective_ns.fetch_add(ns.count(), std::memory_order_relaxed);
}

bool isReducedPrecision(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf;
}

std::unique_ptr<PendingWork> Comm::allReduceSumAsync(torch::Tensor& t) {
  allReduceSum(t);
  return std::make_unique<DoneWork>();
}

namespace {

class SelfComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allReduceSum(torch::Tensor&) override {}
  void allReduceMax(torch::Tensor&) override {}
  void allGather(torch::Tensor& out, const torch::Tensor& in) override { out.copy_(in.view(-1)); }
  void reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) override {
    out.copy_(in.view(-1));
  }
  void broadcast(torch::Tensor&, int) override {}
  void barrier() override {}
};

class ProcessGroupComm final : public Comm {
 public:
  ProcessGroupComm(c10::intrusive_ptr<c10d::ProcessGroup> pg, std::chrono::milliseconds timeout)
      : pg_(std::move(pg)), timeout_(timeout) {
    // Gloo 1.13 lacks _allgather_base, reduce_scatter and bf16 collectives.
    native_fused_ = pg_->getBackendName() != "gloo";
    native_low_precision_ = native_fused_;
  }
  int rank() const override { return pg_->getRank(); }
  int size() const override { return pg_->getSize(); }

  void allReduceSum(torch::Tensor& t) override { allReduce(t, c10d::ReduceOp::SUM, "allreduce(sum)"); }
  void allReduceMax(torch::Tensor& t) override { allReduce(t, c10d::ReduceOp::MAX, "allreduce(max)"); }

  std::unique_ptr<PendingWork> allReduceSumAsync(torch::Tensor& t) override {
    if (isReducedPrecision(t) && !native_low_precision_) return Comm::allReduceSumAsync(t);
    std::vector<torch::Tensor> v{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    return std::make_unique<Pending>(this, pg_->allreduce(v, opts), "allreduce(sum) async", t);
  }

  void allReduce(torch::Tensor& t, c10d::ReduceOp op, const char* what) {
    if (isReducedPrecision(t) && !native_low_precision_) {
      torch::Tensor wide = t.to(torch::kFloat32);
      allReduce(wide, op, what);
      t.copy_(wide);
      return;
    }
    std::vector<torch::Tensor> v{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    wait(pg_->allreduce(v, opts), what, t);
  }

  void allGather(torch::Tensor& out, const torch::Tensor& in) override {
    TORCH_CHECK(out.numel() == in.numel() * size(), "allGather: out/in size mismatch");
    torch::Tensor src = in.contiguous();
    torch::Tensor dst = out;
    if (isReducedPrecision(src) && !native_low_precision_) {  // data movement: send bytes
      src = src.view(-1).view(torch::kByte);
      dst = out.view(-1).view(torch::kByte);
    }
    if (native_fused_) {
      torch::Tensor s = src.view(-1), d = dst.view(-1);
      wait(pg_->_allgather_base(d, s), "_allgather_base", s);
      return;
    }
    // Fallback: list-form allgather straight into views of the flat output buffer.
    std::vector<std::vector<torch::Tensor>> outs(1);
    torch::Tensor d = dst.view(-1);
    int64_t n = src.numel();
    for (int r = 0; r < size(); ++r) outs[0].push_back(d.narrow(0, r * n, n));
    std::vector<torch::Tensor> ins{src.view(-1)};
    wait(pg_->allgather(outs, ins), "allgather", src);
  }

  void reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) override {
    TORCH_CHECK(in.numel() == out.numel() * size(), "reduceScatter: out/in size mismatch");
    if (isReducedPrecision(in) && !native_low_precision_) {
      torch::Tensor wide_out = torch::empty({out.numel()}, out.options().dtype(torch::kFloat32));
      reduceScatterSum(wide_out, in.to(torch::kFloat32));
      out.view(-1).copy_(wide_out);
      return;
    }
    if (native_fused_) {
      std::vector<torch::Tensor> outs{out.view(-1)};
      std::vector<std::vector<torch::Tensor>> ins(1);
      int64_t n = out.numel();
      torch::Tensor flat = in.contiguous().view(-1);
      for (int r = 0; r < size(); ++r) ins[0].push_back(flat.narrow(0, r * n, n));
      wait(pg_->reduce_scatter(outs, ins), "reduce_scatter", in);
      return;
    }
    // Fallback: alltoall sends chunk r to rank r (the bytes of a ring reduce-scatter),
    // then each rank sums the size() chunks it received.
    torch::Tensor src = in.contiguous().view(-1);
    torch::Tensor recv = torch::empty_like(src);
    std::vector<int64_t> splits;  // empty = equal splits
    wait(pg_->alltoall_base(recv, src, splits, splits), "alltoall_base", src);
    out.view(-1).copy_(recv.view({size(), -1}).sum(0));
  }

  void broadcast(torch::Tensor& t, int root) override {
    torch::Tensor x = t;
    if (isReducedPrecision(t) && !native_low_precision_) x = t.view(torch::kByte);
    std::vector<torch::Tensor> v{x};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    wait(pg_->broadcast(v, opts), "broadcast", t);
  }

  void barrier() override { wait(pg_->barrier(), "barrier", torch::Tensor()); }

 private:
  class Pending final : public PendingWork {
   public:
    Pending(ProcessGroupComm* comm, c10::intrusive_ptr<c10d::Work> work, const char* op,
            torch::Tensor t)
        : comm_(comm), work_(std::move(work)), op_(op), t_(std::move(t)) {}
    void wait() override { comm_->wait(work_, op_, t_); }

   private:
    ProcessGroupComm* comm_;
    c10::intrusive_ptr<c10d::Work> work_;
    const char* op_;
    torch::Tensor t_;
  };

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op, const torch::Tensor& t) {
    RECORD_USER_SCOPE(op);  // a named range per collective in profiler traces
    CollectiveTimer timer;
    try {
      work->wait(timeout_);
    } catch (const std::exception& e) {
      std::ostringstream os;
      os << logPrefix() << " " << op << " failed";
      if (t.defined()) os << " on " << t.numel() << " x " << t.scalar_type();
      os << " (group size " << size() << ", timeout " << timeout_.count() / 1000.0
         << " s): " << e.what();
      throw DistError(os.str());
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  std::chrono::milliseconds timeout_;
  bool native_fused_ = false;
  bool native_low_precision_ = false;
};

}  // namespace

std::unique_ptr<Comm> makeSelfComm() { return std::make_unique<SelfComm>(); }

std::unique_ptr<Comm> makeProcessGroupComm(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                           std::chrono::milliseconds timeout) {
  return std::make_unique<ProcessGroupComm>(std::move(pg), timeout);
}

}  // namespace ftb
