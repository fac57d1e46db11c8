// Rankings that say whether they mean anything: repeats grouped by config hash, the
// noise rule of --best (compare.h) down the whole ranking, configurations named by the
// axes that differ, noisy runs ranked and marked (--exclude-noisy), exclusions with their
// reason, exit 1 when nothing can be ranked, --price-per-hour, the work-per-step note.
#include "sweep_tagger/compare.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "sweep_tagger/cli.h"
#include "sweep_tagger/plot.h"
#include "test_util.h"

namespace ftb {
namespace {

// A counted run of configuration `hash` (repeat `repeat`) at `tps` dataset tokens/s, its
// steps spread +-`step_spread` around it.
RunRow runRow(const std::string& hash, int repeat, double tps, double step_spread = 0.02) {
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
  AggregateTable t = table({runRow("a", 0, 1000), runRow("a", 1, 1300), runRow("a", 2, 1100),
                            runRow("b", 0, 500), runRow("b", 1, 700)});
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
  EXPECT_EQ(repeatsTable(table({runRow("a", 0, 1000), runRow("b", 0, 900)})), "");
}

TEST(Best, IdenticalConfigurationsAreWithinNoise) {
  // Two configurations measuring the same: overlapping repeats and step bands.
  AggregateTable t = table({runRow("a", 0, 1000), runRow("b", 0, 1010), runRow("a", 1, 1040),
                            runRow("b", 1, 990), runRow("a", 2, 980), runRow("b", 2, 1030)});
  const std::string r = bestReport(t, BestMetric::kTokensPerS).text;
  EXPECT_PRED2(has, r, "1. cfgb: 1010.0 tokens/s (3 runs, min-max 990.0-1030.0");
  EXPECT_PRED2(has, r, "cfgb beats cfga by 1.0 %, within noise: the repeats' ranges");
  EXPECT_FALSE(has(r, "beyond noise"));
}

TEST(Best, AClearlyFasterConfigurationIsBeyondNoise) {
  AggregateTable t = table({runRow("a", 0, 1000), runRow("b", 0, 2000), runRow("a", 1, 1040),
                            runRow("b", 1, 2100), runRow("a", 2, 980), runRow("b", 2, 1950)});
  const std::string r = bestReport(t, BestMetric::kTokensPerS).text;
  EXPECT_PRED2(has, r,
               "cfgb beats cfga by 100.0 %, beyond noise: no overlap of the repeats' "
               "ranges (cfgb 1950.0-2100.0, cfga 980.0-1040.0); the step bands");
  // Cost is lower-better: the faster one (same world size and price) is cheaper.
  const std::string cost = bestReport(t, BestMetric::kCost).text;
  EXPECT_PRED2(has, cost, "lower is better");
  EXPECT_PRED2(has, cost, "cfgb beats cfga by 50.0 %, beyond noise");
  // Memory has no per-step figure: the repeats decide.
  EXPECT_PRED2(has, bestReport(t, BestMetric::kMemory).text, "cfga beats cfgb by ");
}

TEST(Best, RangesApartButStepBandsOverlapIsWithinNoise) {
  // Each run's steps vary +-30 %: 5 % between medians is not a finding.
  AggregateTable t = table({runRow("a", 0, 1000, 0.3), runRow("a", 1, 1010, 0.3),
                            runRow("b", 0, 1050, 0.3), runRow("b", 1, 1060, 0.3)});
  const std::string r = bestReport(t, BestMetric::kTokensPerS).text;
  EXPECT_PRED2(has, r, "within noise: the step bands p10-p90");
}

TEST(Best, OneRunEachWithoutStepFiguresIsNotMeasured) {
  RunRow a = runRow("a", 0, 1000), b = runRow("b", 0, 1500);
  const std::string r = bestReport(table({a, b}), BestMetric::kMemory).text;
  EXPECT_PRED2(has, r,
               "noise not measured: one run each and no per-step figure; run the sweep "
               "with repeats >= 2");
}

TEST(Best, FailedAndInvalidRunsAreExcludedWithTheirReason) {
  RunRow failed = runRow("c", 0, 5000);
  failed.status = RunState::Failed;
  failed.message = "rank 1: exit 1";
  RunRow invalid = runRow("d", 0, 6000);
  invalid.is_valid = false;
  RunRow unknown = runRow("e", 0, 7000);
  unknown.is_valid.reset();
  AggregateTable t = table({runRow("a", 0, 1000), runRow("b", 0, 900), failed, invalid, unknown});
  EXPECT_EQ(t.runs[2].repeats, 0);  // not in any group
  const BestReport r = bestReport(t, BestMetric::kTokensPerS);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_PRED2(has, r.text, "1. cfga: 1000.0");
  EXPECT_PRED2(has, r.text,
               "Excluded from the ranking (3):\n  - cfgc: failed: rank 1: exit 1\n"
               "  - cfgd: invalid: the trainer refuses this config on this world size\n"
               "  - cfge: validity unknown");
  EXPECT_FALSE(has(r.text, "2. cfgc"));
}

TEST(Best, MetricNamesAndCostWithoutPriceExitTwo) {
  EXPECT_EQ(parseBestMetric("memory"), BestMetric::kMemory);
  EXPECT_EQ(parseBestMetric("tokens_per_cpu_s"), BestMetric::kTokensPerCpuS);
  try {
    parseBestMetric("speed");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    EXPECT_PRED2(has, e.what(), "expected tokens_per_s, cost, memory or tokens_per_cpu_s, got 'speed'");
  }
  RunRow a = runRow("a", 0, 1000);
  a.usd_per_mt.reset();
  try {
    bestReport(table({a}), BestMetric::kCost);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    EXPECT_PRED2(has, e.what(), "pass --price-per-hour USD");
  }
}

// ---- The ranking: every configuration, named, with its spread and its verdict ----

// A run of configuration `hash` in layout `layout` with micro-batch `mbs`; the layout sets
// parallel.pp (pp2: 2, else 1).
RunRow point(const std::string& hash, int repeat, double tps, const std::string& layout,
             int64_t mbs) {
  RunRow r = runRow(hash, repeat, tps);
  r.config["sweep.layout"] = layout;
  r.config["parallel.pp"] = int64_t{layout == "pp2" ? 2 : 1};
  r.config["training.micro_batch_size"] = mbs;
  return r;
}

TEST(Ranking, FourConfigurationsThreeRepeatsInOrderWithSpreadAndVerdictOnTheNext) {
  std::vector<RunRow> rows;
  const std::vector<std::tuple<std::string, std::string, int64_t, std::vector<double>>> points = {
      {"s", "ddp", 2, {1000, 1040, 980}},
      {"q", "pp2", 2, {2000, 2100, 1950}},
      {"r", "ddp", 4, {1990, 2050, 1900}},
      {"p", "pp2", 4, {3000, 3100, 2950}}};
  for (int rep = 0; rep < 3; ++rep)  // round robin, as a sweep runs them
    for (const auto& [hash, layout, mbs, tps] : points)
      rows.push_back(point(hash, rep, tps[rep], layout, mbs));
  AggregateTable t = table(rows);
  t.varying = {"parallel.pp", "training.micro_batch_size"};  // as aggregateRuns finds them
  const BestReport r = bestReport(t, BestMetric::kTokensPerS);
  EXPECT_EQ(r.exit_code, 0);
  // The layout names the configurations; parallel.pp, which the layout sets, does not.
  EXPECT_PRED2(has, r.text,
               "  1. layout=pp2 training.micro_batch_size=4: 3000.0 tokens/s (3 runs, min-max "
               "2950.0-3100.0; steps p10-p90 2891.0-3162.0)\n"
               "     vs 2.: 50.0 % higher, beyond noise (no overlap of the repeats' ranges and "
               "the step bands p10-p90)\n"
               "  2. layout=pp2 training.micro_batch_size=2: 2000.0 tokens/s (3 runs, min-max "
               "1950.0-2100.0; steps p10-p90 1911.0-2142.0)\n"
               "     vs 3.: 0.5 % higher, within noise (the repeats' ranges overlap)\n"
               "  3. layout=ddp training.micro_batch_size=4: 1990.0 tokens/s (3 runs, min-max "
               "1900.0-2050.0; steps p10-p90 1862.0-2091.0)\n"
               "     vs 4.: 99.0 % higher, beyond noise (no overlap of the repeats' ranges and "
               "the step bands p10-p90)\n"
               "  4. layout=ddp training.micro_batch_size=2: 1000.0 tokens/s (3 runs, min-max "
               "980.0-1040.0; steps p10-p90 960.4-1060.8)\n"
               "layout=pp2 training.micro_batch_size=4 beats layout=pp2 "
               "training.micro_batch_size=2 by 50.0 %, beyond noise: no overlap of the "
               "repeats' ranges (layout=pp2 training.micro_batch_size=4 2950.0-3100.0, ");
  EXPECT_PRED2(has, r.text, "spread (min-max of its runs)");
  EXPECT_FALSE(has(r.text, "Excluded"));
  EXPECT_FALSE(has(r.text, "noisy"));
}

TEST(Ranking, NamesComeFromTheAxesThatDifferAndTheTagWhenTwoWouldShareOne) {
  RunRow a = runRow("a", 0, 1000), b = runRow("b", 0, 900), c = runRow("c", 0, 800);
  a.config["training.micro_batch_size"] = b.config["training.micro_batch_size"] = int64_t{1};
  c.config["training.micro_batch_size"] = int64_t{2};
  a.config["data.seq_len"] = b.config["data.seq_len"] = c.config["data.seq_len"] = int64_t{64};
  AggregateTable t = table({a, b, c});
  t.varying = {"data.seq_len", "training.micro_batch_size"};  // seq_len varies elsewhere
  const std::string r = bestReport(t, BestMetric::kTokensPerS).text;
  EXPECT_PRED2(has, r, "  1. training.micro_batch_size=1 (cfga): 1000.0 tokens/s");
  EXPECT_PRED2(has, r, "  2. training.micro_batch_size=1 (cfgb): 900.0 tokens/s");
  EXPECT_PRED2(has, r, "  3. training.micro_batch_size=2: 800.0 tokens/s");
  // World sizes that differ name the configurations too; one configuration keeps its tag.
  RunRow w = runRow("w", 0, 500);
  w.world_size = 4;
  EXPECT_PRED2(has, bestReport(table({a, w}), BestMetric::kTokensPerS).text,
               "  2. world_size=4: 500.0 tokens/s");
  EXPECT_PRED2(has, bestReport(table({a}), BestMetric::kTokensPerS).text,
               "  1. cfga: 1000.0 tokens/s (1 run; steps p10-p90 980.0-1020.0)\n"
               "Only one configuration counts");
}

// ---- Noisy runs: ranked and marked; --exclude-noisy; nothing to rank ----------

const BestOptions kExcludeNoisy = [] {
  BestOptions o;
  o.exclude_noisy = true;
  return o;
}();

RunRow noisyRun(const std::string& hash, int repeat, double tps) {
  RunRow r = runRow(hash, repeat, tps);
  r.noisy = "interference 31.0 % on rank 0 > 5.0 %";
  return r;
}

TEST(Ranking, ANoisyOnlySetIsRankedWithMarksAndExitZero) {
  AggregateTable t = table({noisyRun("a", 0, 1000), noisyRun("b", 0, 900), noisyRun("a", 1, 1100)});
  EXPECT_EQ(t.runs[0].repeats, 2);  // noisy runs count in the repeats
  const BestReport r = bestReport(t, BestMetric::kTokensPerS);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_PRED2(has, r.text,
               "  1. cfga: 1050.0 tokens/s (2 runs, min-max 1000.0-1100.0; steps "
               "p10-p90 980.0-1122.0) [noisy: 2 of 2 runs]\n");
  EXPECT_PRED2(has, r.text,
               "  2. cfgb: 900.0 tokens/s (1 run; steps p10-p90 882.0-918.0) "
               "[noisy: 1 of 1 run]\n");
  EXPECT_PRED2(has, r.text,
               "     vs 2.: 16.7 % higher, beyond noise (no overlap of the step bands "
               "p10-p90); noisy runs on either side: the machine may have made it\n");
  EXPECT_PRED2(has, r.text,
               "The ranking includes 3 noisy run(s), marked [noisy]: the trainer "
               "found their interference above metrics.max_interference");
  EXPECT_FALSE(has(r.text, "Nothing to rank"));
  // Asked to exclude them, it would rank nothing: it says so and ranks them anyway.
  const BestReport x = bestReport(t, BestMetric::kTokensPerS, kExcludeNoisy);
  EXPECT_EQ(x.exit_code, 0);
  EXPECT_PRED2(has, x.text, "  1. cfga: 1050.0 tokens/s (2 runs");
  EXPECT_PRED2(has, x.text,
               "--exclude-noisy: every run that counts is noisy, so excluding them "
               "would leave nothing: ranked anyway, marked [noisy].");
}

// Noisy runs whose wall figures the machine inverted: ranked by tokens per CPU-second (the
// runs' own CPU time), the order is the configurations' again; the wall ranking points there.
TEST(Ranking, NoisyRunsRankByTokensPerCpuSecond) {
  RunRow a = noisyRun("a", 0, 600), b = noisyRun("b", 0, 900), old = runRow("c", 0, 800);
  a.tokens_per_cpu_s = 1200, b.tokens_per_cpu_s = 1000;  // a lost more CPU to the others
  const BestReport wall = bestReport(table({a, b, old}), BestMetric::kTokensPerS);
  EXPECT_PRED2(has, wall.text, "  1. cfgb: 900.0 tokens/s");
  EXPECT_PRED2(has, wall.text, "--best tokens_per_cpu_s ranks by each run's own CPU time");
  const BestReport cpu = bestReport(table({a, b, old}), BestMetric::kTokensPerCpuS);
  EXPECT_EQ(cpu.exit_code, 0);
  EXPECT_PRED2(has, cpu.text, "Ranking by padded tokens per CPU-second");
  EXPECT_PRED2(has, cpu.text, "  1. cfga: 1200.0 tokens/CPU-s (1 run) [noisy: 1 of 1 run]\n");
  EXPECT_PRED2(has, cpu.text, "  2. cfgb: 1000.0 tokens/CPU-s (1 run) [noisy: 1 of 1 run]\n");
  EXPECT_PRED2(has, cpu.text, "cfgc: no CPU-time figure");  // recorded before the figure
}

TEST(Ranking, ExcludeNoisyLeavesTheNoisyRunsOutWithTheirReason) {
  AggregateTable t = table(
      {noisyRun("a", 0, 5000), runRow("a", 1, 1000), noisyRun("b", 0, 3000), runRow("c", 0, 900)});
  const std::string all = bestReport(t, BestMetric::kTokensPerS).text;
  EXPECT_PRED2(has, all, "  1. cfga: 3000.0 tokens/s (2 runs, min-max 1000.0-5000.0");
  EXPECT_PRED2(has, all, "[noisy: 1 of 2 runs]");
  EXPECT_PRED2(has, all, "  2. cfgb: 3000.0 tokens/s (1 run");
  EXPECT_PRED2(has, all, "includes 2 noisy run(s)");
  const std::string quiet = bestReport(t, BestMetric::kTokensPerS, kExcludeNoisy).text;
  EXPECT_PRED2(has, quiet, "  1. cfga: 1000.0 tokens/s (1 run; steps p10-p90 980.0-1020.0)\n");
  EXPECT_PRED2(has, quiet, "  2. cfgc: 900.0 tokens/s (1 run");
  EXPECT_FALSE(has(quiet, "3. "));
  EXPECT_FALSE(has(quiet, "[noisy"));
  EXPECT_PRED2(
      has, quiet,
      "Excluded from the ranking (2):\n"
      "  - cfga: noisy, left out by --exclude-noisy: interference 31.0 % on rank 0 > 5.0 %\n"
      "  - cfgb: noisy, left out by --exclude-noisy: interference 31.0 %");
}

TEST(Ranking, NothingRankableExitsOne) {
  RunRow failed = runRow("a", 0, 1000);
  failed.status = RunState::Failed;
  failed.message = "rank 0: exit 3";
  const BestReport r = bestReport(table({failed}), BestMetric::kTokensPerS);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_PRED2(has, r.text,
               "Nothing to rank: no run completed with a valid config and a measured step.\n"
               "Excluded from the ranking (1):\n  - cfga: failed: rank 0: exit 3\n");
  EXPECT_EQ(bestReport(table({}), BestMetric::kTokensPerS).exit_code, 1);
  // Runs count, but none has the figure ranked.
  RunRow no_mem = runRow("b", 0, 1000);
  no_mem.peak_mem_mib.reset();
  const BestReport m = bestReport(table({no_mem}), BestMetric::kMemory);
  EXPECT_EQ(m.exit_code, 1);
  EXPECT_PRED2(has, m.text, "  - cfgb: no peak memory recorded");
}

// ---- --price-per-hour ----------------------------------------------------------

TEST(Ranking, PricePerHourPricesTheRunsWithoutARecordedPrice) {
  RunRow recorded = runRow("a", 0, 1000);  // metrics.price_per_hour = 2.0
  RunRow bare = runRow("b", 0, 1000);
  bare.price_per_hour.reset();
  bare.usd_per_mt.reset();
  recorded.mt_per_hour = bare.mt_per_hour = 1000 * 3600 / 1e6;
  AggregateTable t = table({recorded, bare});
  // Without the flag only the priced run ranks; the other is listed with the reason.
  EXPECT_PRED2(has, bestReport(t, BestMetric::kCost).text,
               "  - cfgb: no price: neither metrics.price_per_hour in the run nor "
               "--price-per-hour");
  EXPECT_EQ(applyPrice(t, 3.0), 1u);
  EXPECT_DOUBLE_EQ(*t.runs[0].price_per_hour, 2.0);  // the run's own price wins
  EXPECT_FALSE(t.runs[0].price_from_flag);
  EXPECT_DOUBLE_EQ(*t.runs[1].price_per_hour, 3.0);
  EXPECT_TRUE(t.runs[1].price_from_flag);
  EXPECT_DOUBLE_EQ(*t.runs[1].usd_per_mt, 3.0 * 2 / 3.6);
  const std::string r = bestReport(t, BestMetric::kCost).text;
  EXPECT_PRED2(has, r, "  1. cfga: 1.1111 $/M tokens");
  EXPECT_PRED2(has, r, "  2. cfgb: 1.6667 $/M tokens");
  EXPECT_PRED2(has, r, "cfga beats cfgb by 33.3 %, beyond noise: no overlap of the step bands");
  EXPECT_PRED2(has, r,
               "Price: --price-per-hour 3.0 $ per device-hour for 1 run(s) recorded without "
               "metrics.price_per_hour; 1 run(s) keep their recorded price.");
}

int tagger(std::vector<std::string> args, std::string& out_text, std::string& err_text) {
  args.insert(args.begin(), "sweep_tagger");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  const int rc = runSweepTagger(static_cast<int>(argv.size()), argv.data(), out, err);
  out_text = out.str();
  err_text = err.str();
  return rc;
}

TEST(Ranking, CommandLineExitCodesAndBadFlags) {
  test::TempDir dir;  // no run at all
  std::string out, err;
  EXPECT_EQ(tagger({"aggregate", dir.path(), "--best", "tokens_per_s", "--jobs", "1"}, out, err),
            1);
  EXPECT_PRED2(has, out, "Nothing to rank: no run completed");
  EXPECT_EQ(tagger({"aggregate", dir.path(), "--best", "cost", "--price-per-hour", "0"}, out, err),
            2);
  EXPECT_PRED2(has, err, "--price-per-hour");
  EXPECT_PRED2(has, err, "expected a price > 0 in USD per device-hour, got 0");
  EXPECT_EQ(tagger({"aggregate", dir.path(), "--price-per-hour", "cheap"}, out, err), 2);
  EXPECT_PRED2(has, err, "price-per-hour");
  EXPECT_EQ(tagger({"aggregate", dir.path(), "--exclude-noisy"}, out, err), 2);
  EXPECT_PRED2(has, err, "--exclude-noisy");
  EXPECT_PRED2(has, err, "--best is missing");
}

// ---- Comparison with a reference table: --compare REF.csv --------------------

// `t` written as REF.csv (and, with constants, REF.constants.csv) in `dir`, read back.
ReferenceTable asReference(const AggregateTable& t, const std::string& dir, bool constants = true) {
  test::writeFile(dir + "/REF.csv", toCsv(t));
  if (constants) test::writeFile(dir + "/REF.constants.csv", constantsCsv(t));
  return readReferenceCsv(dir + "/REF.csv");
}

// Configurations a and b (seq_len 256, 512; training.seed `seed`), three repeats each at
// `scale` x 1000 and 2000 tokens/s; config hashes a<suffix>, b<suffix>.
AggregateTable twoConfigs(double scale, int64_t seed = 0, const std::string& suffix = "") {
  std::vector<RunRow> rows;
  for (int rep = 0; rep < 3; ++rep)
    for (auto [name, seq, tps] : {std::tuple{"a", 256, 1000.0}, std::tuple{"b", 512, 2000.0}}) {
      RunRow r = runRow(name + suffix, rep, scale * (tps + 20 * rep));
      r.config["data.seq_len"] = int64_t{seq};
      r.config["training.seed"] = seed;
      r.host = "node1";
      rows.push_back(r);
    }
  AggregateTable t = table(rows);
  t.varying = {"data.seq_len"};
  t.constant["training.seed"] = seed;
  return t;
}

TEST(CompareReference, TheSameRunsAreWithinNoiseAndReadBackWhole) {
  test::TempDir dir;
  const AggregateTable now = twoConfigs(1);
  const ReferenceTable ref = asReference(now, dir.path());
  ASSERT_EQ(ref.table.runs.size(), 6u);
  EXPECT_TRUE(ref.constants_known);
  EXPECT_EQ(ref.table.varying, std::vector<std::string>{"data.seq_len"});
  const RunRow& r = ref.table.runs[1];
  EXPECT_EQ(r.config_hash, now.runs[1].config_hash);
  EXPECT_EQ(*r.tokens_per_s_dataset, *now.runs[1].tokens_per_s_dataset);
  EXPECT_EQ(*r.step_tokens_p90, *now.runs[1].step_tokens_p90);
  EXPECT_TRUE(*r.is_valid);
  EXPECT_EQ(r.repeats, 3);
  const CompareReport rep = compareReport(ref, now, {5.0});
  EXPECT_EQ(rep.exit_code, 0);
  EXPECT_PRED2(has, rep.text,
               "| data.seq_len=256 | 1020.0 (3 runs) | 1020.0 (3 runs) | +0.0 | within noise | "
               "within noise (the repeats' ranges overlap) |  |");
  EXPECT_PRED2(has, rep.text, "No regression beyond noise.");
  EXPECT_PRED2(has, rep.text, "--fail-on-regression 5.0: no configuration regressed");
}

TEST(CompareReference, ATwentyPercentRegressionIsFlaggedAndFailsAboveThePercentage) {
  test::TempDir dir;
  const ReferenceTable ref = asReference(twoConfigs(1), dir.path());
  const AggregateTable slow = twoConfigs(0.8);
  CompareReport rep = compareReport(ref, slow, {10.0});
  EXPECT_EQ(rep.exit_code, 1);
  EXPECT_PRED2(has, rep.text,
               "| data.seq_len=512 | 2020.0 (3 runs) | 1616.0 (3 runs) | -20.0 | regression | "
               "beyond noise (no overlap of the repeats' ranges and the step bands p10-p90) |");
  EXPECT_PRED2(has, rep.text,
               "--fail-on-regression 10.0: regressed beyond noise by more than 10.0 %: "
               "data.seq_len=256 (20.0 % lower), data.seq_len=512 (20.0 % lower): exit 1.");
  EXPECT_EQ(compareReport(ref, slow, {25.0}).exit_code, 0);
  rep = compareReport(ref, slow);  // without the flag: reported, exit 0
  EXPECT_EQ(rep.exit_code, 0);
  EXPECT_PRED2(has, rep.text, "Regressions beyond noise: data.seq_len=256 (20.0 % lower)");
  rep = compareReport(ref, twoConfigs(1.2), {0.0});
  EXPECT_EQ(rep.exit_code, 0);
  EXPECT_PRED2(has, rep.text, "| +20.0 | improvement |");
}

TEST(CompareReference, AKeyThatDiffersIsListedAndTheSweepPointMatches) {
  test::TempDir dir;
  AggregateTable old = twoConfigs(1, 1, "-old");
  old.runs.push_back(runRow("c-old", 0, 500));  // a configuration of the reference alone
  old.runs.back().config["data.seq_len"] = int64_t{1024};
  old.runs.back().config["training.seed"] = int64_t{1};
  const AggregateTable now = twoConfigs(1, 2);
  CompareReport rep = compareReport(asReference(old, dir.path()), now);
  EXPECT_PRED2(has, rep.text, "| within noise (the repeats' ranges overlap) | training.seed: 1 -> 2 |");
  EXPECT_PRED2(has, rep.text, "| data.seq_len=1024 | 500.0 (1 run) |  |  | only in ref |");
  // Without REF.constants.csv the seed is unknown: not listed, and the report says why.
  test::TempDir bare;
  rep = compareReport(asReference(old, bare.path(), false), now);
  EXPECT_FALSE(has(rep.text, "training.seed:"));
  EXPECT_PRED2(has, rep.text, "REF.constants.csv not found: the keys equal in every reference");
}

TEST(CompareReference, OneRunASideHasNoMeasuredSpread) {
  test::TempDir dir;
  const ReferenceTable ref = asReference(table({runRow("a", 0, 1000)}), dir.path());
  const CompareReport rep = compareReport(ref, table({runRow("a", 0, 700, 0.02)}), {10.0});
  EXPECT_EQ(rep.exit_code, 1);  // the step bands alone: apart
  EXPECT_PRED2(has, rep.text,
               "| -30.0 | regression | beyond noise (no overlap of the step bands p10-p90); no "
               "repeats in ref and new: spread unknown, the ranges not tested |");
}

TEST(CompareReference, RefusalsNameTheFileTheLineAndTheColumn) {
  test::TempDir dir;
  const std::string good = toCsv(twoConfigs(1));
  auto refusal = [&](const std::string& text) -> std::string {
    test::writeFile(dir.path() + "/R.csv", text);
    try {
      readReferenceCsv(dir.path() + "/R.csv");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted";
  };
  std::string header = good.substr(0, good.find('\n'));
  const std::string no_hash = std::regex_replace(header, std::regex(",config_hash"), "") + "\n";
  EXPECT_PRED2(has, refusal(no_hash), "R.csv:1: key 'config_hash': the header has no column");
  EXPECT_PRED2(has, refusal(header + "\n\"a,\nb\",completed\n"), "R.csv:2: expected ");
  // A quoted field with a comma, a quote and a line break is one field; lines still count.
  const std::string row = good.substr(header.size() + 1, good.find('\n', header.size() + 1) -
                                                             header.size());
  const std::string quoted = "\"x,\"\"y\"\"\nz\"" + row.substr(row.find(','));
  EXPECT_EQ(refusal(header + "\n" + quoted + row), "accepted");
  EXPECT_PRED2(has, refusal(header + "\n" + quoted + std::regex_replace(row, std::regex(
                                                          ",completed,"), ",done,")),
               "R.csv:4: key 'status': unknown run state 'done'");
  EXPECT_PRED2(has, refusal(""), "R.csv:1: the file is empty");
}

TEST(CompareReference, CommandLineFlags) {
  test::TempDir dir;  // no run: every reference configuration is only in ref
  const ReferenceTable ref = asReference(twoConfigs(1), dir.path());
  std::string out, err;
  EXPECT_EQ(tagger({"aggregate", dir.path(), "--compare", ref.path, "--fail-on-regression", "5",
                    "--jobs", "1"},
                   out, err),
            0);
  EXPECT_PRED2(has, out, "| only in ref |");
  EXPECT_PRED2(has, out, "No configuration is in both tables");
  EXPECT_EQ(tagger({"aggregate", dir.path(), "--fail-on-regression", "5"}, out, err), 2);
  EXPECT_PRED2(has, err, "--compare REF.csv is missing");
  EXPECT_EQ(tagger({"aggregate", dir.path(), "--compare", ref.path, "--fail-on-regression", "-1"},
                   out, err),
            2);
  EXPECT_PRED2(has, err, "expected a percentage >= 0, got -1.0");
  EXPECT_EQ(tagger({"aggregate", dir.path(), "--compare", dir.path() + "/none.csv"}, out, err), 2);
  EXPECT_PRED2(has, err, "none.csv: key '--compare': the reference table is missing");
}

// ---- Charts: a categorical axis draws points, noisy points ringed ------------

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Charts, LayoutsArePointsWithoutLinesAndNoisyPointsAreMarked) {
  std::vector<RunRow> rows = {point("a", 0, 1000, "ddp", 1), point("b", 0, 1500, "pp2", 1),
                              point("c", 0, 1200, "ddp", 2), point("c", 1, 1100, "ddp", 2)};
  rows[1].noisy = noisyRun("b", 0, 1500).noisy;
  AggregateTable t = table(rows);
  t.varying = {"training.micro_batch_size"};
  test::TempDir dir;
  std::vector<std::string> warnings;
  writePlots(t, dir.path(), warnings);
  const std::string gp = slurp(dir.path() + "/tokens_per_s_vs_layout.gp");
  const std::string dat = slurp(dir.path() + "/tokens_per_s_vs_layout.dat");
  EXPECT_PRED2(has, gp, "set xlabel \"layout (sweep layout variant)\"");
  EXPECT_PRED2(has, gp, " with yerrorbars lt 1 title \"training.micro_batch_size=1\"");
  EXPECT_FALSE(has(gp, "yerrorlines"));
  EXPECT_PRED2(has, gp, "using 1:($5 > 0 ? $2 : 1/0) with points pt 6");
  EXPECT_PRED2(has, gp, "title \"noisy run (interference above metrics.max_interference)");
  // Categories ddp (0) and pp2 (1); the two series side by side, the noisy one marked.
  EXPECT_PRED2(has, dat,
               "# training.micro_batch_size=1  (x, median, min, max, noisy)\n"
               "-0.15 1000.0 1000.0 1000.0 0\n0.85 1500.0 1500.0 1500.0 1\n");
  EXPECT_PRED2(has, dat,
               "# training.micro_batch_size=2  (x, median, min, max, noisy)\n"
               "0.15 1150.0 1100.0 1200.0 0\n");
  // A numeric axis keeps its lines; without a noisy point there is no ring.
  const std::string mbs = slurp(dir.path() + "/tokens_per_s_vs_training.micro_batch_size.gp");
  EXPECT_PRED2(has, mbs, "set xlabel \"training.micro_batch_size (sequences per rank)\"");
  EXPECT_PRED2(has, mbs, "with yerrorlines");
  if (std::system("gnuplot --version > /dev/null 2>&1") == 0) {
    EXPECT_TRUE(warnings.empty()) << warnings[0];  // gnuplot takes the scripts
  }
}

TEST(WorkNote, SaysWhetherTheRowsDoEqualWorkAndWhichMode) {
  RunRow a = runRow("a", 0, 1000), b = runRow("b", 0, 900);
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
