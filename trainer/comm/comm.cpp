#include "trainer/comm/comm.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <sstream>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "common/error.h"
#include "common/log.h"
#include "trainer/metrics/device.h"

namespace ftb {

namespace {
class DoneWork final : public PendingWork {
 public:
  void wait() override {}
};
std::atomic<int64_t> g_collective_ns{0};  // collectiveSeconds(), in ns
}  // namespace

double collectiveSeconds() {
  return double(g_collective_ns.load(std::memory_order_relaxed)) * 1e-9;
}
namespace {
thread_local int t_timer_depth = 0;  // CollectiveTimers alive on this thread
}  // namespace

CollectiveTimer::CollectiveTimer() : t0_(std::chrono::steady_clock::now()) { ++t_timer_depth; }

CollectiveTimer::~CollectiveTimer() {
  if (--t_timer_depth > 0) return;  // an enclosing timer counts this span
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_);
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

class BackendComm final : public Comm {
 public:
  BackendComm(c10::intrusive_ptr<c10d::Backend> backend, std::chrono::milliseconds timeout,
              std::vector<CommMember> members)
      : backend_(std::move(backend)),
        timeout_(timeout),
        members_(std::move(members)),
        device_(backend_->getBackendName() == "nccl" ? computeDevice()
                                                     : torch::Device(torch::kCPU)) {
    // Gloo's _reduce_scatter_base is an all-reduce followed by a chunk copy (twice the
    // bytes of a ring reduce-scatter); alltoall + local sum moves what the ring moves.
    native_reduce_scatter_ = backend_->getBackendName() != "gloo";
  }
  int rank() const override { return backend_->getRank(); }
  int size() const override { return backend_->getSize(); }

  void allReduceSum(torch::Tensor& t) override {
    allReduce(t, c10d::ReduceOp::SUM, "allreduce(sum)");
  }
  void allReduceMax(torch::Tensor& t) override {
    allReduce(t, c10d::ReduceOp::MAX, "allreduce(max)");
  }

  std::unique_ptr<PendingWork> allReduceSumAsync(torch::Tensor& t) override {
    // Reduced in fp32, or staged through the backend's device: synchronously, below.
    if (isReducedPrecision(t) || t.device() != device_) return Comm::allReduceSumAsync(t);
    std::vector<torch::Tensor> v{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    return std::make_unique<Pending>(this, backend_->allreduce(v, opts), "allreduce(sum) async", t);
  }

  void allReduce(torch::Tensor& t, c10d::ReduceOp op, const char* what) {
    if (isReducedPrecision(t)) {  // the contract: reductions in fp32, one rounding at the end
      torch::Tensor wide = t.to(torch::kFloat32);
      allReduce(wide, op, what);
      t.copy_(wide);
      return;
    }
    if (t.device() != device_) {
      torch::Tensor here = t.to(device_);
      allReduce(here, op, what);
      t.copy_(here);
      return;
    }
    std::vector<torch::Tensor> v{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = op;
    wait(backend_->allreduce(v, opts), what, t);
  }

  void allGather(torch::Tensor& out, const torch::Tensor& in) override {
    TORCH_CHECK(out.numel() == in.numel() * size(), "allGather: out/in size mismatch");
    if (out.device() != device_ || in.device() != device_) {
      torch::Tensor here = torch::empty({out.numel()}, out.options().device(device_));
      allGather(here, in.to(device_));
      out.view(-1).copy_(here);
      return;
    }
    torch::Tensor s = in.contiguous().view(-1);
    torch::Tensor d = out.view(-1);
    wait(backend_->_allgather_base(d, s), "_allgather_base", s);
  }

  void reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) override {
    TORCH_CHECK(in.numel() == out.numel() * size(), "reduceScatter: out/in size mismatch");
    if (isReducedPrecision(in)) {
      torch::Tensor wide_out = torch::empty({out.numel()}, out.options().dtype(torch::kFloat32));
      reduceScatterSum(wide_out, in.to(torch::kFloat32));
      out.view(-1).copy_(wide_out);
      return;
    }
    if (out.device() != device_ || in.device() != device_) {
      torch::Tensor here = torch::empty({out.numel()}, out.options().device(device_));
      reduceScatterSum(here, in.to(device_));
      out.view(-1).copy_(here);
      return;
    }
    torch::Tensor src = in.contiguous().view(-1);
    if (native_reduce_scatter_) {
      torch::Tensor dst = out.view(-1);
      wait(backend_->_reduce_scatter_base(dst, src), "_reduce_scatter_base", src);
      return;
    }
    // alltoall sends chunk r to rank r (the bytes of a ring reduce-scatter), then each
    // rank sums the size() chunks it received.
    torch::Tensor recv = torch::empty_like(src);
    std::vector<int64_t> splits;  // empty = equal splits
    wait(backend_->alltoall_base(recv, src, splits, splits), "alltoall_base", src);
    out.view(-1).copy_(recv.view({size(), -1}).sum(0));
  }

  void broadcast(torch::Tensor& t, int root) override {
    if (t.device() != device_) {
      torch::Tensor here = t.to(device_);
      broadcast(here, root);
      t.copy_(here);
      return;
    }
    std::vector<torch::Tensor> v{t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    wait(backend_->broadcast(v, opts), "broadcast", t);
  }

  void barrier() override { wait(backend_->barrier(), "barrier", torch::Tensor()); }

 private:
  class Pending final : public PendingWork {
   public:
    Pending(BackendComm* comm, c10::intrusive_ptr<c10d::Work> work, const char* op, torch::Tensor t)
        : comm_(comm), work_(std::move(work)), op_(op), t_(std::move(t)) {}
    void wait() override { comm_->wait(work_, op_, t_); }

   private:
    BackendComm* comm_;
    c10::intrusive_ptr<c10d::Work> work_;
    const char* op_;
    torch::Tensor t_;
  };

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* op, const torch::Tensor& t) {
    RECORD_USER_SCOPE(op);  // a named range per collective in profiler traces
    // NCCL: the collective's stream waits for the compute queued before it, which the host,
    // running ahead of the device (comm/phase_timer.h), has not waited for: wait for that
    // first, so that the timed wait is the collective's own (wait(timeout) blocks the host
    // until the collective is done).
    if (device_.is_cuda()) syncComputeStream();
    CollectiveTimer timer;
    try {
      work->wait(timeout_);
    } catch (const std::exception& e) {
      FTB_DEBUG(op << " failed; c10d's whole message, backtrace included:\n" << e.what());
      std::ostringstream os;
      os << logPrefix() << " " << op << " failed";
      if (t.defined()) os << " on " << t.numel() << " x " << t.scalar_type();
      os << " (" << backend_->getBackendName() << ", group size " << size() << ", timeout "
         << timeout_.count() / 1000.0 << " s): ";
      const std::string awaited = awaitedMembers(members_, rank(), e.what());
      if (!awaited.empty()) os << "waiting for " << awaited << ": ";
      os << firstLine(e.what());
      throw DistError(os.str());
    }
  }

  c10::intrusive_ptr<c10d::Backend> backend_;
  std::chrono::milliseconds timeout_;
  std::vector<CommMember> members_;  // group order; empty: not named in errors
  torch::Device device_;             // where the backend reduces: the GPU for NCCL, else the CPU
  bool native_reduce_scatter_ = false;
};

}  // namespace

std::unique_ptr<Comm> makeSelfComm() { return std::make_unique<SelfComm>(); }

std::unique_ptr<Comm> makeBackendComm(c10::intrusive_ptr<c10d::Backend> backend,
                                      std::chrono::milliseconds timeout,
                                      std::vector<CommMember> members) {
  return std::make_unique<BackendComm>(std::move(backend), timeout, std::move(members));
}

std::string describeMember(const CommMember& m) {
  std::string s = "rank " + std::to_string(m.rank) + " (host " + m.host;
  return s + (m.ip.empty() ? "" : ", " + m.ip) + ")";
}

namespace {

// "rank 2 (host a, ip)", "rank 2 (...) or rank 3 (...)", "one of rank 2 (...), ..., and N more".
std::string listMembers(const std::vector<const CommMember*>& ms) {
  constexpr size_t kMax = 8;
  std::string s;
  for (size_t i = 0; i < ms.size() && i < kMax; ++i)
    s += (i == 0 ? "" : ms.size() == 2 ? " or " : ", ") + describeMember(*ms[i]);
  if (ms.size() > kMax) s += ", and " + std::to_string(ms.size() - kMax) + " more";
  return ms.size() > 2 ? "one or more of " + s : s;
}

// Gloo's messages name a peer as "[10.0.0.2]:port" or "10.0.0.2:port".
bool namesAddress(const std::string& msg, const std::string& ip) {
  for (size_t at = msg.find(ip); at != std::string::npos; at = msg.find(ip, at + 1)) {
    const char before = at ? msg[at - 1] : ' ';
    const char after = at + ip.size() < msg.size() ? msg[at + ip.size()] : ' ';
    if (!std::isdigit(static_cast<unsigned char>(before)) && before != '.' &&
        (after == ']' || after == ':'))
      return true;
  }
  return false;
}

}  // namespace

std::string awaitedMembers(const std::vector<CommMember>& members, int me,
                           const std::string& backend_error) {
  if (members.empty() || me < 0 || me >= static_cast<int>(members.size())) return "";
  const std::string& my_ip = members[me].ip;
  std::vector<const CommMember*> named, other_hosts, others;
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    if (i == me) continue;
    const CommMember& m = members[i];
    others.push_back(&m);
    if (!m.ip.empty() && m.ip != my_ip) {
      other_hosts.push_back(&m);
      if (namesAddress(backend_error, m.ip)) named.push_back(&m);
    }
  }
  if (!named.empty()) return listMembers(named) + ", whose address the backend names";
  if (others.size() == 1) return listMembers(others);
  if (!other_hosts.empty() && other_hosts.size() < others.size())
    return listMembers(other_hosts) + " on other hosts";
  return listMembers(others);
}

}  // namespace ftb
