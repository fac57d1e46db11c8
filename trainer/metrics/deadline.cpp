#include "trainer/metrics/deadline.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/out_of_memory.h"
#include "common/proc_memory.h"

namespace ftb {

int64_t gemmMeasureBytes(torch::ScalarType dtype, int64_t n, bool on_gpu) {
  if (on_gpu) return 0;
  return 3 * n * n * int64_t(c10::elementSize(dtype)) + kBlasWorkBytes;
}

namespace {

// addressSpaceShortfall into `text` (n bytes): false when the bytes can be mapped. No heap.
bool shortfallText(int64_t bytes, char* text, size_t n) {
  if (bytes <= 0) return false;
  void* p =
      mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) {
    munmap(p, size_t(bytes));
    return false;
  }
  const int err = errno;
  rlimit as{};
  getrlimit(RLIMIT_AS, &as);
  const long mapped = long(mappedBytes() >> 20), want = long(bytes >> 20);
  if (as.rlim_cur != RLIM_INFINITY)
    std::snprintf(text, n,
                  "cannot map %ld MiB more (mmap: %s): %ld MiB of the address-space limit "
                  "(ulimit -v) of %ld MiB are mapped",
                  want, std::strerror(err), mapped, long(as.rlim_cur >> 20));
  else
    std::snprintf(text, n,
                  "cannot map %ld MiB more (mmap: %s) with %ld MiB mapped: the machine's "
                  "memory (or its overcommit limit) is exhausted",
                  want, std::strerror(err), mapped);
  return true;
}

// The watchdog's verdict, past the deadline: the message, then the end of the process. No
// heap: what is missing may be memory.
[[noreturn]] void deadlinePassed(const char* what, int64_t bytes, double deadline_s) {
  char short_of[320] = {}, msg[1024];
  const bool oom = shortfallText(bytes, short_of, sizeof short_of);
  const int len = std::snprintf(
      msg, sizeof msg, "%s %s did not finish within %.0f s%s%s\n", logPrefix().c_str(), what,
      deadline_s, oom ? ": out of memory: " : " (the machine is overloaded or hung)", short_of);
  [[maybe_unused]] const ssize_t written =
      ::write(2, msg, size_t(std::min<int>(len, int(sizeof msg) - 1)));
  std::_Exit(oom ? kExitOutOfMemory : 1);
}

}  // namespace

std::string addressSpaceShortfall(int64_t bytes) {
  char text[320];
  return shortfallText(bytes, text, sizeof text) ? std::string(text) : std::string();
}

double measureWithDeadline(const std::string& what, int64_t bytes, double deadline_s,
                           const std::function<double()>& measure) {
  if (const std::string short_of = addressSpaceShortfall(bytes); !short_of.empty())
    throw OomError(logPrefix() + " " + what + ": " + short_of);
  struct Shared {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
  };
  auto sh = std::make_shared<Shared>();
  std::thread watchdog;
  try {
    watchdog = std::thread([sh, what, bytes, deadline_s] {
      std::unique_lock<std::mutex> lock(sh->m);
      const auto limit = std::chrono::duration<double>(deadline_s);
      if (!sh->cv.wait_for(lock, limit, [&] { return sh->done; }))
        deadlinePassed(what.c_str(), bytes, deadline_s);
    });
  } catch (const std::system_error& e) {
    throw OomError(logPrefix() + " " + what + ": cannot start its watchdog thread: " + e.what());
  }
  struct Release {  // on every way out of measure(): stop and join the watchdog
    Shared& sh;
    std::thread& t;
    ~Release() {
      {
        std::lock_guard<std::mutex> lock(sh.m);
        sh.done = true;
      }
      sh.cv.notify_all();
      t.join();
    }
  } release{*sh, watchdog};
  return measure();
}

}  // namespace ftb
