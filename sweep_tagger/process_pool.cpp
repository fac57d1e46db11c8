#include "sweep_tagger/process_pool.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "common/fd.h"

namespace ftb {
namespace {

using Clock = std::chrono::steady_clock;

struct Worker {
  pid_t pid;
  int fd;  // read end of the child's result pipe
  std::string buf;
  Clock::time_point last = Clock::now();  // start, or the last result line
};

// Child: writes "i\tresult\n" per job, then _exit (no atexit handlers, no flushing of
// the parent's stdio buffers).
[[noreturn]] void childMain(int fd, const std::vector<size_t>& jobs,
                            const std::function<std::string(size_t)>& f) {
  for (size_t i : jobs) {
    std::string line = std::to_string(i) + "\t" + f(i) + "\n";
    if (writeAll(fd, line.data(), line.size()) != 0) _exit(1);
  }
  _exit(0);
}

std::optional<Worker> spawn(const std::vector<size_t>& jobs,
                            const std::function<std::string(size_t)>& f) {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    close(fds[0]);
    childMain(fds[1], jobs, f);
  }
  close(fds[1]);
  return Worker{pid, fds[0], ""};
}

// SIGKILLs every worker whose last result is older than timeout_s (> 0).
void killStalled(std::vector<Worker>& workers, const std::vector<pollfd>& pfds, double timeout_s) {
  if (timeout_s <= 0) return;
  for (size_t k = 0; k < workers.size(); ++k)
    if (pfds[k].fd >= 0 &&
        std::chrono::duration<double>(Clock::now() - workers[k].last).count() > timeout_s)
      kill(workers[k].pid, SIGKILL);  // its pipe then reaches EOF
}

// Reads every worker's lines until EOF into `out`, then reaps the workers.
void drain(std::vector<Worker>& workers, std::vector<std::optional<std::string>>& out,
           double timeout_s) {
  std::vector<pollfd> pfds;
  for (const Worker& w : workers) pfds.push_back({w.fd, POLLIN, 0});
  size_t open = workers.size();
  char chunk[1 << 16];
  const int poll_ms = timeout_s > 0 ? std::max(10, static_cast<int>(timeout_s * 250)) : -1;
  while (open > 0) {
    killStalled(workers, pfds, timeout_s);
    if (poll(pfds.data(), pfds.size(), poll_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (size_t k = 0; k < workers.size(); ++k) {
      if (pfds[k].fd < 0 || !(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t r = read(pfds[k].fd, chunk, sizeof chunk);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        close(pfds[k].fd);
        pfds[k].fd = -1;
        --open;
        continue;
      }
      std::string& buf = workers[k].buf;
      buf.append(chunk, static_cast<size_t>(r));
      size_t start = 0;
      for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
        size_t tab = buf.find('\t', start);
        if (tab == std::string::npos || tab > nl) continue;
        size_t i = std::stoul(buf.substr(start, tab - start));
        if (i < out.size()) out[i] = buf.substr(tab + 1, nl - tab - 1);
        workers[k].last = Clock::now();
      }
      buf.erase(0, start);
    }
  }
  for (size_t k = 0; k < workers.size(); ++k)
    if (pfds[k].fd >= 0) close(pfds[k].fd);
  for (const Worker& w : workers) {
    int status = 0;
    while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

std::vector<std::optional<std::string>> mapInProcesses(size_t n, int jobs,
                                                       const std::function<std::string(size_t)>& f,
                                                       double item_timeout_s) {
  std::vector<std::optional<std::string>> out(n);
  const size_t workers = std::min<size_t>(static_cast<size_t>(std::max(jobs, 1)), n);
  if (workers <= 1 && item_timeout_s <= 0) {
    for (size_t i = 0; i < n; ++i) out[i] = f(i);
    return out;
  }
  std::vector<Worker> pool;
  for (size_t w = 0; w < workers; ++w) {
    std::vector<size_t> mine;
    for (size_t i = w; i < n; i += workers) mine.push_back(i);
    if (auto worker = spawn(mine, f)) pool.push_back(std::move(*worker));
  }
  drain(pool, out, item_timeout_s);
  for (size_t i = 0; i < n; ++i) {  // lost to a crash (or a failed fork): alone
    if (out[i]) continue;
    std::vector<Worker> one;
    if (auto worker = spawn({i}, f)) one.push_back(std::move(*worker));
    drain(one, out, item_timeout_s);
  }
  return out;
}

}  // namespace ftb
