// ftb_synth_runs (sweep_tagger/bench/synth_runs.cpp) writes files shaped like the trainer's:
// every rank's /steps holds exactly the columns of common/step_columns.h, with their types,
// and numbers metricsProblem accepts. Runs the built program (FTB_SYNTH_RUNS).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "common/h5_metrics.h"
#include "common/step_columns.h"
#include "test_util.h"

namespace ftb {
namespace {

TEST(SynthRunsTest, EveryRankWritesExactlyTheStepColumns) {
  test::TempDir dir;
  const std::string cmd = std::string(FTB_SYNTH_RUNS) + " '" + dir.path() +
                          "' --runs 2 --steps 6 --ranks-per-node 2 --states completed,failed";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::set<std::string> want, want_int;
  for (const StepColumn& c : stepColumns()) {
    want.insert(c.name);
    if (c.type == ColumnType::kInt) want_int.insert(c.name);
  }
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (e.path().extension() != ".h5") continue;
    ++files;
    const MetricsData d = readMetricsFile(e.path().string());
    std::set<std::string> got;
    for (const auto& [name, col] : d.steps) {
      got.insert(name);
      EXPECT_FALSE(col.empty()) << e.path() << " " << name;
    }
    EXPECT_EQ(got, want) << e.path();
    EXPECT_EQ(d.int_metrics, want_int) << e.path();
    EXPECT_EQ(metricsProblem(d), "") << e.path();
  }
  EXPECT_EQ(files, 4);  // 2 runs x 2 ranks
}

}  // namespace
}  // namespace ftb
