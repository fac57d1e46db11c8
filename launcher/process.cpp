#include "launcher/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/error.h"

namespace ftb::launcher {

PipeFds makePipe() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw DistError(std::string("pipe2: ") + std::strerror(errno));
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  return {Fd(p[0]), Fd(p[1])};
}

void ensureStdFds() {
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
}

std::string resolveProgram(const std::string& name, const std::string& path_env) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    throw ConfigError("PROGRAM", "command line", "'" + name + "' is not an executable file",
                      "check the path");
  }
  std::stringstream ss(path_env);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(p)) return p;
  }
  throw ConfigError("PROGRAM", "command line", "'" + name + "' not found in PATH",
                    "PATH=" + path_env);
}

namespace {

// Child side, between fork and execve: async-signal-safe calls only. Never returns.
[[noreturn]] void execChild(const SpawnRequest& req, pid_t parent, int status_fd, char* const* argv,
                            char* const* envp, const cpu_set_t* cpus) {
  auto fail = [&](int err) {
    (void)!write(status_fd, &err, sizeof err);
    _exit(err == ENOENT ? 127 : 126);
  };
  setpgid(0, 0);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  if (getppid() != parent) _exit(137);  // the launcher died before prctl took effect
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, 0) < 0) fail(errno);
  if (dup2(req.stdout_fd, 1) < 0 || dup2(req.stderr_fd, 2) < 0) fail(errno);
  // Close everything else (MPI sockets, other workers' pipes) except the status pipe.
  if (status_fd > 3) syscall(SYS_close_range, 3u, static_cast<unsigned>(status_fd - 1), 0u);
  syscall(SYS_close_range, static_cast<unsigned>(status_fd + 1), ~0u, 0u);
  if (cpus && sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0) fail(errno);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, req.mask, nullptr);
  execve(req.path.c_str(), argv, envp);
  fail(errno);
  _exit(127);
}

std::vector<char*> cstrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

WorkerProcess::WorkerProcess(const SpawnRequest& req) {
  auto argv = cstrings(req.argv);
  auto envp = cstrings(req.env);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : req.cpus) CPU_SET(c, &set);
  PipeFds status = makePipe();
  pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) throw DistError(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0)
    execChild(req, parent, status.write.get(), argv.data(), envp.data(),
              req.cpus.empty() ? nullptr : &set);
  setpgid(pid_, pid_);  // also done in the child; whichever runs first wins the race
  exec_status_ = std::move(status.read);
}

WorkerProcess::~WorkerProcess() {
  if (pid_ <= 0) return;
  signalGroup(SIGKILL);
  // Reap for at most ~1 s; a process stuck in the kernel is left to init.
  for (int i = 0; i < 1000 && running_; ++i) {
    if (!tryReap()) usleep(1000);
  }
}

std::string WorkerProcess::waitExec(std::chrono::steady_clock::time_point deadline) {
  while (exec_status_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw DistError("timed out waiting for worker pid " + std::to_string(pid_) +
                      " to call execve");
    pollfd p{exec_status_.get(), POLLIN, 0};
    poll(&p, 1, static_cast<int>(left.count()));
    int err = 0;
    ssize_t n = read(exec_status_.get(), &err, sizeof err);
    if (n == 0) {
      exec_status_.reset();
      return "";
    }
    if (n == static_cast<ssize_t>(sizeof err)) {
      exec_status_.reset();
      return std::string("execve: ") + std::strerror(err);
    }
  }
  return "";
}

bool WorkerProcess::tryReap() {
  if (!running_) return true;
  int st = 0;
  pid_t r;
  while ((r = waitpid(pid_, &st, WNOHANG | WUNTRACED | WCONTINUED)) == pid_ &&
         (WIFSTOPPED(st) || WIFCONTINUED(st))) {
    if (WIFCONTINUED(st)) {
      stopped_since_us_ = 0;
    } else if (!stopped_since_us_) {
      stop_signal_ = WSTOPSIG(st);
      stopped_since_us_ = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    }
  }
  if (r == 0) return false;
  if (r < 0 && errno == EINTR) return false;
  running_ = false;
  stopped_since_us_ = 0;
  if (r == pid_ && WIFSIGNALED(st)) {
    term_signal_ = WTERMSIG(st);
  } else if (r == pid_) {
    exit_code_ = WEXITSTATUS(st);
  } else {
    exit_code_ = 255;  // ECHILD: reaped elsewhere; should not happen
  }
  return true;
}

void WorkerProcess::signalGroup(int sig) const {
  if (pid_ > 0) kill(-pid_, sig);
}

}  // namespace ftb::launcher
