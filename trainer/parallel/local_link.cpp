#include "trainer/parallel/local_link.h"

#include <immintrin.h>
#include <sched.h>

#include <atomic>
#include <new>
#include <sstream>
#include <stdexcept>

#include "common/error.h"
#include "common/log.h"
#include "trainer/parallel/local_memory.h"

namespace ftb {
namespace {

constexpr uint32_t kMaxInFlight = 4096;

enum State : uint32_t {
  kFree = 0,
  kPosted,    // waiting for the other end's post
  kCopying,   // the other end is copying
  kDone,      // copied; the poster frees the slot
  kMismatch,  // the other end posted another size (in `other_bytes`)
  kFailed,    // the other end's copy failed
};

struct alignas(64) Header {
  std::atomic<uint32_t> lock{0};
  uint32_t used = 0;  // slots [0, used) have been used (under the lock)
};

// One message. `state` is the futex word; the rest is written under the lock by the
// poster (and `other_bytes` by the copier before it publishes kMismatch).
struct alignas(64) Message {
  std::atomic<uint32_t> state{kFree};
  std::atomic<uint32_t> waiters{0};  // the poster in a futex wait on `state`
  int32_t tag = 0, sender = 0, poster = 0;
  uint64_t addr = 0;
  int64_t bytes = 0, other_bytes = 0;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

class LocalLink;

// A post of this end that waits for the other end's copy (slot >= 0), or one that is
// complete already (slot < 0).
class LocalWork final : public PendingWork {
 public:
  LocalWork(LocalLink* link, int slot, torch::Tensor keep, std::string what)
      : link_(link), slot_(slot), keep_(std::move(keep)), what_(std::move(what)) {}
  ~LocalWork() override;
  void wait() override;

 private:
  LocalLink* link_;
  int slot_;
  torch::Tensor keep_;
  std::string what_;
};

class LocalLink final : public P2PLink {
 public:
  LocalLink(LocalMembers members, int me, PeerInfo peer, std::chrono::milliseconds timeout)
      : P2PLink(std::move(peer)),
        members_(std::move(members)),
        me_(me),
        peer_pid_(members_.pids[1 - me]),
        timeout_(timeout) {}
  std::string transport() const override { return "local memory"; }

  // wait() of the post in `slot`: until the other end copied, then frees the slot.
  void awaitCopy(int slot, const std::string& what);
  // Withdraws the post in `slot` (its PendingWork dies unwaited): frees it unless the
  // other end is copying, then after the copy.
  void withdraw(int slot) noexcept;

 private:
  Header& header() const { return *reinterpret_cast<Header*>(members_.segment.payload()); }
  Message& message(int i) const {
    return reinterpret_cast<Message*>(members_.segment.payload() + sizeof(Header))[i];
  }
  std::unique_ptr<PendingWork> postSend(const torch::Tensor& bytes, int tag,
                                        const std::string& what) override {
    return post(true, tag, bytes, what);
  }
  std::unique_ptr<PendingWork> postRecv(const torch::Tensor& bytes, int tag,
                                        const std::string& what) override {
    return post(false, tag, bytes, what);
  }
  std::unique_ptr<PendingWork> post(bool send, int tag, const torch::Tensor& bytes,
                                    const std::string& what);
  int findOrClaim(bool send, int tag, int64_t bytes, uint64_t addr, const std::string& what);
  void copyMatched(bool send, int slot, const torch::Tensor& bytes, const std::string& what);
  void lock(const std::string& what);
  void unlock() { header().lock.store(0, std::memory_order_release); }
  // Sleeps on `m` while its state is kPosted or kCopying, up to the deadline.
  uint32_t sleepOn(Message& m, const std::string& what, int64_t bytes);
  std::string timeoutText() const {  // "2 s (parallel.timeout_seconds)"
    std::ostringstream os;
    os << timeout_.count() / 1000.0 << " s (parallel.timeout_seconds)";
    return os.str();
  }
  [[noreturn]] void fail(const std::string& what, int64_t bytes, const std::string& why) const;

  LocalMembers members_;
  int me_;
  pid_t peer_pid_;
  std::chrono::milliseconds timeout_;
};

LocalWork::~LocalWork() {
  if (slot_ >= 0) link_->withdraw(slot_);
}

void LocalWork::wait() {
  if (slot_ < 0) return;
  const int slot = std::exchange(slot_, -1);
  link_->awaitCopy(slot, what_);
}

void LocalLink::fail(const std::string& what, int64_t bytes, const std::string& why) const {
  std::ostringstream os;
  os << logPrefix() << " waiting to " << what << " (" << bytes
     << " bytes) over local memory failed: " << why;
  throw DistError(os.str());
}

void LocalLink::lock(const std::string& what) {
  std::atomic<uint32_t>& l = header().lock;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (uint64_t i = 0;; ++i) {
    uint32_t expected = 0;
    if (l.load(std::memory_order_relaxed) == 0 &&
        l.compare_exchange_weak(expected, 1, std::memory_order_acquire))
      return;
    if (i < 1000) {
      _mm_pause();
      continue;
    }
    sched_yield();  // the holder runs a few loads and stores; it was descheduled
    if (i % 1024 != 0) continue;
    if (processGone(peer_pid_))
      fail(what, 0,
           "the peer " + peer_.text() + " (pid " + std::to_string(peer_pid_) +
               ") exited holding the link's lock");
    if (std::chrono::steady_clock::now() > deadline)
      fail(what, 0,
           "timed out after " + timeoutText() + " taking the link's lock, held by " + peer_.text());
  }
}

std::unique_ptr<PendingWork> LocalLink::post(bool send, int tag, const torch::Tensor& bytes,
                                             const std::string& what) {
  const uint64_t addr = reinterpret_cast<uint64_t>(bytes.data_ptr());
  const int slot = findOrClaim(send, tag, bytes.numel(), addr, what);
  if (slot >= 0) return std::make_unique<LocalWork>(this, slot, bytes, what);
  copyMatched(send, -slot - 1, bytes, what);
  return std::make_unique<LocalWork>(this, -1, torch::Tensor(), what);
}

// Under the lock: the other end's matching post is marked kCopying (returns -1 - its
// slot), or this post is recorded in a free slot (returns the slot).
int LocalLink::findOrClaim(bool send, int tag, int64_t bytes, uint64_t addr,
                           const std::string& what) {
  const int32_t sender = send ? me_ : 1 - me_;
  lock(what);
  int free_slot = -1;
  Header& h = header();
  for (uint32_t i = 0; i < h.used; ++i) {
    Message& m = message(int(i));
    const uint32_t st = m.state.load(std::memory_order_acquire);
    if (st == kFree) {
      if (free_slot < 0) free_slot = int(i);
      continue;
    }
    if (st != kPosted || m.tag != tag || m.sender != sender) continue;
    if (m.poster == me_) {
      unlock();
      throw std::logic_error("P2PLink: tag " + std::to_string(tag) + " posted twice in flight (" +
                             what + ")");
    }
    m.state.store(kCopying, std::memory_order_relaxed);
    unlock();
    return -1 - int(i);
  }
  if (free_slot < 0 && h.used < kMaxInFlight) free_slot = int(h.used++);
  if (free_slot < 0) {
    unlock();
    fail(what, bytes,
         "more than " + std::to_string(kMaxInFlight) + " messages in flight on the link");
  }
  Message& m = message(free_slot);
  m.tag = tag;
  m.sender = sender;
  m.poster = me_;
  m.addr = addr;
  m.bytes = bytes;
  m.other_bytes = 0;
  m.state.store(kPosted, std::memory_order_release);
  unlock();
  return free_slot;
}

// Copies between this end's `bytes` and the other end's posted buffer in `slot`, then
// publishes the outcome and wakes the other end.
void LocalLink::copyMatched(bool send, int slot, const torch::Tensor& bytes,
                            const std::string& what) {
  Message& m = message(slot);
  const int64_t n = bytes.numel();
  std::string err;
  uint32_t outcome = kDone;
  if (m.bytes != n) {
    m.other_bytes = n;
    outcome = kMismatch;
    err = "the sizes differ: this rank posted " + std::to_string(n) + " bytes, " + peer_.text() +
          " posted " + std::to_string(m.bytes) + " bytes for tag " + std::to_string(m.tag);
  } else {
    err = copyWithPeer(peer_pid_, send, bytes.data_ptr(), m.addr, n);
    if (!err.empty()) {
      outcome = kFailed;
      err = "copying with " + peer_.text() + " (pid " + std::to_string(peer_pid_) + "): " + err;
    }
  }
  m.state.store(outcome, std::memory_order_seq_cst);
  if (m.waiters.load(std::memory_order_seq_cst) > 0) futexWake(&m.state);
  if (!err.empty()) fail(what, n, err);
}

uint32_t LocalLink::sleepOn(Message& m, const std::string& what, int64_t bytes) {
  auto pending = [](uint32_t s) { return s == kPosted || s == kCopying; };
  for (int i = 0; i < 256; ++i) {
    const uint32_t s = m.state.load(std::memory_order_acquire);
    if (!pending(s)) return s;
    _mm_pause();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    m.waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = m.state.load(std::memory_order_seq_cst);
    if (pending(seen)) futexWait(&m.state, seen, 20'000'000);
    m.waiters.fetch_sub(1, std::memory_order_seq_cst);
    const uint32_t s = m.state.load(std::memory_order_acquire);
    if (!pending(s)) return s;
    const std::string who = peer_.text() + " (pid " + std::to_string(peer_pid_) + ")";
    if (processGone(peer_pid_)) fail(what, bytes, "the peer " + who + " exited");
    if (std::chrono::steady_clock::now() > deadline)
      fail(what, bytes,
           "timed out after " + timeoutText() + ": the peer " + who +
               " did not post the matching message");
  }
}

void LocalLink::awaitCopy(int slot, const std::string& what) {
  CollectiveTimer timer;  // time blocked on the pipeline counts as communication
  Message& m = message(slot);
  const int64_t bytes = m.bytes;
  uint32_t s = kFailed;
  try {
    s = sleepOn(m, what, bytes);
  } catch (...) {
    withdraw(slot);
    throw;
  }
  const int64_t other = m.other_bytes;
  m.state.store(kFree, std::memory_order_release);
  if (s == kMismatch)
    fail(what, bytes,
         "the sizes differ: this rank posted " + std::to_string(bytes) + " bytes, " + peer_.text() +
             " posted " + std::to_string(other) + " bytes");
  if (s == kFailed) fail(what, bytes, "the copy by " + peer_.text() + " failed (see its log)");
}

void LocalLink::withdraw(int slot) noexcept {
  Message& m = message(slot);
  try {
    lock("withdraw a message");
    uint32_t posted = kPosted;
    const bool withdrawn = m.state.compare_exchange_strong(posted, kFree);
    unlock();
    if (withdrawn) return;
    sleepOn(m, "withdraw a message", m.bytes);  // the other end is copying: let it finish
  } catch (const std::exception& e) {
    FTB_WARN("pipeline link to " << peer_.text() << ": " << firstLine(e.what()));
    return;  // the peer is gone or stuck: the slot stays taken
  }
  m.state.store(kFree, std::memory_order_release);
}

}  // namespace

std::unique_ptr<P2PLink> makeLocalLink(c10d::Store& store, int me, const std::vector<int>& ranks,
                                       PeerInfo peer, std::chrono::milliseconds timeout,
                                       std::string* why) {
  LocalMembers members;
  *why = joinLocalMemory(
      store, me, ranks, sizeof(Header) + kMaxInFlight * sizeof(Message),
      [](char* p) {
        new (p) Header();
        for (uint32_t i = 0; i < kMaxInFlight; ++i)
          new (p + sizeof(Header) + i * sizeof(Message)) Message();
      },
      &members);
  if (!why->empty()) return nullptr;
  return std::make_unique<LocalLink>(std::move(members), me, std::move(peer), timeout);
}

}  // namespace ftb
