// Rankings that say whether they mean anything: repeats grouped by config hash, the
// noise rule of --best (compare.h), exclusions with their reason, the work-per-step note.
#include "sweep_tagger/compare.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace ftb {
namespace {

// A counted run of configuration `hash` (repeat `repeat`) at `tps` dataset tokens/s, its
// steps spread +-`step_spread` around it.
RunRow run(const std::string& hash, int repeat, double tps, double step_spread = 0.02) {
  RunRow r;
  r.tag = "cfg" + hash + (repeat > 0 ? ".r" + std::to_string(repeat) : "");
  r.status = RunState::Completed;
  r.is_valid = true;
  r.config_hash = hash;
  r.config["sweep.repeat"] = int64_t{repeat};
  r.world_size = 2;
  r.tokens_per_s_dataset = tps;
  r.step_tokens_p10 = tps * (1 - step_spread);
  r.step_tokens_p50 = tps;
  r.step_tokens_p90 = tps * (1 + step_spread);
  r.peak_mem_mib = 100 + tps / 100;
  r.price_per_hour = 2.0;
  r.usd_per_mt = 2.0 * 2 / (tps * 3600 / 1e6);
  return r;
}

AggregateTable table(std::vector<RunRow> rows) {
  AggregateTable t;
  t.runs = std::move(rows);
  groupRepeats(t);
  return t;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Repeats, GroupedByHashWithMedianMinAndMax) {
  AggregateTable t = table({run("a", 0, 1000), run("a", 1, 1300), run("a", 2, 1100),
                            run("b", 0, 500), run("b", 1, 700)});
  EXPECT_EQ(t.runs[0].repeats, 3);
  EXPECT_DOUBLE_EQ(*t.runs[2].tokens_median, 1100);
  EXPECT_DOUBLE_EQ(*t.runs[1].tokens_min, 1000);
  EXPECT_DOUBLE_EQ(*t.runs[1].tokens_max, 1300);
  EXPECT_DOUBLE_EQ(*t.runs[3].tokens_median, 600);  // even count: mean of the middle two
  EXPECT_EQ(groupLabel(t.runs[2]), "cfga");
  const std::string md = repeatsTable(t);
  EXPECT_PRED2(has, md,
               "| cfga |  | 3 / 3 | 1100.0 | 1000.0-1300.0 | 27.3 | 980.0/1100.0/1326.0 |");
  EXPECT_PRED2(has, md, "| cfgb |  | 2 / 2 | 600.0 | 500.0-700.0 |");
  // Without repeats there is no repeats table.
  EXPECT_EQ(repeatsTable(table({run("a", 0, 1000), run("b", 0, 900)})), "");
}

TEST(Best, IdenticalConfigurationsAreWithinNoise) {
  // Two configurations measuring the same: overlapping repeats and step bands.
  AggregateTable t = table({run("a", 0, 1000), run("b", 0, 1010), run("a", 1, 1040),
                            run("b", 1, 990), run("a", 2, 980), run("b", 2, 1030)});
  const std::string r = bestReport(t, BestMetric::kTokensPerS);
  EXPECT_PRED2(has, r, "1. cfgb: 1010.0 tokens/s (3 runs, min-max 990.0-1030.0");
  EXPECT_PRED2(has, r, "cfgb beats cfga by 1.0 %, within noise: the repeats' ranges");
  EXPECT_FALSE(has(r, "beyond noise"));
}

TEST(Best, AClearlyFasterConfigurationIsBeyondNoise) {
  AggregateTable t = table({run("a", 0, 1000), run("b", 0, 2000), run("a", 1, 1040),
                            run("b", 1, 2100), run("a", 2, 980), run("b", 2, 1950)});
  const std::string r = bestReport(t, BestMetric::kTokensPerS);
  EXPECT_PRED2(has, r,
               "cfgb beats cfga by 100.0 %, beyond noise: no overlap of the repeats' "
               "ranges (cfgb 1950.0-2100.0, cfga 980.0-1040.0); the step bands");
  // Cost is lower-better: the faster one (same world size and price) is cheaper.
  const std::string cost = bestReport(t, BestMetric::kCost);
  EXPECT_PRED2(has, cost, "lower is better");
  EXPECT_PRED2(has, cost, "cfgb beats cfga by 50.0 %, beyond noise");
  // Memory has no per-step figure: the repeats decide.
  EXPECT_PRED2(has, bestReport(t, BestMetric::kMemory), "cfga beats cfgb by ");
}

TEST(Best, RangesApartButStepBandsOverlapIsWithinNoise) {
  // Each run's steps vary +-30 %: 5 % between medians is not a finding.
  AggregateTable t = table({run("a", 0, 1000, 0.3), run("a", 1, 1010, 0.3), run("b", 0, 1050, 0.3),
                            run("b", 1, 1060, 0.3)});
  const std::string r = bestReport(t, BestMetric::kTokensPerS);
  EXPECT_PRED2(has, r, "within noise: the step bands p10-p90");
}

TEST(Best, OneRunEachWithoutStepFiguresIsNotMeasured) {
  RunRow a = run("a", 0, 1000), b = run("b", 0, 1500);
  const std::string r = bestReport(table({a, b}), BestMetric::kMemory);
  EXPECT_PRED2(has, r,
               "noise not measured: one run each and no per-step figure; run the sweep "
               "with repeats >= 2");
}

TEST(Best, NoisyFailedAndInvalidRunsAreExcludedWithTheirReason) {
  RunRow failed = run("c", 0, 5000);
  failed.status = RunState::Failed;
  failed.message = "rank 1: exit 1";
  RunRow invalid = run("d", 0, 6000);
  invalid.is_valid = false;
  RunRow unknown = run("e", 0, 7000);
  unknown.is_valid.reset();
  RunRow noisy = run("f", 0, 8000);
  noisy.noisy = "interference 31.0 %";
  AggregateTable t = table({run("a", 0, 1000), run("b", 0, 900), failed, invalid, unknown, noisy});
  EXPECT_EQ(t.runs[2].repeats, 0);  // not in any group
  const std::string r = bestReport(t, BestMetric::kTokensPerS);
  EXPECT_PRED2(has, r, "1. cfga: 1000.0");
  EXPECT_PRED2(has, r,
               "Excluded from the ranking (4):\n  - cfgc: failed: rank 1: exit 1\n"
               "  - cfgd: invalid: the trainer refuses this config on this world size\n"
               "  - cfge: validity unknown");
  EXPECT_PRED2(has, r, "  - cfgf: noisy: interference 31.0 %");
  EXPECT_FALSE(has(r, "2. cfgc"));
}

TEST(Best, MetricNamesAndCostWithoutPriceExitTwo) {
  EXPECT_EQ(parseBestMetric("memory"), BestMetric::kMemory);
  try {
    parseBestMetric("speed");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    EXPECT_PRED2(has, e.what(), "expected tokens_per_s, cost or memory, got 'speed'");
  }
  RunRow a = run("a", 0, 1000);
  a.usd_per_mt.reset();
  EXPECT_THROW(bestReport(table({a}), BestMetric::kCost), ConfigError);
}

TEST(WorkNote, SaysWhetherTheRowsDoEqualWorkAndWhichMode) {
  RunRow a = run("a", 0, 1000), b = run("b", 0, 900);
  a.global_batch_seqs = 8;
  b.global_batch_seqs = 4;
  a.batch_mode = b.batch_mode = "fixed grad_accum";
  EXPECT_PRED2(has, workNote(table({a, b})),
               "varies from 4 to 8: the rows do NOT do equal work per step. Mode: fixed "
               "grad_accum (training.grad_accum_steps as configured). Set global_batch_size");
  b.global_batch_seqs = 8;
  a.batch_mode = b.batch_mode = "fixed global batch";
  EXPECT_PRED2(has, workNote(table({a, b})),
               "8 in every run: equal work. Mode: fixed global batch (training.global_batch_size;"
               " grad_accum follows).");
}

}  // namespace
}  // namespace ftb
