// What a sweep plans before anything runs: points over a memory budget, a fixed global
// batch, layout variants as one axis, repeats interleaved across points.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/memory_estimate.h"
#include "common/run_config.h"
#include "sweep_tagger/cli.h"
#include "sweep_tagger/sweep.h"
#include "test_util.h"

namespace ftb {
namespace {

const std::string kThreeAxis = test::dataDir() + "/sweeps/three_axis.toml";

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// The estimate the trainer's pre-flight check computes for a point.
double estimateOf(const SweepSpec& spec, const SweepPoint& p) {
  Config cfg = Config::load(spec.base, p.args);
  return estimateMemory(TrainConfig::fromConfig(cfg, p.world_size)).total();
}

TEST(MemoryBudget, PointsOverTheBudgetAreInvalidWithTheEstimate) {
  SweepSpec spec = loadSweep(kThreeAxis);
  const std::vector<SweepPoint> free = expandSweep(spec);
  // A budget between the smallest and the largest estimate of the valid points.
  double lo = 1e300, hi = 0;
  for (const SweepPoint& p : free)
    if (p.valid) {
      lo = std::min(lo, estimateOf(spec, p));
      hi = std::max(hi, estimateOf(spec, p));
    }
  ASSERT_LT(lo, hi);
  const double budget = (lo + hi) / 2;
  spec.memory_budget = MemoryBudget{budget, "--memory-budget test"};
  const std::vector<SweepPoint> capped = expandSweep(spec);
  ASSERT_EQ(capped.size(), free.size());
  int over = 0;
  for (size_t i = 0; i < free.size(); ++i) {
    if (!free[i].valid) {  // the trainer's refusal stays the reason
      EXPECT_EQ(capped[i].reason, free[i].reason);
      continue;
    }
    const bool fits = estimateOf(spec, free[i]) <= budget;
    EXPECT_EQ(capped[i].valid, fits) << free[i].tag;
    EXPECT_EQ(capped[i].tag, free[i].tag);  // the budget is no part of the run identity
    if (fits) continue;
    ++over;
    EXPECT_EQ(capped[i].reason.rfind("over the memory budget: estimated memory per rank ", 0), 0u)
        << capped[i].reason;
    EXPECT_NE(capped[i].reason.find("(--memory-budget test); largest term: "), std::string::npos);
  }
  EXPECT_GT(over, 0);
}

TEST(MemoryBudget, SizesAndDeviceTypesParseOthersExitTwo) {
  EXPECT_DOUBLE_EQ(parseMemoryBudget("80GiB").bytes, 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(parseMemoryBudget("80GB").bytes, 80e9);
  EXPECT_DOUBLE_EQ(parseMemoryBudget("1.5TiB").bytes, 1.5 * 1024 * (1 << 30));
  EXPECT_DOUBLE_EQ(parseMemoryBudget("512MiB").bytes, 512.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(parseMemoryBudget("1000000").bytes, 1e6);
  MemoryBudget h100 = parseMemoryBudget("H100");
  EXPECT_DOUBLE_EQ(h100.bytes, 80.0 * (1 << 30));
  EXPECT_NE(h100.source.find("NVIDIA H100"), std::string::npos);
  EXPECT_DOUBLE_EQ(parseMemoryBudget("a100-40gb").bytes, 40.0 * (1 << 30));
  for (const char* bad : {"80 apples", "GiB", "-5GiB", "h900", ""}) {
    const std::string e = errorOf([&] { parseMemoryBudget(bad); });
    EXPECT_NE(e.find("key '--memory-budget'"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("device types: h100, h100 nvl, h200"), std::string::npos) << e;
  }
  // Every point of the tiny sweep fits one H100: the listing is the budget-free one.
  std::ostringstream with, without;
  expandCommand({kThreeAxis, "--memory-budget", "h100", "--field", "valid"}, with);
  expandCommand({kThreeAxis, "--field", "valid"}, without);
  EXPECT_EQ(with.str(), without.str());
  std::ostringstream tiny;
  expandCommand({kThreeAxis, "--memory-budget", "1MiB", "--field", "valid"}, tiny);
  EXPECT_EQ(tiny.str().find("true"), std::string::npos) << tiny.str();
}

}  // namespace
}  // namespace ftb
