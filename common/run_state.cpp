#include "common/run_state.h"

#include <array>
#include <ostream>
#include <stdexcept>

namespace ftb {
namespace {

struct StateName {
  RunState state;
  std::string name;
  bool recorded;
};

// The one string table. Invariant: in enumerator order, one row per enumerator.
const std::array<StateName, 12>& table() {
  static const std::array<StateName, 12> t = {{
      {RunState::Running, "running", true},
      {RunState::Completed, "completed", true},
      {RunState::Failed, "failed", true},
      {RunState::Oom, "oom", true},
      {RunState::Preempted, "preempted", true},
      {RunState::Invalid, "invalid", true},
      {RunState::Stopping, "stopping", false},
      {RunState::Held, "held", false},
      {RunState::Missing, "missing", false},
      {RunState::Corrupt, "corrupt", false},
      {RunState::Killed, "killed", false},
      {RunState::Partial, "partial", false},
  }};
  return t;
}

const StateName& row(RunState s) {
  const auto i = static_cast<size_t>(s);
  if (i >= table().size() || table()[i].state != s)
    throw std::logic_error("RunState " + std::to_string(i) + " has no row in the string table");
  return table()[i];
}

}  // namespace

const std::string& toString(RunState s) { return row(s).name; }

std::optional<RunState> tryParseRunState(std::string_view name) {
  for (const StateName& r : table())
    if (r.name == name) return r.state;
  return std::nullopt;
}

RunState parseRunState(std::string_view name) {
  if (std::optional<RunState> s = tryParseRunState(name)) return *s;
  std::string valid;
  for (const StateName& r : table()) valid += (valid.empty() ? "" : ", ") + r.name;
  throw std::invalid_argument("unknown run state '" + std::string(name) + "' (expected one of " +
                              valid + ")");
}

bool isRecorded(RunState s) { return row(s).recorded; }

std::string recordedStateNames() {
  std::string out;
  for (const StateName& r : table())
    if (r.recorded) out += (out.empty() ? "" : "|") + r.name;
  return out;
}

std::ostream& operator<<(std::ostream& os, RunState s) { return os << toString(s); }

}  // namespace ftb
