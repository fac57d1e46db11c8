#include "common/run_state.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ftb {
namespace {

// Every enumerator, in order: a new one must be added here and to the string table.
constexpr RunState kAll[] = {RunState::Running,  RunState::Completed, RunState::Failed,
                             RunState::Oom,      RunState::Preempted, RunState::Invalid,
                             RunState::Stopping, RunState::Held,      RunState::Missing,
                             RunState::Corrupt,  RunState::Killed,    RunState::Partial};

TEST(RunState, EveryStateRoundTripsThroughItsName) {
  std::set<std::string> names;
  for (RunState s : kAll) {
    const std::string& name = toString(s);
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << "two states named " << name;
    EXPECT_EQ(parseRunState(name), s) << name;
    std::ostringstream os;
    os << s;
    EXPECT_EQ(os.str(), name);
  }
}

// The on-disk spelling h5py readers and old run directories rely on.
TEST(RunState, RecordedNamesAreTheHdf5Spelling) {
  EXPECT_EQ(recordedStateNames(), "running|completed|failed|oom|preempted|invalid");
  EXPECT_EQ(toString(RunState::Oom), "oom");
  EXPECT_FALSE(isRecorded(RunState::Held));
  EXPECT_FALSE(isRecorded(RunState::Stopping));
  EXPECT_TRUE(isRecorded(RunState::Preempted));
}

TEST(RunState, UnknownNameIsRefusedNamingItAndTheValidOnes) {
  EXPECT_FALSE(tryParseRunState("done"));
  EXPECT_FALSE(tryParseRunState("Completed"));  // names are case-sensitive
  EXPECT_FALSE(tryParseRunState(""));
  try {
    parseRunState("done");
    FAIL() << "parseRunState(\"done\") did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown run state 'done' (expected one of running, completed, failed, oom, "
              "preempted, invalid, stopping, held, missing, corrupt, killed, partial)");
  }
}

}  // namespace
}  // namespace ftb
