#include "trainer/parallel/local_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "common/fd.h"
#include "trainer/parallel/dist.h"

namespace ftb {
namespace {

constexpr uint64_t kMagic = 0x3174636d6d6f6366ULL;  // an initialised segment's first word
constexpr size_t kHeader = 64;                      // magic, then the payload
// A word each member reads and rewrites in every other at set-up: proves cross-memory
// attach works in both directions.
volatile uint64_t g_probe_word = kMagic ^ 0x5a5a5a5aULL;

std::string fileFirstLine(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string nsLink(const char* path) {
  char buf[128];
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

constexpr const char* kSegmentPrefix = "ftb-comm-";

// This process's pid namespace as a number ("pid:[4026531836]" -> "4026531836").
std::string pidNamespace() {
  std::string digits;
  for (char c : nsLink("/proc/self/ns/pid"))
    if (c >= '0' && c <= '9') digits += c;
  return digits.empty() ? "0" : digits;
}

// "/ftb-comm-<pid>-<pid namespace>-<random>": the creator and where its pid means it.
std::string newSegmentName() {
  std::random_device rd;
  return "/" + std::string(kSegmentPrefix) + std::to_string(getpid()) + "-" + pidNamespace() + "-" +
         std::to_string(rd());
}

// The creator's segment name until every member has opened it: unlinked by unlinkNow() or,
// on any other way out (an exception: a peer's timeout), by the destructor.
class SegmentName {
 public:
  explicit SegmentName(std::string name) : name_(std::move(name)) {}
  ~SegmentName() { unlinkNow(); }
  SegmentName(const SegmentName&) = delete;
  SegmentName& operator=(const SegmentName&) = delete;
  void unlinkNow() {
    if (!name_.empty()) shm_unlink(name_.c_str());
    name_.clear();
  }

 private:
  std::string name_;
};

size_t segmentBytes(size_t payload) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (kHeader + payload + page - 1) / page * page;
}

// Maps the segment `name` (creating it and running `init` on its payload when `create`);
// returns "" or what failed. A segment it created and could not map is removed again.
std::string mapSegment(const std::string& name, size_t payload, bool create,
                       const std::function<void(char*)>& init, SharedSegment* out) {
  const size_t bytes = segmentBytes(payload);
  Fd fd(shm_open(name.c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600));
  if (fd.get() < 0) return "shm_open(" + name + "): " + errnoText(errno);
  if (create) {
    // fallocate, not just ftruncate: a full /dev/shm fails here, not as SIGBUS later. A
    // segment that cannot be sized is removed at once (the group falls back to the backend).
    std::string err;
    if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) err = "ftruncate: " + errnoText(errno);
    const int rc = err.empty() ? posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)) : 0;
    if (rc != 0)
      err = "posix_fallocate(" + std::to_string(bytes) + " B) in /dev/shm: " + errnoText(rc);
    if (!err.empty()) {
      shm_unlink(name.c_str());
      return err;
    }
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    const std::string err = "mmap: " + errnoText(errno);
    if (create) shm_unlink(name.c_str());
    return err;
  }
  *out = SharedSegment(p, bytes);
  auto* magic = static_cast<volatile uint64_t*>(p);
  if (create) {
    init(out->payload());
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *magic = kMagic;
  } else if (*magic != kMagic) {
    return "shared segment " + name + " is not an initialised control segment";
  }
  return "";
}

// A member's "who" record: "host key\npid probe-address\nsegment name".
struct MemberInfo {
  std::string key, segment;
  pid_t pid = 0;
  uint64_t probe = 0;
};

std::vector<MemberInfo> parseMembers(const std::vector<std::string>& records) {
  std::vector<MemberInfo> out(records.size());
  for (size_t j = 0; j < records.size(); ++j) {
    std::istringstream is(records[j]);
    std::getline(is, out[j].key);
    is >> out[j].pid >> out[j].probe;
    is.ignore(1);
    std::getline(is, out[j].segment);
  }
  return out;
}

// "" when this member can map the segment and read and write every peer's probe word.
std::string probe(const std::vector<MemberInfo>& info, int me, size_t payload,
                  SharedSegment* segment) {
  if (info[0].segment.rfind("!", 0) == 0)
    return "rank 0 of the group: " + info[0].segment.substr(1);
  if (me != 0) {
    std::string err = mapSegment(info[0].segment, payload, false, nullptr, segment);
    if (!err.empty()) return err;
  }
  const std::string hint =
      " (ptrace permission: kernel.yama.ptrace_scope, or a seccomp/container policy)";
  for (size_t j = 0; j < info.size(); ++j) {
    if (int(j) == me) continue;
    uint64_t v = 0;
    std::string err = copyWithPeer(info[j].pid, false, &v, info[j].probe, sizeof v);
    if (!err.empty()) return "pid " + std::to_string(info[j].pid) + ": " + err + hint;
    if (v != g_probe_word)
      return "process_vm_readv of pid " + std::to_string(info[j].pid) + " read a wrong value";
    err = copyWithPeer(info[j].pid, true, &v, info[j].probe, sizeof v);  // the same value
    if (!err.empty()) return "pid " + std::to_string(info[j].pid) + ": " + err + hint;
  }
  return "";
}

}  // namespace

SharedSegment::SharedSegment(SharedSegment&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& o) noexcept {
  std::swap(p_, o.p_);
  std::swap(n_, o.n_);
  return *this;
}

SharedSegment::~SharedSegment() {
  if (p_) munmap(p_, n_);
}

char* SharedSegment::payload() const { return static_cast<char*>(p_) + kHeader; }

std::string errnoText(int e) { return std::string(std::strerror(e)); }

void futexWait(std::atomic<uint32_t>* a, uint32_t expected, long ns) {
  timespec ts{0, ns};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWake(std::atomic<uint32_t>* a) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool processGone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

std::string copyWithPeer(pid_t pid, bool write, void* local, uint64_t remote, int64_t bytes) {
  char* p = static_cast<char*>(local);
  while (bytes > 0) {
    iovec l{p, static_cast<size_t>(bytes)};
    iovec r{reinterpret_cast<void*>(remote), static_cast<size_t>(bytes)};
    ssize_t n =
        write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0)
      return std::string(write ? "process_vm_writev" : "process_vm_readv") + ": " +
             errnoText(n < 0 ? errno : EIO);
    p += n;
    remote += static_cast<uint64_t>(n);
    bytes -= n;
  }
  return "";
}

std::string localHostKey() {
  return fileFirstLine("/proc/sys/kernel/random/boot_id") + " " + nsLink("/proc/self/ns/net") +
         " " + nsLink("/proc/self/ns/pid");
}

int removeStaleSegments() {
  const std::string ns = pidNamespace(), prefix = kSegmentPrefix;
  auto digits = [](const std::string& x) {
    return !x.empty() && x.size() < 19 && x.find_first_not_of("0123456789") == std::string::npos;
  };
  int removed = 0;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return 0;
  while (const dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.compare(0, prefix.size(), prefix) != 0) continue;
    std::vector<std::string> f;  // <pid>-<pid namespace>-<random>; other forms are left alone
    std::istringstream is(n.substr(prefix.size()));
    for (std::string part; std::getline(is, part, '-');) f.push_back(part);
    if (f.size() != 3 || !digits(f[0]) || f[1] != ns || !digits(f[2])) continue;
    const pid_t pid = static_cast<pid_t>(std::stoll(f[0]));
    if (pid > 0 && processGone(pid) && shm_unlink(("/" + n).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

std::string joinLocalMemory(c10d::Store& store, int me, const std::vector<int>& ranks,
                            size_t payload_bytes, const std::function<void(char*)>& init,
                            LocalMembers* out) {
  const int n = static_cast<int>(ranks.size());
  // Under Yama ptrace_scope 1 (Ubuntu's default) only a process's ancestors may read its
  // memory, and the ranks are siblings; this lets the peers (any process of this user,
  // as without Yama) read it. EINVAL where Yama is absent: nothing to do.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  SharedSegment segment;
  std::string name;
  if (me == 0) {
    removeStaleSegments();
    name = newSegmentName();
    std::string err = mapSegment(name, payload_bytes, true, init, &segment);
    if (!err.empty()) name = "!" + err;  // mapSegment removed it
  }
  SegmentName created(me == 0 && name.rfind("!", 0) != 0 ? name : "");
  std::ostringstream mine;
  mine << localHostKey() << "\n"
       << getpid() << " " << reinterpret_cast<uint64_t>(&g_probe_word) << "\n"
       << name;
  std::vector<MemberInfo> info = parseMembers(
      gatherThroughStore(store, "local/who/", me, n, mine.str(), "local transport: who"));
  std::string verdict;
  for (int j = 1; j < n && verdict.empty(); ++j)
    if (info[j].key != info[0].key) verdict = "ranks on more than one host";
  if (verdict.empty()) verdict = probe(info, me, payload_bytes, &segment);
  std::vector<std::string> oks =
      gatherThroughStore(store, "local/ok/", me, n, verdict.empty() ? "ok" : "no: " + verdict,
                         "local transport: verdict");
  created.unlinkNow();  // every member has mapped it (or failed to): the name is not needed
  for (int j = 0; j < n; ++j)
    if (oks[j] != "ok") return "rank " + std::to_string(ranks[j]) + ": " + oks[j].substr(4);
  out->segment = std::move(segment);
  out->pids.clear();
  for (const MemberInfo& m : info) out->pids.push_back(m.pid);
  return "";
}

}  // namespace ftb
