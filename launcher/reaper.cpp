#include "launcher/reaper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "launcher/mpi_daemons.h"

namespace ftb::launcher {
namespace {

struct Record {
  char op;  // '+' add, '-' remove; 'H' / 'D': end this mpirun / orted after the EOF
  pid_t pgid;
  uint64_t start_time;  // 'H' / 'D' only
};

// Reaper side: never returns.
[[noreturn]] void reaperMain(int fd) {
  setsid();
  prctl(PR_SET_NAME, "ftb-reaper", 0, 0, 0);
  // fd 3 = the pipe; 0-2 = /dev/null: hold nothing the launcher's caller waits on (a pipe
  // to pytest or ssh), nothing else open.
  if (fd != 3) {
    dup2(fd, 3);
    fd = 3;
  }
  syscall(SYS_close_range, 4u, ~0u, 0u);
  int null = open("/dev/null", O_RDWR);
  for (int i = 0; i < 3; ++i)
    if (null >= 0 && null != i) dup2(null, i);
  if (null > 3) close(null);
  for (int s = 1; s < NSIG; ++s)
    if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_IGN);
  std::set<pid_t> groups;
  std::vector<MpiDaemon> daemons;
  Record r;
  while (true) {
    ssize_t n = read(fd, &r, sizeof r);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof r)) break;  // EOF (or a torn write): launcher gone
    if (r.op == '+') groups.insert(r.pgid);
    if (r.op == '-') groups.erase(r.pgid);
    if (r.op == 'H' || r.op == 'D')
      daemons.push_back(MpiDaemon{r.pgid, r.start_time, r.op == 'H', ""});
  }
  for (pid_t g : groups)
    if (g > 1) kill(-g, SIGKILL);
  if (!daemons.empty()) endMpiDaemons(daemons, kEndDaemonsWaitS);
  _exit(0);
}

}  // namespace

Reaper::Reaper() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw DistError(std::string("reaper pipe2: ") + strerror(errno));
  Fd read_end(p[0]);
  pipe_ = Fd(p[1]);
  pid_ = fork();
  if (pid_ < 0) throw DistError(std::string("fork of the reaper: ") + strerror(errno));
  if (pid_ == 0) {
    pipe_.reset();
    reaperMain(read_end.release());
  }
}

Reaper::~Reaper() { pipe_.reset(); }

std::string Reaper::endMpiDaemonsAfterExit() {
  const std::vector<MpiDaemon> daemons = mpiDaemonsAbove(getpid());
  for (const auto& d : daemons) send(d.head ? 'H' : 'D', d.pid, d.start_time);
  return describeDaemons(daemons);
}

void Reaper::send(char op, pid_t pgid, uint64_t start_time) {
  Record r{op, pgid, start_time};
  // One record is far below PIPE_BUF: the write is atomic. EPIPE: the reaper is gone.
  if (write(pipe_.get(), &r, sizeof r) != static_cast<ssize_t>(sizeof r) && !warned_) {
    warned_ = true;
    FTB_WARN("reaper (pid " << pid_ << ") unreachable: " << strerror(errno)
                            << "; processes started by workers may outlive a killed launcher");
  }
}

}  // namespace ftb::launcher
