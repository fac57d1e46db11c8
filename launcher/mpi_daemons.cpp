#include "launcher/mpi_daemons.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace ftb::launcher {
namespace {

struct ProcStat {
  std::string comm;
  char state = '?';
  pid_t ppid = 0;
  uint64_t start_time = 0;
};

// /proc/PID/stat: "pid (comm) state ppid ... starttime(22) ..."; false when gone.
bool readStat(pid_t pid, ProcStat* out) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  out->comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; rest >> field; ++i) {
    if (i == 3) out->state = field[0];
    if (i == 4) out->ppid = static_cast<pid_t>(std::stoll(field));
    if (i == 22) {
      out->start_time = std::stoull(field);
      return true;
    }
  }
  return false;
}

bool sameProcess(const MpiDaemon& d) {
  ProcStat s;
  return readStat(d.pid, &s) && s.start_time == d.start_time && s.state != 'Z';
}

bool anyAlive(const std::vector<MpiDaemon>& daemons) {
  for (const auto& d : daemons)
    if (sameProcess(d)) return true;
  return false;
}

void sleepS(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace

std::vector<MpiDaemon> mpiDaemonsAbove(pid_t pid) {
  std::vector<MpiDaemon> out;
  bool have_daemon = false, have_head = false;
  ProcStat s;
  if (!readStat(pid, &s)) return out;
  for (int depth = 0; depth < 64 && s.ppid > 1 && !(have_daemon && have_head); ++depth) {
    const pid_t p = s.ppid;
    if (!readStat(p, &s)) break;
    const bool daemon = s.comm == "orted" || s.comm == "prted";
    const bool head =
        s.comm == "mpirun" || s.comm == "mpiexec" || s.comm == "orterun" || s.comm == "prterun";
    if ((daemon && !have_daemon) || (head && !have_head))
      out.push_back(MpiDaemon{p, s.start_time, head, s.comm});
    have_daemon = have_daemon || daemon;
    have_head = have_head || head;
  }
  return out;
}

std::string describeDaemons(const std::vector<MpiDaemon>& daemons) {
  std::string s;
  for (const auto& d : daemons)
    s += (s.empty() ? "" : ", ") + d.name + " (pid " + std::to_string(d.pid) + ")";
  return s;
}

int endMpiDaemons(const std::vector<MpiDaemon>& daemons, double wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (anyAlive(daemons) && std::chrono::steady_clock::now() < deadline) sleepS(0.1);
  int ended = 0;
  for (const auto& d : daemons)
    if (sameProcess(d) && kill(d.pid, SIGTERM) == 0) ++ended;
  if (!ended) return 0;
  sleepS(0.5);
  for (const auto& d : daemons)
    if (d.head && sameProcess(d)) kill(d.pid, SIGTERM);  // the second: mpirun exits now
  for (int i = 0; i < 20 && anyAlive(daemons); ++i) sleepS(0.1);
  for (const auto& d : daemons)
    if (sameProcess(d)) kill(d.pid, SIGKILL);
  return ended;
}

}  // namespace ftb::launcher
