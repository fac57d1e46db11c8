// What a sweep plans before anything runs: points over a memory budget, a fixed global
// batch, layout variants as one axis, repeats interleaved across points.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/memory_estimate.h"
#include "common/run_config.h"
#include "common/tag.h"
#include "sweep_tagger/cli.h"
#include "sweep_tagger/sweep.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::kThreeAxis;

using test::errorOf;

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

TEST(MemoryBudget, AGpuNameComparesTheGpuEstimate) {
  SweepSpec spec = loadSweep(kThreeAxis);
  const std::vector<SweepPoint> free = expandSweep(spec);
  const SweepPoint& p = free.at(0);
  ASSERT_TRUE(p.valid) << p.reason;
  const TrainConfig tc = TrainConfig::fromConfig(Config::load(spec.base, p.args), p.world_size);
  // The GPU estimate: the GPU's kernels, no host runtime baseline.
  TrainConfig cuda = tc;
  cuda.training.device = "cuda";
  const MemoryEstimate dev = estimateDeviceMemory(tc);
  EXPECT_EQ(dev.runtime, 0.0);
  const MemoryEstimate on_cuda = estimateMemory(cuda);
  EXPECT_NEAR(dev.total(), on_cuda.total() - on_cuda.runtime, 1e-9 * on_cuda.total());
  EXPECT_LT(dev.total(), estimateMemory(tc).total());
  for (const char* name : {"h100", "h200", "a100-80gb", "l4", "a100-40gb"}) {
    const MemoryBudget b = parseMemoryBudget(name);
    EXPECT_TRUE(b.device) << name;
    EXPECT_NE(b.source.find("GPU estimate"), std::string::npos) << b.source;
  }
  EXPECT_FALSE(parseMemoryBudget("80GiB").device);
  // A budget between the two estimates of point 0: a GPU's fits it, the host's does not.
  const double between = (dev.total() + estimateMemory(tc).total()) / 2;
  spec.memory_budget = MemoryBudget{between, "--memory-budget test", true};
  EXPECT_TRUE(expandSweep(spec).at(0).valid);
  spec.memory_budget->device = false;
  EXPECT_FALSE(expandSweep(spec).at(0).valid);
  spec.memory_budget = MemoryBudget{dev.total() / 2, "--memory-budget test", true};
  const std::string reason = expandSweep(spec).at(0).reason;
  EXPECT_EQ(reason.rfind("over the memory budget: estimated memory per rank ", 0), 0u) << reason;
  EXPECT_NE(reason.find("(--memory-budget test)"), std::string::npos) << reason;
  // The listing says which device the estimate is for: the table's first line, and a
  // field of every JSON point.
  std::ostringstream table, json;
  expandCommand({kThreeAxis, "--memory-budget", "l4"}, table);
  EXPECT_EQ(table.str().rfind("# memory budget 24.00 GiB per rank (--memory-budget l4: NVIDIA L4 "
                              "24 GB, GPU estimate): device memory",
                              0),
            0u)
      << table.str();
  expandCommand({kThreeAxis, "--memory-budget", "l4", "--index", "0"}, json);
  EXPECT_EQ(nlohmann::json::parse(json.str())["memory_estimate"], "gpu") << json.str();
  std::ostringstream host;
  expandCommand({kThreeAxis, "--memory-budget", "1GiB", "--index", "0"}, host);
  EXPECT_EQ(nlohmann::json::parse(host.str())["memory_estimate"], "host") << host.str();
}

using test::writeSweep;

// What the trainer makes of a point's arguments: the config it runs.
TrainConfig trainerView(const SweepSpec& spec, const SweepPoint& p) {
  return TrainConfig::fromConfig(Config::load(spec.base, p.args), p.world_size);
}

// ---- Equal work: a fixed global batch ------------------------------------------

TEST(GlobalBatch, FixedGlobalBatchLetsGradAccumFollowPerPoint) {
  test::TempDir dir;
  SweepSpec spec = loadSweep(writeSweep(dir, R"(global_batch_size = 8
[grid]
"training.micro_batch_size" = [1, 2]
nproc_per_node = [1, 2]
)"));
  const std::vector<SweepPoint> pts = expandSweep(spec);
  ASSERT_EQ(pts.size(), 4u);
  for (const SweepPoint& p : pts) {
    ASSERT_TRUE(p.valid) << p.reason;
    EXPECT_EQ(p.global_batch, 8) << p.tag;
    const TrainConfig tc = trainerView(spec, p);
    EXPECT_EQ(tc.globalBatch(), 8);
    EXPECT_EQ(tc.training.grad_accum_steps * tc.training.micro_batch_size * p.world_size, 8)
        << p.tag;
    EXPECT_EQ(p.args.front(), "training.global_batch_size=8");
  }
  // Without it, grad_accum stays as configured and the work per step differs.
  SweepSpec free = loadSweep(writeSweep(dir, R"([grid]
"training.micro_batch_size" = [1, 2]
nproc_per_node = [1, 2]
)"));
  std::vector<int64_t> batches;
  for (const SweepPoint& p : expandSweep(free)) batches.push_back(p.global_batch);
  EXPECT_EQ(batches, (std::vector<int64_t>{1, 2, 2, 4}));
}

TEST(GlobalBatch, APointItDoesNotDivideExitsTwoNamingThePoint) {
  test::TempDir dir;
  const std::string path = writeSweep(dir, R"(global_batch_size = 6
[grid]
"training.micro_batch_size" = [1, 4]
)");
  const std::string e = errorOf([&] { expandSweep(loadSweep(path)); });
  EXPECT_EQ(e.rfind("config error: " + path +
                        ": key 'global_batch_size': global_batch_size = 6 "
                        "does not fit point training.micro_batch_size=4: ",
                    0),
            0u)
      << e;
  EXPECT_NE(e.find("global_batch_size(6) is not divisible by micro_batch_size(4)"),
            std::string::npos)
      << e;
  std::vector<std::string> argv = {"sweep_tagger", "expand", path};
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  std::ostringstream out, err;
  EXPECT_EQ(runSweepTagger(static_cast<int>(cargv.size()), cargv.data(), out, err), 2);
  EXPECT_NE(err.str().find("training.micro_batch_size=4"), std::string::npos) << err.str();
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, "global_batch_size = 0\n")); }),
            "config error: " + dir.path() +
                "/sweep.toml:2: key 'global_batch_size': must be an "
                "integer >= 1");
}

// ---- Layout as one axis ----------------------------------------------------------

const char* kLayouts = R"(nproc_per_node = 2
[grid]
layout = ["ddp", "zero3", "tp2"]
"data.seq_len" = [128, 256]

[layout.ddp]
"parallel.dp_shard" = 1

[layout.zero3]
"parallel.dp_shard" = 2
"parallel.zero_stage" = 3

[layout.tp2]
"parallel.tp" = 2
)";

TEST(Layout, EachVariantExpandsToItsKeysAndLabelsTheRun) {
  test::TempDir dir;
  SweepSpec spec = loadSweep(writeSweep(dir, kLayouts));
  ASSERT_EQ(spec.layouts.size(), 3u);
  EXPECT_EQ(spec.layouts[1].first, "zero3");  // file order
  const std::vector<SweepPoint> pts = expandSweep(spec);
  ASSERT_EQ(pts.size(), 6u);
  const std::vector<std::string> layouts = {"ddp", "ddp", "zero3", "zero3", "tp2", "tp2"};
  for (size_t i = 0; i < pts.size(); ++i) {
    EXPECT_EQ(pts[i].layout, layouts[i]);
    EXPECT_TRUE(pts[i].valid) << pts[i].reason;
    const TrainConfig tc = trainerView(spec, pts[i]);
    EXPECT_EQ(tc.layout.tp, layouts[i] == "tp2" ? 2 : 1);
    EXPECT_EQ(tc.layout.dp_shard, layouts[i] == "zero3" ? 2 : 1);
    EXPECT_EQ(tc.layout.zero_stage, layouts[i] == "zero3" ? 3 : 0);
    EXPECT_NE(
        std::find(pts[i].args.begin(), pts[i].args.end(), "sweep.layout=\"" + layouts[i] + "\""),
        pts[i].args.end());
  }
  EXPECT_EQ(pts[2].overrides, (KeyValues{{"parallel.dp_shard", Value(int64_t{2})},
                                         {"parallel.zero_stage", Value(int64_t{3})},
                                         {"data.seq_len", Value(int64_t{128})}}));
  // The label is no part of the experiment: the same keys written out give the same hash.
  SweepSpec plain = loadSweep(writeSweep(dir, R"(nproc_per_node = 2
[grid]
"parallel.tp" = [2]
"data.seq_len" = [128]
)"));
  EXPECT_EQ(expandSweep(plain)[0].hash, pts[4].hash);
  // [[exclude]] and [[include]] name variants too.
  SweepSpec ex = loadSweep(writeSweep(dir, std::string(kLayouts) + R"(
[[exclude]]
layout = "zero3"
"data.seq_len" = 256
)"));
  EXPECT_EQ(expandSweep(ex).size(), 5u);
}

TEST(Layout, UnknownOrUnusedVariantsExitTwoNamingTheLine) {
  test::TempDir dir;
  const std::string f = dir.path() + "/sweep.toml";
  EXPECT_EQ(errorOf([&] {
              loadSweep(writeSweep(dir,
                                   "[grid]\nlayout = [\"ddp\", \"zro3\"]\n"
                                   "[layout.ddp]\n\"parallel.tp\" = 1\n"));
            }),
            "config error: " + f +
                ":3: key 'layout': unknown layout variant 'zro3'\n"
                "  hint: defined variants: ddp");
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, "[layout.ddp]\n\"parallel.tp\" = 1\n")); }),
            "config error: " + f +
                ": key 'layout': variants are defined but no point uses "
                "them\n  hint: add layout = [\"ddp\", ...] to [grid]");
  EXPECT_EQ(errorOf([&] {
              loadSweep(writeSweep(dir,
                                   "[grid]\nlayout = [\"a\"]\n[layout.a]\n"
                                   "\"parallel.tpp\" = 1\n"));
            }),
            "config error: " + f +
                ":5: key 'parallel.tpp': unknown key in [layout.a]\n"
                "  hint: did you mean 'parallel.tp'?");
}

// ---- Repeats ------------------------------------------------------------------------

TEST(Repeats, RoundRobinAcrossPointsEachInItsOwnDirectoryUnderOneHash) {
  test::TempDir dir;
  SweepSpec spec = loadSweep(writeSweep(dir, R"(repeats = 3
[grid]
"data.seq_len" = [128, 256]
)"));
  const std::vector<SweepPoint> pts = expandSweep(spec);
  ASSERT_EQ(pts.size(), 6u);
  for (size_t i = 0; i < pts.size(); ++i) {
    EXPECT_EQ(pts[i].index, static_cast<int>(i));
    EXPECT_EQ(pts[i].repeat, static_cast<int>(i / 2));  // every point, then every point again
    EXPECT_EQ(pts[i].hash, pts[i % 2].hash);            // one experiment: grouped by hash
    const std::string suffix = i < 2 ? "" : ".r" + std::to_string(i / 2);
    EXPECT_EQ(pts[i].tag, pts[i % 2].tag + suffix);
    // The run directory the trainer names from the point's arguments is the tag.
    Config cfg = Config::load(spec.base, pts[i].args);
    EXPECT_EQ(formatTag(cfg, pts[i].world_size, cfg.getString("output.sweep_fmt")), pts[i].tag);
  }
  EXPECT_NE(pts[0].hash, pts[1].hash);
  // --index I of a repeat lists the same point as the whole expansion.
  for (int i : {1, 4, 5}) {
    std::vector<SweepPoint> upto = expandSweep(spec, i);
    ASSERT_EQ(upto.size(), static_cast<size_t>(i + 1));
    EXPECT_EQ(upto.back().tag, pts[i].tag);
  }
  // repeats = 1 (the default) leaves every tag as it was.
  SweepSpec once = loadSweep(writeSweep(dir, "[grid]\n\"data.seq_len\" = [128, 256]\n"));
  std::vector<SweepPoint> one = expandSweep(once);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[1].tag, pts[1].tag);
  EXPECT_EQ(one[1].args, pts[1].args);
}

TEST(Repeats, CountTowardsTheLimitOfPointsPerSweep) {
  test::TempDir dir;
  const std::string f = writeSweep(dir, "repeats = 5001\n[grid]\n\"data.seq_len\" = [128, 256]\n");
  EXPECT_EQ(
      errorOf([&] { loadSweep(f); }),
      "config error: " + f +
          ":3: key 'grid': the sweep has 10002 points (data.seq_len(2), x "
          "repeats(5001)), more than the limit of 10000 points per sweep\n  hint: split it into "
          "several sweep files (e.g. one per value of the first axis), or list the points you "
          "need under [[include]]");
  EXPECT_EQ(
      errorOf([&] { loadSweep(writeSweep(dir, "repeats = 0\n")); }),
      "config error: " + dir.path() + "/sweep.toml:2: key 'repeats': must be an integer >= 1");
}

}  // namespace
}  // namespace ftb
