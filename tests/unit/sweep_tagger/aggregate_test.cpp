// Aggregation of run directories: statuses of broken runs, the trainer's summary
// formulas, worker processes, output formats.
#include "sweep_tagger/aggregate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/h5_metrics.h"
#include "common/hdf5.h"
#include "common/tag.h"
#include "sweep_tagger/plot.h"
#include "sweep_tagger/process_pool.h"
#include "test_util.h"

namespace ftb {
namespace {
namespace fs = std::filesystem;

struct Steps {
  std::vector<double> step_time, tokens_padded, tokens_dataset, mfu, loss, peak_rss;
  std::vector<double> gemm_eff;  // empty: 2 x mfu
};

// 5 steps; metrics.skip_first_steps = 2 in the config, so steps 2..4 are measured.
Steps fiveSteps() {
  return Steps{{0.5, 0.3, 0.2, 0.4, 0.3}, {1000, 1000, 1000, 1000, 1000},
               {800, 700, 900, 600, 500}, {0.1, 0.2, 0.3, 0.1, 0.2},
               {5, 4, 3, 2, 1},           {1 << 20, 2 << 20, 3 << 20, 3 << 20, 3 << 20}};
}

Config runConfig(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> ov = {"metrics.skip_first_steps=2", "metrics.price_per_hour=2.0"};
  ov.insert(ov.end(), extra.begin(), extra.end());
  return test::configFrom(test::kModelToml, ov);
}

// A run dir like the trainer's; `states[r]` per rank ("" = no file, "running" = no
// final status, "garbage" = not HDF5).
std::string makeRun(const std::string& results, const Config& cfg, int world,
                    const std::vector<std::string>& states, const Steps& s = fiveSteps(),
                    size_t steps = 5) {
  RunDir rd = prepareRunDir(cfg, world, results, false);
  for (int r = 0; r < world; ++r) {
    const std::string& state = states[r];
    if (state.empty()) continue;
    if (state == "garbage") {
      test::writeFile(metricsFilePath(rd.path, r), "garbage");
      continue;
    }
    RunInfo info;
    info.tag = rd.tag;
    info.world_size = world;
    info.rank = r;
    info.node_rank = r / 2;
    info.peak_flops = 1e12;
    info.config_toml = cfg.toToml();
    MetricsFile f = MetricsFile::create(metricsFilePath(rd.path, r), info);
    for (const char* m : {"step", "time_s", "step_time_s", "data_s", "forward_s", "backward_s",
                          "optimizer_s", "comm_s", "loss", "tokens_padded", "tokens_dataset", "mfu",
                          "gemm_efficiency", "peak_rss_bytes"})
      f.declareMetric(m, std::string(m) == "step");
    double t = 0;
    for (size_t i = 0; i < steps; ++i) {
      double st = s.step_time[i] * (r + 1);  // rank r is slower: only rank 0 counts
      t += st;
      f.appendStep({{"step", double(i)},
                    {"time_s", t},
                    {"step_time_s", st},
                    {"data_s", 0.1 * st},
                    {"forward_s", 0.3 * st},
                    {"backward_s", 0.4 * st},
                    {"optimizer_s", 0.15 * st},
                    {"comm_s", 0.05 * st},
                    {"loss", s.loss[i]},
                    {"tokens_padded", s.tokens_padded[i]},
                    {"tokens_dataset", s.tokens_dataset[i]},
                    {"mfu", s.mfu[i]},
                    {"gemm_efficiency", s.gemm_eff.empty() ? 2 * s.mfu[i] : s.gemm_eff[i]},
                    {"peak_rss_bytes", s.peak_rss[i] * (r + 1)}});
    }
    if (state != "running") f.setStatus(state, state == "completed" ? 0 : 1, state + " msg");
    f.close();
  }
  return rd.path;
}

RunRow summarize(const std::string& results, const std::string& dir, double stale = 600) {
  AggregateOptions o;
  o.stale_seconds = stale;
  return summarizeRun(results, dir, o);
}

// A run the trainer marked noisy (root attrs interference, noisy, env_warnings) stays
// completed; its valid cell says "noisy", the note gives the reason, the warnings are listed.
TEST(Aggregate, NoisyRunIsMarkedInTheValidColumnWithItsReason) {
  test::TempDir tmp;
  std::string dir = makeRun(tmp.path(), runConfig(), 1, {"completed"});
  {
    h5::H5Handle f = h5::openFile(metricsFilePath(dir, 0), true, false);
    h5::writeAttrDouble(f.get(), "interference", 0.42);
    h5::writeAttrDouble(f.get(), "tokens_per_cpu_s", 1234.5);
    h5::writeAttrString(f.get(), "noisy", "interference 42.0 % on rank 0 > 5.0 %");
    h5::writeAttrString(f.get(), "env_warnings", "machine was busy: GEMM low\nthreads > CPUs");
  }
  AggregateTable t = aggregateRuns(tmp.path(), AggregateOptions{});
  ASSERT_EQ(t.runs.size(), 1u);
  const RunRow& r = t.runs[0];  // through the worker's JSON line
  EXPECT_EQ(r.status, RunState::Completed);
  EXPECT_EQ(r.is_valid, true);
  EXPECT_DOUBLE_EQ(*r.interference, 0.42);
  EXPECT_DOUBLE_EQ(*r.tokens_per_cpu_s, 1234.5);
  EXPECT_EQ(r.noisy, "interference 42.0 % on rank 0 > 5.0 %");
  const std::string csv = toCsv(t);
  EXPECT_NE(csv.find(",noisy,0.42,1234.5,interference 42.0 % on rank 0 > 5.0 %,"),
            std::string::npos)
      << csv;
  const std::string md = toMarkdown(t);
  EXPECT_NE(md.find("| 1234.5 | noisy | 42.0 | interference 42.0 % on rank 0 > 5.0 % |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Environment warnings (rank 0, at start-up):\n- " + r.tag +
                    ":\n  - machine was busy: GEMM low\n  - threads > CPUs\n"),
            std::string::npos)
      << md;
  RunRow quiet =
      summarize(tmp.path(), makeRun(tmp.path(), runConfig({"data.seq_len=64"}), 1, {"completed"}));
  EXPECT_TRUE(quiet.noisy.empty());
  EXPECT_FALSE(quiet.interference.has_value());  // a file without the attribute
  EXPECT_FALSE(quiet.tokens_per_cpu_s.has_value());
}

TEST(Aggregate, CompletedRunMatchesTrainerFormulas) {
  test::TempDir tmp;
  std::string dir = makeRun(tmp.path(), runConfig(), 2, {"completed", "completed"});
  RunRow r = summarize(tmp.path(), dir);
  EXPECT_EQ(r.status, RunState::Completed);
  EXPECT_EQ(r.tag, fs::path(dir).filename().string());
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_EQ(r.ranks_found, 2);
  EXPECT_EQ(r.steps_done, 5);
  EXPECT_EQ(r.measured_steps, 3);
  // Measured: steps 2..4 of rank 0: time 0.2+0.4+0.3 = 0.9 s.
  EXPECT_DOUBLE_EQ(*r.tokens_per_s_padded, 3000 / 0.9);
  EXPECT_DOUBLE_EQ(*r.tokens_per_s_dataset, 2000 / 0.9);
  EXPECT_DOUBLE_EQ(*r.tokens_per_s_padded_per_device, 3000 / 0.9 / 2);
  EXPECT_DOUBLE_EQ(*r.mfu, (0.3 * 0.2 + 0.1 * 0.4 + 0.2 * 0.3) / 0.9);
  EXPECT_DOUBLE_EQ(*r.gemm_efficiency, 2 * (0.3 * 0.2 + 0.1 * 0.4 + 0.2 * 0.3) / 0.9);
  EXPECT_DOUBLE_EQ(*r.step_time_p50_s, 0.3);
  EXPECT_DOUBLE_EQ(*r.step_time_p90_s, 0.4);
  EXPECT_NEAR(*r.forward_frac, 0.3, 1e-12);
  EXPECT_NEAR(*r.comm_frac, 0.05, 1e-12);
  EXPECT_NEAR(*r.train_runtime_s, 1.7, 1e-12);
  EXPECT_DOUBLE_EQ(*r.peak_mem_mib, 6.0);  // rank 1: 3 MiB * 2
  EXPECT_EQ(*r.first_loss, 5);
  EXPECT_EQ(*r.last_loss, 1);
  EXPECT_DOUBLE_EQ(*r.mt_per_hour, 2000 / 0.9 * 3600 / 1e6);
  EXPECT_DOUBLE_EQ(*r.usd_per_mt, 2.0 * 2 / *r.mt_per_hour);
  EXPECT_EQ(r.is_valid, true);
}

TEST(Aggregate, EveryBrokenRunGetsAStatus) {
  test::TempDir tmp;
  auto cfg = [](int i) { return runConfig({"training.seed=" + std::to_string(i)}); };
  auto status = [&](const std::string& dir, double stale = 600) {
    RunRow r = summarize(tmp.path(), dir, stale);
    return toString(r.status) + " | " + r.message;
  };
  EXPECT_EQ(status(makeRun(tmp.path(), cfg(1), 2, {"failed", "completed"})),
            "failed | rank 0: failed msg");
  EXPECT_EQ(status(makeRun(tmp.path(), cfg(2), 2, {"failed", "oom"})), "oom | rank 1: oom msg");
  EXPECT_EQ(status(makeRun(tmp.path(), cfg(3), 2, {"preempted", "preempted"})),
            "preempted | rank 0: preempted msg");
  std::string running = makeRun(tmp.path(), cfg(4), 2, {"running", "running"});
  EXPECT_EQ(status(running), "running | rank 0 has no final status after 5 steps");
  for (int r = 0; r < 2; ++r)
    fs::last_write_time(metricsFilePath(running, r),
                        fs::file_time_type::clock::now() - std::chrono::hours(1));
  EXPECT_EQ(status(running).substr(0, 63),
            "killed | rank 0 has no final status after 5 steps; no update fo");
  EXPECT_EQ(status(makeRun(tmp.path(), cfg(5), 2, {"completed", ""})),
            "partial | 1 of 2 rank files");
  std::string corrupt = makeRun(tmp.path(), cfg(6), 2, {"completed", "garbage"});
  EXPECT_EQ(status(corrupt).substr(0, 18), "corrupt | rank 1: ");
  // Truncated at many sizes: never throws, always a status.
  std::string trunc = makeRun(tmp.path(), cfg(7), 1, {"completed"});
  const std::string f = metricsFilePath(trunc, 0);
  std::ifstream in(f, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  for (size_t n : {size_t{0}, size_t{8}, size_t{512}, bytes.size() / 3, bytes.size() / 2,
                   bytes.size() - 100, bytes.size() - 1}) {
    test::writeFile(f, bytes.substr(0, n));
    RunRow r = summarize(tmp.path(), trunc);
    EXPECT_TRUE(r.status == RunState::Corrupt || r.status == RunState::Completed)
        << n << ": " << r.status;
  }
  std::string missing = fs::path(makeRun(tmp.path(), cfg(8), 2, {"", ""})).string();
  EXPECT_EQ(status(missing), "missing | no metrics files");
  std::string invalid = makeRun(tmp.path(), cfg(9), 1, {"invalid"});
  RunRow inv = summarize(tmp.path(), invalid);
  EXPECT_EQ(inv.status, RunState::Invalid);
  EXPECT_EQ(inv.is_valid, false);
  // A run dir whose run.toml is not TOML still gets a row.
  test::writeFile(tmp.path() + "/broken/run.toml", "a = [1,");  // "[[[" trips a toml++ debug assert
  RunRow broken = summarize(tmp.path(), tmp.path() + "/broken");
  EXPECT_EQ(broken.status, RunState::Missing);
  EXPECT_NE(broken.message.find("run.toml:"), std::string::npos) << broken.message;
}

TEST(Aggregate, FewStepsHaveNoThroughputButStillARow) {
  test::TempDir tmp;
  std::string dir = makeRun(tmp.path(), runConfig(), 1, {"failed"}, fiveSteps(), 2);
  RunRow r = summarize(tmp.path(), dir);
  EXPECT_EQ(r.steps_done, 2);
  EXPECT_EQ(r.measured_steps, 0);
  EXPECT_FALSE(r.tokens_per_s_dataset.has_value());
  EXPECT_EQ(*r.first_loss, 5);
  EXPECT_EQ(toCsv(AggregateTable{tmp.path(), {r}, {}, {}}).find("nan"), std::string::npos);
}

class AggregateTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int seq : {64, 128})
      for (int ws : {1, 2})
        makeRun(tmp_.path(), runConfig({"data.seq_len=" + std::to_string(seq)}), ws,
                std::vector<std::string>(ws, "completed"));
    makeRun(tmp_.path(), runConfig({"data.seq_len=32", "metrics.log_every=9"}), 1, {"failed"});
    test::writeFile(tmp_.path() + "/notes.txt", "not a run");
  }
  test::TempDir tmp_;
};

TEST_F(AggregateTableTest, VaryingKeysAndWorkersAgree) {
  AggregateOptions one, two;
  two.jobs = 2;
  AggregateTable a = aggregateRuns(tmp_.path(), one), b = aggregateRuns(tmp_.path(), two);
  ASSERT_EQ(a.runs.size(), 5u);
  EXPECT_EQ(a.varying, std::vector<std::string>{"data.seq_len"});  // log_every: not experiment
  EXPECT_EQ(std::get<int64_t>(a.constant.at("model.dim")), 64);
  EXPECT_EQ(a.constant.count("metrics.log_every"), 0u);
  EXPECT_EQ(toCsv(a), toCsv(b));
  EXPECT_EQ(toJson(a), toJson(b));
}

TEST_F(AggregateTableTest, FormatsParseAndQuote) {
  AggregateTable t = aggregateRuns(tmp_.path(), AggregateOptions{});
  t.runs[0].message = "a, \"quoted\"\nmessage";
  std::string csv = toCsv(t);
  EXPECT_EQ(
      csv.substr(0, csv.find('\n')),
      "tag,status,data.seq_len,world_size,nodes,ranks,steps_done,resumes,measured_steps,"
      "train_runtime_s,tokens_per_s_dataset,tokens_per_s_padded,"
      "tokens_per_s_dataset_per_device,tokens_per_s_padded_per_device,mfu,mfu_causal,hfu,"
      "gemm_efficiency,step_time_p50_s,step_time_p90_s,data_frac,forward_frac,"
      "backward_frac,optimizer_frac,comm_frac,"
      "peak_mem_mib,first_loss,last_loss,mt_per_hour,usd_per_mt,price_per_hour,is_valid,"
      "interference,tokens_per_cpu_s,noisy,env_warnings,host,cpu_model,peak_flops,"
      "peak_source,gemm_flops,"
      "gemm_source,link_busbw_GBps,traces,method,trainable_params,flops_formula,layout,repeat,"
      "config_hash,global_batch_seqs,global_batch_tokens,batch_mode,"
      "step_tokens_per_s_padded_p10,step_tokens_per_s_padded_p50,"
      "step_tokens_per_s_padded_p90,repeats,tokens_per_s_median,tokens_per_s_min,"
      "tokens_per_s_max,message");
  EXPECT_NE(csv.find("\"a, \"\"quoted\"\"\nmessage\""), std::string::npos);
  auto j = nlohmann::json::parse(toJson(t));
  EXPECT_EQ(j["runs"].size(), 5u);
  EXPECT_EQ(j["varying"][0], "data.seq_len");
  std::string md = toMarkdown(t);
  EXPECT_NE(md.find("| tag | status | data.seq_len | world size | nodes | steps | resumes | "
                    "tokens/s global (dataset) | tokens/s per device (padded) | "
                    "step tokens/s p10/p50/p90 (padded) | global batch seqs (tokens) | MFU % (hw "
                    "peak, 6N+12·L·H·hd·T) | "
                    "GEMM eff. % (measured GEMM) |"),
            std::string::npos)
      << md;
  // Constants one per line; MT/h and $/MT spelled out with the price used.
  EXPECT_EQ(md.rfind("Constant (identical in every run):\n\n- `data.", 0), 0u) << md;
  EXPECT_NE(md.find("\n- `metrics.skip_first_steps` = 2\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| M tokens/h global¹ | $/M tokens² |"), std::string::npos) << md;
  EXPECT_NE(md.find("¹ M tokens/h: million dataset (non-padding) tokens per hour over all devices"),
            std::string::npos);
  EXPECT_NE(md.find("`metrics.price_per_hour` = 2.0 $ per device-hour."), std::string::npos) << md;
  EXPECT_EQ(constantsCsv(t).substr(0, 10), "key,value\n");
  for (const RunRow& r : t.runs)
    EXPECT_EQ(rowToJsonLine(rowFromJsonLine(rowToJsonLine(r))), rowToJsonLine(r));
}

TEST(NaturalLess, NumbersCompareByValue) {
  std::vector<std::string> tags = {"m.sl1024.mb2", "m.sl512.mb16", "m.sl512.mb2",
                                   "m.sl64",       "m.sl0512",     "a",
                                   "m.sl2048.mb1", "b1",           "b01"};
  std::sort(tags.begin(), tags.end(), naturalLess);
  EXPECT_EQ(tags, (std::vector<std::string>{"a", "b01", "b1", "m.sl64", "m.sl0512", "m.sl512.mb2",
                                            "m.sl512.mb16", "m.sl1024.mb2", "m.sl2048.mb1"}));
  EXPECT_FALSE(naturalLess("x", "x"));
}

TEST_F(AggregateTableTest, RowsSortNaturallyAndCarryHostAndPeak) {
  AggregateTable t = aggregateRuns(tmp_.path(), AggregateOptions{});
  for (size_t i = 1; i < t.runs.size(); ++i)
    EXPECT_FALSE(naturalLess(t.runs[i].tag, t.runs[i - 1].tag)) << t.runs[i].tag;
  EXPECT_EQ(t.runs[0].peak_flops, 1e12);
  EXPECT_EQ(t.runs[0].price_per_hour, 2.0);
}

// Values a corrupt block can produce in a file that still opens: each makes a
// completed file corrupt, with the dataset, row and value in the message.
TEST(Aggregate, ImplausibleValuesMakeACompletedFileCorrupt) {
  test::TempDir tmp;
  int seed = 0;
  RunRow last;
  auto withSteps = [&](const Steps& s) {
    std::string dir = makeRun(tmp.path(), runConfig({"training.seed=" + std::to_string(++seed)}), 1,
                              {"completed"}, s);
    last = summarize(tmp.path(), dir);
    return toString(last.status) + " | " + last.message;
  };
  Steps neg = fiveSteps();
  neg.tokens_dataset[3] = -1.67e19;
  EXPECT_NE(withSteps(neg).find("corrupt | rank 0: "), std::string::npos);
  EXPECT_NE(withSteps(neg).find("/steps/tokens_dataset row 3 is -1.67e+19: expected a finite "
                                "value >= 0"),
            std::string::npos)
      << withSteps(neg);
  Steps inf = fiveSteps();
  inf.loss[1] = std::numeric_limits<double>::infinity();
  EXPECT_NE(withSteps(inf).find("/steps/loss row 1 is inf"), std::string::npos);
  Steps nan = fiveSteps();
  nan.loss[4] = std::nan("");
  EXPECT_NE(withSteps(nan).find("/steps/loss row 4 is nan"), std::string::npos);
  // mfu NaN = "the hardware peak is wrong or unknown": completed, MFU left empty.
  Steps no_mfu = fiveSteps();
  no_mfu.gemm_eff = no_mfu.mfu;
  for (double& m : no_mfu.mfu) m = std::nan("");
  EXPECT_EQ(withSteps(no_mfu), "completed | ");
  EXPECT_FALSE(last.mfu.has_value());  // the md/csv cell is empty, never "nan"
  EXPECT_TRUE(last.gemm_efficiency.has_value());
  // A failed run may hold a non-finite loss: it stays failed.
  std::string failed = makeRun(tmp.path(), runConfig({"training.seed=99"}), 1, {"failed"}, inf);
  EXPECT_EQ(summarize(tmp.path(), failed).status, RunState::Failed);
}

TEST(MetricsProblem, StepOrderAndRowCount) {
  MetricsData d;
  d.steps["step"] = {0, 1, 1};
  d.status.steps_done = 3;
  EXPECT_EQ(metricsProblem(d),
            "/steps/step row 2 is 1 after 1: expected strictly increasing step numbers");
  d.steps["step"] = {0, 1, 2};
  d.steps["time_s"] = {0.5, 0.4, 0.6};
  EXPECT_EQ(metricsProblem(d),
            "/steps/time_s row 1 is 0.4 after 0.5: expected non-decreasing times");
  d.steps["time_s"] = {0.5, 0.6, 0.7};
  d.status.steps_done = 5;
  EXPECT_EQ(metricsProblem(d), "/status steps_done is 5 but /steps has 3 rows");
  d.status.steps_done = 3;
  EXPECT_EQ(metricsProblem(d), "");
}

TEST_F(AggregateTableTest, PlotsWithGnuplot) {
  if (std::system("gnuplot --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no gnuplot";
  AggregateTable t = aggregateRuns(tmp_.path(), AggregateOptions{});
  std::vector<std::string> warnings;
  std::vector<std::string> files = writePlots(t, tmp_.path() + "/plots", warnings);
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  std::vector<std::string> names;
  for (const std::string& f : files) {
    names.push_back(fs::path(f).filename().string());
    EXPECT_GT(fs::file_size(f), 1000u) << f;
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "tokens_per_s_vs_data.seq_len.png", "tokens_per_s_vs_data.seq_len.svg",
                       "tokens_per_s_vs_world_size.png", "tokens_per_s_vs_world_size.svg",
                       "scaling_efficiency.png", "scaling_efficiency.svg"}));
  for (const auto& e : fs::directory_iterator(tmp_.path() + "/plots"))  // temporaries renamed
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  // The .gp left beside the images redraws them by hand.
  const std::string png = tmp_.path() + "/plots/scaling_efficiency.png";
  fs::remove(png);
  EXPECT_EQ(std::system(("gnuplot " + tmp_.path() + "/plots/scaling_efficiency.gp").c_str()), 0);
  EXPECT_GT(fs::file_size(png), 1000u);
}

// A gnuplot that never finishes costs its charts (a warning each), not the aggregation.
TEST_F(AggregateTableTest, HangingGnuplotIsKilledAfterItsDeadline) {
  const std::string bin = tmp_.path() + "/bin";
  fs::create_directories(bin);
  std::ofstream(bin + "/gnuplot") << "#!/bin/sh\nexec sleep 600\n";
  fs::permissions(bin + "/gnuplot", fs::perms::owner_all);
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  setenv("PATH", (bin + ":" + path).c_str(), 1);
  AggregateTable t = aggregateRuns(tmp_.path(), AggregateOptions{});
  std::vector<std::string> warnings;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> files = writePlots(t, tmp_.path() + "/plots", warnings, 0.5);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  setenv("PATH", path.c_str(), 1);
  EXPECT_TRUE(files.empty());
  ASSERT_EQ(warnings.size(), 3u);  // seq_len, world_size, scaling
  EXPECT_NE(warnings[0].find("gnuplot did not finish " + tmp_.path() +
                             "/plots/tokens_per_s_vs_data.seq_len.gp within 0.5 s: killed"),
            std::string::npos)
      << warnings[0];
  EXPECT_LT(secs, 3 * 0.5 + 30);  // three deadlines, not three sleeps of 600 s
  for (const auto& e : fs::directory_iterator(tmp_.path() + "/plots"))
    EXPECT_EQ(e.path().extension() == ".png" || e.path().extension() == ".svg", false) << e.path();
}

TEST(ProcessPool, CrashCostsOneResult) {
  auto f = [](size_t i) -> std::string {
    if (i == 3) std::abort();  // a reader crashing on one input
    return "r" + std::to_string(i);
  };
  for (int jobs : {2, 3}) {
    auto out = mapInProcesses(7, jobs, f);
    ASSERT_EQ(out.size(), 7u);
    for (size_t i = 0; i < 7; ++i) {
      if (i == 3)
        EXPECT_FALSE(out[i].has_value());
      else
        EXPECT_EQ(out[i], "r" + std::to_string(i));
    }
  }
  auto serial = mapInProcesses(3, 1, [](size_t i) { return std::to_string(i * i); });
  EXPECT_EQ(serial[2], "4");
}

// A reader that hangs (libhdf5 looping on a damaged file) costs its result, not the
// table: it is killed after the per-item deadline, also with one job.
TEST(ProcessPool, HangCostsOneResultWithinTheDeadline) {
  auto f = [](size_t i) -> std::string {
    if (i == 2) pause();  // never returns
    return "r" + std::to_string(i);
  };
  for (int jobs : {1, 2}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = mapInProcesses(5, jobs, f, 0.5);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 10.0);  // about 2 x 0.5 s: the first attempt, then the retry alone
    for (size_t i = 0; i < 5; ++i)
      EXPECT_EQ(out[i],
                i == 2 ? std::nullopt : std::optional<std::string>("r" + std::to_string(i)));
  }
}

}  // namespace
}  // namespace ftb
