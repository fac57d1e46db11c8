#include "sweep_tagger/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

extern char** environ;

namespace ftb {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

bool reapWithin(pid_t pid, double timeout_s, int& status) {
  const double deadline = now() + timeout_s;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return status = 0, true;
    if (now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

CommandResult runCommand(const std::vector<std::string>& argv, const std::string& log_path,
                         double timeout_s, double grace_s) {
  CommandResult res;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(log_path).parent_path(), ec);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const double start = now();
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    res.spawn_error = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return res;
  }
  int status = 0;
  bool exited = reapWithin(pid, timeout_s, status);
  if (!exited) {
    res.timed_out = true;
    kill(pid, SIGTERM);
    exited = reapWithin(pid, grace_s, status);
    if (!exited) {
      kill(pid, SIGKILL);
      exited = reapWithin(pid, 60, status);
    }
  }
  res.exit_code = exited ? exitCodeOf(status) : -1;
  res.wall_s = now() - start;
  return res;
}

}  // namespace ftb
