#include "launcher/env_probe.h"

#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/cpu_info.h"
#include "common/env_check.h"
#include "launcher/process.h"

namespace ftb::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// The probe's side: `interp --list program`'s stdout (empty with *why on failure).
std::string loaderList(const std::string& interp, const std::string& program, std::string* why) {
  int fds[2];
  if (pipe(fds) != 0) {
    *why = std::string("pipe: ") + std::strerror(errno);
    return "";
  }
  const pid_t pid = fork();
  if (pid < 0) {
    *why = std::string("fork: ") + std::strerror(errno);
    return "";
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    execl(interp.c_str(), interp.c_str(), "--list", program.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, size_t(n));
  }
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    *why = interp + " --list " + program + " failed: " + out.substr(0, out.find('\n'));
    return "";
  }
  return out;
}

// Reads `timeout_s` at most from the probe's output pipe, then reaps it.
std::string collect(WorkerProcess& p, Fd& out, Clock::time_point deadline) {
  std::string text;
  char buf[4096];
  while (out) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return "";
    pollfd pfd{out.get(), POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(left.count()));
    ssize_t n = read(out.get(), buf, sizeof buf);
    if (n == 0) out.reset();
    if (n > 0) text.append(buf, size_t(n));
  }
  while (!p.tryReap()) {
    if (Clock::now() > deadline) return "";
    usleep(1000);
  }
  return text;
}

}  // namespace

std::string elfInterpreter(const std::string& path, std::string* why) {
  std::ifstream f(path, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!f.read(reinterpret_cast<char*>(&eh), sizeof eh) ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    *why = path + " is not an ELF executable (a script?)";
    return "";
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
    *why = path + " is not a 64-bit ELF executable";
    return "";
  }
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    f.seekg(std::streamoff(eh.e_phoff + uint64_t(i) * sizeof ph));
    if (!f.read(reinterpret_cast<char*>(&ph), sizeof ph)) break;
    if (ph.p_type != PT_INTERP) continue;
    if (ph.p_filesz == 0 || ph.p_filesz > 4096) break;
    std::string interp(ph.p_filesz, '\0');
    f.seekg(std::streamoff(ph.p_offset));
    if (!f.read(interp.data(), std::streamsize(interp.size()))) break;
    interp.resize(std::strlen(interp.c_str()));
    return interp;
  }
  *why = path + " has no ELF interpreter (statically linked)";
  return "";
}

int runEnvProbe(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::cerr << "usage: launcher __env-probe PROGRAM (internal: what --dry-run shows)\n";
    return 2;
  }
  std::string why;
  const std::string interp = elfInterpreter(args[0], &why);
  const std::string list = interp.empty() ? "" : loaderList(interp, args[0], &why);
  if (!why.empty()) {
    std::cout << "BLAS and allocator unknown: " << why << "\n";
    return 0;
  }
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const EnvFacts f = detectEnvOf(parseLoaderList(list), detectCpu(), omp ? std::atoi(omp) : 0);
  std::cout << envSummary(f) << "\n";
  for (const std::string& w : envWarnings(f, 0, PeakFlops{}, "fp32")) std::cout << w << "\n";
  return 0;
}

std::string probeWorkerEnv(const NodeInfo& n, const std::string& program_path,
                           const std::vector<std::string>& inherited_env, double timeout_s) {
  try {
    EnvVars tuned;
    for (const EnvChange& c : tunedEnv(n, 0)) tuned.emplace_back(c.name, c.value);
    PipeFds out = makePipe();
    SpawnRequest req;
    req.path = "/proc/self/exe";
    req.argv = {"launcher", "__env-probe", program_path};
    req.env = mergeEnv(inherited_env, tuned);
    req.cpus = workerCpus(n, 0);
    req.stdout_fd = out.write.get();
    req.stderr_fd = out.write.get();
    const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    WorkerProcess p(req);
    out.write.reset();
    const std::string exec_error = p.waitExec(deadline);
    if (!exec_error.empty()) return "not probed: /proc/self/exe: " + exec_error;
    std::string text = collect(p, out.read, deadline);
    if (p.running())
      return "not probed: the probe of " + program_path + " did not finish within " +
             std::to_string(int(timeout_s)) + " s on host " + n.host;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    if (p.exitCode() != 0 || p.termSignal() != 0 || text.empty())
      return "not probed: the probe of " + program_path + " failed (exit " +
             std::to_string(p.exitCode()) + ", signal " + std::to_string(p.termSignal()) +
             "): " + text;
    return text;
  } catch (const std::exception& e) {
    return std::string("not probed: ") + e.what();
  }
}

}  // namespace ftb::launcher
