#include "launcher/ctl.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <ostream>
#include <set>
#include <thread>

#include "common/config.h"
#include "common/error.h"
#include "common/run_control.h"
#include "common/run_lock.h"

namespace ftb::launcher {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kCtlUsage =
    "usage: launcher ctl status|save|stop RUN_DIR [--timeout SECONDS]\n"
    "  status  every rank's step, loss, tokens/s, ETA and last checkpoint\n"
    "  save    checkpoint after the current step and go on\n"
    "  stop    checkpoint after the current step and stop (status preempted, exit code 75)\n"
    "exit codes: 0 answered; 1 no run is active in RUN_DIR; 2 bad command line or not a run\n"
    "  directory; 3 timed out; 4 RUN_DIR/control cannot be used by this user (another user's,\n"
    "  or a request file cannot be written: the reason is printed)\n";

constexpr const char* kTimeoutHint =
    "--timeout SECONDS bounds every wait of ctl (default 60), e.g. --timeout 120 for a long "
    "set-up";

struct CtlArgs {
  CtlCommand command = CtlCommand::kNone;
  std::string run_dir;
  double timeout_s = 60;
};

CtlArgs parseCtlArgs(const std::vector<std::string>& args) {
  CtlArgs a;
  std::vector<std::string> words;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--timeout") {
      if (i + 1 == args.size())
        throw ConfigError("--timeout", "ctl command line", "needs a value", kTimeoutHint);
      char* end = nullptr;
      a.timeout_s = std::strtod(args[++i].c_str(), &end);
      if (*end != '\0' || !(a.timeout_s > 0 && a.timeout_s <= 86400))
        throw ConfigError("--timeout", "ctl command line",
                          "expected seconds in (0, 86400], got '" + args[i] + "'", kTimeoutHint);
    } else {
      words.push_back(args[i]);
    }
  }
  if (words.size() != 2)
    throw ConfigError("ctl", "command line", "expected COMMAND RUN_DIR", kCtlUsage);
  std::optional<CtlCommand> c = parseCtlCommand(words[0]);
  if (!c) throw ConfigError("ctl", "command line", "unknown command '" + words[0] + "'", kCtlUsage);
  a.command = *c;
  a.run_dir = words[1];
  if (!fs::is_directory(a.run_dir) || !fs::exists(fs::path(a.run_dir) / "run.toml"))
    throw ConfigError("RUN_DIR", "ctl command line",
                      "'" + a.run_dir + "' is not a run directory (no run.toml in it)",
                      "pass the directory the trainer printed as 'run directory'");
  return a;
}

// Polls `done` every 50 ms until it is true or `deadline` passes.
template <class F>
bool waitFor(F done, Clock::time_point deadline) {
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

void printReplies(const CtlArgs& a, const std::vector<CtlReply>& reps, std::ostream& out) {
  const CtlReply& r0 = reps.front();
  out << "run " << a.run_dir << ": " << ctlCommandName(a.command) << " answered after step "
      << r0.steps_done << "/" << r0.max_steps << " by " << reps.size() << " rank(s)";
  if (a.command == CtlCommand::kSave) out << "; checkpoint " << r0.last_checkpoint;
  if (a.command == CtlCommand::kStop)
    out << "; checkpoint " << r0.last_checkpoint << "; the run stops (status preempted)";
  out << "\n";
  out << std::left << std::setw(6) << "rank" << std::setw(14) << "host" << std::setw(9) << "pid"
      << std::setw(11) << "state" << std::setw(13) << "step" << std::setw(10) << "loss"
      << std::setw(12) << "tokens/s" << std::setw(9) << "ETA s"
      << "last checkpoint\n";
  for (const CtlReply& r : reps)
    out << std::left << std::setw(6) << r.rank << std::setw(14) << r.host << std::setw(9) << r.pid
        << std::setw(11) << r.state << std::setw(13)
        << (std::to_string(r.steps_done) + "/" + std::to_string(r.max_steps)) << std::setw(10)
        << formatFixed(r.loss, 5) << std::setw(12) << formatFixed(r.tokens_per_s, 1) << std::setw(9)
        << formatFixed(r.eta_s, 1) << (r.last_checkpoint.empty() ? "-" : r.last_checkpoint) << "\n";
}

// Waits for every rank's reply to `id`; "" when complete, else what is missing.
std::string collectReplies(const CtlArgs& a, int64_t id, Clock::time_point deadline,
                           std::vector<CtlReply>& reps) {
  auto complete = [&] {
    reps = readReplies(a.run_dir, id);
    return !reps.empty() && int(reps.size()) >= reps.front().world_size;
  };
  if (waitFor(complete, deadline)) return "";
  if (reps.empty()) return "no rank answered";
  std::set<int> have;
  for (const CtlReply& r : reps) have.insert(r.rank);
  std::string missing;
  for (int r = 0; r < reps.front().world_size && missing.size() < 200; ++r)
    if (!have.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  return std::to_string(reps.size()) + " of " + std::to_string(reps.front().world_size) +
         " ranks answered; missing rank(s) " + missing;
}

}  // namespace

int runCtl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CtlArgs a;
  try {
    a = parseCtlArgs(args);
  } catch (const ConfigError& e) {
    err << "launcher ctl: " << e.what() << "\n";
    return kExitBadInput;
  }
  const std::string holder = lockHolder(a.run_dir);
  if (holder.empty()) {
    err << "launcher ctl: no run is active in " << a.run_dir << ": "
        << (fs::path(a.run_dir) / kRunLockName).string()
        << " is not held (the run finished, failed or was killed)\n";
    return 1;
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(a.timeout_s));
  const int64_t id = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const std::string what =
      std::string(ctlCommandName(a.command)) + " request " + std::to_string(id);
  try {
    if (!postRequest(a.run_dir, {a.command, id}, a.timeout_s)) {
      err << "launcher ctl: another control request was still pending in " << controlDir(a.run_dir)
          << "/request after " << a.timeout_s << " s\n";
      return 3;
    }
    if (!waitFor([&] { return !requestPending(a.run_dir); }, deadline)) {
      std::remove((controlDir(a.run_dir) + "/request").c_str());  // ours: withdrawn
      err << "launcher ctl: the run's rank 0 (" << holder << ") did not pick up the " << what
          << " within " << a.timeout_s << " s (it looks once per step; the run may be in "
          << "set-up or a step may take longer: raise --timeout)\n";
      return 3;
    }
    std::vector<CtlReply> reps;
    const std::string problem = collectReplies(a, id, deadline, reps);
    removeReplies(a.run_dir, id);
    if (!problem.empty()) {
      err << "launcher ctl: " << what << " taken by rank 0 (" << holder << "), but within "
          << a.timeout_s << " s " << problem << " in " << controlDir(a.run_dir) << "\n";
      return 3;
    }
    printReplies(a, reps, out);
    return 0;
  } catch (const FtbError& e) {
    err << "launcher ctl: " << e.what() << "\n";
    return e.exitCode();
  }
}

}  // namespace ftb::launcher
