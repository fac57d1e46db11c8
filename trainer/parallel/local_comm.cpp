#include "trainer/parallel/local_comm.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "trainer/kernels/clones.h"
#include "trainer/parallel/dist.h"
#include "trainer/parallel/local_memory.h"

namespace ftb {
namespace {

// One cache line per member in the shared control block.
struct alignas(64) Slot {
  std::atomic<uint32_t> arrived{0};  // phases this member has completed (wraps)
  std::atomic<uint32_t> waiters{0};  // peers in a futex wait on `arrived`
  std::atomic<uint64_t> addr{0};     // this member's tensor in the current collective
  std::atomic<int64_t> bytes{0};
  std::atomic<int32_t> op{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
              std::atomic<uint64_t>::is_always_lock_free);

FTB_CLONES void addInto(float* d, const float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}
FTB_CLONES void addInto(double* d, const double* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}
template <typename T>
void maxInto(T* d, const T* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = std::max(d[i], s[i]);
}

enum class Kind : int32_t { kAllReduceSum = 1, kAllReduceMax, kReduceScatter, kAllGather };
const char* kindName(Kind k) {
  switch (k) {
    case Kind::kAllReduceSum:
      return "allreduce(sum)";
    case Kind::kAllReduceMax:
      return "allreduce(max)";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kAllGather:
      return "allgather";
  }
  return "?";
}

bool reducible(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64);
}
bool lowPrecision(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && isReducedPrecision(t);
}

class LocalComm final : public Comm {
 public:
  LocalComm(std::unique_ptr<Comm> backend, std::vector<int> members, std::vector<pid_t> pids,
            SharedSegment control, std::chrono::milliseconds timeout)
      : backend_(std::move(backend)),
        members_(std::move(members)),
        pids_(std::move(pids)),
        control_(std::move(control)),
        timeout_(timeout),
        me_(backend_->rank()),
        scratch_(kPieceBytes / sizeof(double)) {}

  int rank() const override { return me_; }
  int size() const override { return static_cast<int>(members_.size()); }

  void allReduceSum(torch::Tensor& t) override { allReduce(t, Kind::kAllReduceSum); }
  void allReduceMax(torch::Tensor& t) override { allReduce(t, Kind::kAllReduceMax); }
  std::unique_ptr<PendingWork> allReduceSumAsync(torch::Tensor& t) override {
    if (!reducible(t) && !lowPrecision(t)) return backend_->allReduceSumAsync(t);
    return Comm::allReduceSumAsync(t);  // runs here, to completion
  }

  void allGather(torch::Tensor& out, const torch::Tensor& in) override;
  void reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) override;
  void broadcast(torch::Tensor& t, int root) override { backend_->broadcast(t, root); }
  void barrier() override { backend_->barrier(); }

 private:
  static constexpr int64_t kPieceBytes = 1 << 20;  // one read + combine, cache-resident

  Slot& slot(int j) const {
    return *reinterpret_cast<Slot*>(control_.payload() + j * sizeof(Slot));
  }
  void allReduce(torch::Tensor& t, Kind kind);
  void post(Kind kind, const void* addr, int64_t bytes);
  void arrive();
  void waitAll(Kind kind, int64_t bytes, const char* phase);
  void waitFor(int j, uint32_t target, Kind kind, int64_t bytes, const char* phase);
  void readPeer(int j, uint64_t remote, void* local, int64_t bytes, Kind kind);
  void combinePeers(char* dst, int64_t offset, int64_t bytes, torch::ScalarType dt, Kind kind);
  [[noreturn]] void fail(Kind kind, int64_t bytes, const std::string& what) const;
  std::pair<int64_t, int64_t> chunk(int j, int64_t n) const {  // [begin, end) of member j
    return {n * j / size(), n * (j + 1) / size()};
  }

  std::unique_ptr<Comm> backend_;
  std::vector<int> members_;  // global ranks, group order
  std::vector<pid_t> pids_;
  SharedSegment control_;
  std::chrono::milliseconds timeout_;
  int me_;
  uint32_t phase_ = 0;           // phases this member completed (== slot(me_).arrived)
  std::vector<double> scratch_;  // one piece of a peer's tensor
};

void LocalComm::fail(Kind kind, int64_t bytes, const std::string& what) const {
  std::ostringstream os;
  os << logPrefix() << " " << kindName(kind) << " over local memory (" << bytes << " B, " << size()
     << " ranks on this host, timeout " << timeout_.count() / 1000.0 << " s): " << what;
  throw DistError(os.str());
}

void LocalComm::post(Kind kind, const void* addr, int64_t bytes) {
  Slot& s = slot(me_);
  s.addr.store(reinterpret_cast<uint64_t>(addr), std::memory_order_relaxed);
  s.bytes.store(bytes, std::memory_order_relaxed);
  s.op.store(static_cast<int32_t>(kind), std::memory_order_relaxed);
  arrive();
  waitAll(kind, bytes, "to post its tensor");
  for (int j = 0; j < size(); ++j) {
    if (slot(j).op.load() == static_cast<int32_t>(kind) && slot(j).bytes.load() == bytes) continue;
    fail(kind, bytes,
         "rank " + std::to_string(members_[j]) + " posted " +
             kindName(static_cast<Kind>(slot(j).op.load())) + " of " +
             std::to_string(slot(j).bytes.load()) +
             " B at the same point: the ranks issue different collectives");
  }
}

void LocalComm::arrive() {
  Slot& s = slot(me_);
  s.arrived.store(++phase_, std::memory_order_seq_cst);
  if (s.waiters.load(std::memory_order_seq_cst) > 0) futexWake(&s.arrived);
}

void LocalComm::waitAll(Kind kind, int64_t bytes, const char* phase) {
  for (int j = 0; j < size(); ++j)
    if (j != me_) waitFor(j, phase_, kind, bytes, phase);
}

// Spins briefly (peers are usually within microseconds), then sleeps on the futex.
void LocalComm::waitFor(int j, uint32_t target, Kind kind, int64_t bytes, const char* phase) {
  Slot& s = slot(j);
  auto reached = [&] { return int32_t(s.arrived.load(std::memory_order_acquire) - target) >= 0; };
  for (int i = 0; i < 4000; ++i) {
    if (reached()) return;
    _mm_pause();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (!reached()) {
    if (std::chrono::steady_clock::now() > deadline)
      fail(kind, bytes,
           "timed out waiting for rank " + std::to_string(members_[j]) + " (pid " +
               std::to_string(pids_[j]) + ") " + phase);
    if (processGone(pids_[j]))
      fail(kind, bytes,
           "rank " + std::to_string(members_[j]) + " (pid " + std::to_string(pids_[j]) +
               ") exited while this rank waited for it " + phase);
    s.waiters.fetch_add(1, std::memory_order_seq_cst);
    uint32_t seen = s.arrived.load(std::memory_order_seq_cst);
    if (int32_t(seen - target) < 0) futexWait(&s.arrived, seen, 20'000'000);
    s.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void LocalComm::readPeer(int j, uint64_t remote, void* local, int64_t bytes, Kind kind) {
  std::string err = copyWithPeer(pids_[j], false, local, remote, bytes);
  if (!err.empty())
    fail(kind, bytes,
         "reading " + std::to_string(bytes) + " B of rank " + std::to_string(members_[j]) +
             " (pid " + std::to_string(pids_[j]) + "): " + err);
}

// dst[0, bytes) = dst (+ or max) every peer's [offset, offset + bytes) of its tensor.
void LocalComm::combinePeers(char* dst, int64_t offset, int64_t bytes, torch::ScalarType dt,
                             Kind kind) {
  const int64_t es = dt == torch::kFloat64 ? 8 : 4;
  char* piece = reinterpret_cast<char*>(scratch_.data());
  for (int64_t done = 0; done < bytes; done += kPieceBytes) {
    const int64_t len = std::min(kPieceBytes, bytes - done);
    for (int j = 0; j < size(); ++j) {
      if (j == me_) continue;
      readPeer(j, slot(j).addr.load(std::memory_order_relaxed) + uint64_t(offset + done), piece,
               len, kind);
      const int64_t n = len / es;
      if (dt == torch::kFloat64) {
        auto* d = reinterpret_cast<double*>(dst + done);
        auto* s = reinterpret_cast<const double*>(piece);
        kind == Kind::kAllReduceMax ? maxInto(d, s, n) : addInto(d, s, n);
      } else {
        auto* d = reinterpret_cast<float*>(dst + done);
        auto* s = reinterpret_cast<const float*>(piece);
        kind == Kind::kAllReduceMax ? maxInto(d, s, n) : addInto(d, s, n);
      }
    }
  }
}

// Three phases: post, reduce my chunk in place, copy the others' reduced chunks.
void LocalComm::allReduce(torch::Tensor& t, Kind kind) {
  if (lowPrecision(t) && t.is_contiguous()) {  // upcast, as Comm promises
    torch::Tensor wide = t.to(torch::kFloat32);
    allReduce(wide, kind);
    t.copy_(wide);
    return;
  }
  if (!reducible(t)) {
    kind == Kind::kAllReduceMax ? backend_->allReduceMax(t) : backend_->allReduceSum(t);
    return;
  }
  RECORD_USER_SCOPE(kindName(kind));
  CollectiveTimer timer;
  const int64_t es = static_cast<int64_t>(t.element_size()), bytes = t.numel() * es;
  char* base = static_cast<char*>(t.data_ptr());
  post(kind, base, bytes);
  auto [lo, hi] = chunk(me_, t.numel());
  combinePeers(base + lo * es, lo * es, (hi - lo) * es, t.scalar_type(), kind);
  arrive();
  waitAll(kind, bytes, "to reduce its chunk");
  for (int j = 0; j < size(); ++j) {
    if (j == me_) continue;
    auto [a, b] = chunk(j, t.numel());
    readPeer(j, slot(j).addr.load(std::memory_order_relaxed) + uint64_t(a * es), base + a * es,
             (b - a) * es, kind);
  }
  arrive();
  waitAll(kind, bytes, "to finish reading this rank's tensor");
}

void LocalComm::reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) {
  TORCH_CHECK(in.numel() == out.numel() * size(), "reduceScatter: out/in size mismatch");
  if (lowPrecision(in) && out.is_contiguous()) {
    torch::Tensor wide_out = torch::empty({out.numel()}, out.options().dtype(torch::kFloat32));
    reduceScatterSum(wide_out, in.to(torch::kFloat32));
    out.view(-1).copy_(wide_out);
    return;
  }
  if (!reducible(in) || !reducible(out) || in.scalar_type() != out.scalar_type()) {
    backend_->reduceScatterSum(out, in);
    return;
  }
  RECORD_USER_SCOPE("reduce_scatter");
  CollectiveTimer timer;
  const int64_t es = static_cast<int64_t>(in.element_size()), bytes = in.numel() * es;
  const int64_t mine = out.numel() * es;
  post(Kind::kReduceScatter, in.data_ptr(), bytes);
  std::memcpy(out.data_ptr(), static_cast<const char*>(in.data_ptr()) + me_ * mine, size_t(mine));
  combinePeers(static_cast<char*>(out.data_ptr()), me_ * mine, mine, in.scalar_type(),
               Kind::kReduceScatter);
  arrive();
  waitAll(Kind::kReduceScatter, bytes, "to finish reading this rank's tensor");
}

void LocalComm::allGather(torch::Tensor& out, const torch::Tensor& in) {
  TORCH_CHECK(out.numel() == in.numel() * size(), "allGather: out/in size mismatch");
  if (!in.device().is_cpu() || !out.device().is_cpu() || !in.is_contiguous() ||
      !out.is_contiguous() || in.scalar_type() != out.scalar_type()) {
    backend_->allGather(out, in);
    return;
  }
  RECORD_USER_SCOPE("allgather");
  CollectiveTimer timer;
  const int64_t each = in.numel() * static_cast<int64_t>(in.element_size());
  char* dst = static_cast<char*>(out.data_ptr());
  post(Kind::kAllGather, in.data_ptr(), each);
  std::memcpy(dst + me_ * each, in.data_ptr(), size_t(each));
  for (int j = 0; j < size(); ++j)
    if (j != me_)
      readPeer(j, slot(j).addr.load(std::memory_order_relaxed), dst + j * each, each,
               Kind::kAllGather);
  arrive();
  waitAll(Kind::kAllGather, each, "to finish reading this rank's tensor");
}

}  // namespace

torch::Tensor zerosForPeers(int64_t numel, torch::ScalarType dtype) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t elt = c10::elementSize(dtype);
  const size_t bytes = (size_t(std::max<int64_t>(numel, 1)) * elt + kHuge - 1) / kHuge * kHuge;
  // Over-map by one huge page and trim, so the buffer starts on a 2 MiB boundary.
  void* raw =
      mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return torch::zeros({numel}, torch::TensorOptions().dtype(dtype));
  const uintptr_t base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (base + kHuge - 1) / kHuge * kHuge;
  if (start > base) munmap(raw, start - base);
  if (const size_t tail = base + bytes + kHuge - (start + bytes); tail > 0)
    munmap(reinterpret_cast<void*>(start + bytes), tail);
  void* p = reinterpret_cast<void*>(start);
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without THP the buffer still works
  return torch::from_blob(
      p, {numel}, [bytes](void* q) { munmap(q, bytes); },
      torch::TensorOptions().dtype(dtype));
}

std::unique_ptr<Comm> makeLocalComm(std::unique_ptr<Comm> backend, c10d::Store& store,
                                    const std::vector<int>& members,
                                    std::chrono::milliseconds timeout, std::string* why) {
  const int n = backend->size();
  LocalMembers local;
  std::string err = joinLocalMemory(
      store, backend->rank(), members, size_t(n) * sizeof(Slot),
      [n](char* p) {
        for (int j = 0; j < n; ++j) new (p + j * sizeof(Slot)) Slot();
      },
      &local);
  if (!err.empty()) {
    *why = "backend (" + err + ")";
    return backend;
  }
  *why = "local memory (process_vm_readv)";
  return std::make_unique<LocalComm>(std::move(backend), members, std::move(local.pids),
                                     std::move(local.segment), timeout);
}

}  // namespace ftb
