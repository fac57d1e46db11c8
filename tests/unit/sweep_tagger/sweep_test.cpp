// Sweep expansion with exclude/include rules, invalid
// points marked, --index/--field for job arrays, --pending against run dirs.
#include "sweep_tagger/sweep.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/h5_metrics.h"
#include "common/run_config.h"
#include "common/run_status.h"
#include "common/tag.h"
#include "sweep_tagger/aggregate.h"
#include "sweep_tagger/cli.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::kThreeAxis;

std::string runCommand(int (*cmd)(const std::vector<std::string>&, std::ostream&),
                       const std::vector<std::string>& args) {
  std::ostringstream out;
  EXPECT_EQ(cmd(args, out), 0);
  return out.str();
}

using test::errorOf;

TEST(Sweep, ThreeAxisWithExcludeListsTheRightPoints) {
  std::vector<SweepPoint> pts = expandSweep(loadSweep(kThreeAxis));
  // seq_len x micro_batch x nproc, last axis fastest; (512, 2, *) excluded.
  const std::vector<std::string> expected = {
      "tinytest.sl256.mb1.ws1",  "tinytest.sl256.mb1.ws2",  "tinytest.sl256.mb2.ws1",
      "tinytest.sl256.mb2.ws2",  "tinytest.sl512.mb1.ws1",  "tinytest.sl512.mb1.ws2",
      "tinytest.sl2048.mb1.ws1", "tinytest.sl2048.mb1.ws2", "tinytest.sl2048.mb2.ws1",
      "tinytest.sl2048.mb2.ws2", "tinytest.sl128.mb1.ws1"};
  ASSERT_EQ(pts.size(), expected.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    EXPECT_EQ(pts[i].index, static_cast<int>(i));
    EXPECT_EQ(pts[i].tag, expected[i]);
    EXPECT_EQ(pts[i].world_size, pts[i].nodes * pts[i].nproc_per_node);
  }
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(pts[i].valid) << i;
  for (int i = 6; i < 10; ++i) {
    EXPECT_FALSE(pts[i].valid);
    EXPECT_EQ(pts[i].reason,
              "config error: override 'data.seq_len=2048': key 'data.seq_len': seq_len(2048) "
              "exceeds model.max_seq_len(1024)\n"
              "  hint: lower data.seq_len to at most 1024 or raise model.max_seq_len");
  }
  EXPECT_TRUE(pts[10].included);
  // The trainer's refusal of the same point, word for word.
  EXPECT_EQ(pts[10].reason, refusalOf(Config::load(test::dataDir() + "/base.toml",
                                                   {"data.seq_len=128", "parallel.tp=3"}),
                                      1));
  EXPECT_NE(pts[10].reason.find("dp_shard(1) * tp(3) does not divide world_size(1)"),
            std::string::npos);
  EXPECT_EQ(pts[3].args,
            (std::vector<std::string>{
                "data.seq_len=256", "training.micro_batch_size=2",
                "output.sweep_fmt=\"{model.name}.sl{data.seq_len}.mb{training.micro_batch_size}"
                ".ws{world_size}\""}));
}

TEST(Sweep, TableOutputMatchesGolden) {
  const std::string golden_path = test::dataDir() + "/expand_three_axis.txt";
  std::string got = runCommand(expandCommand, {kThreeAxis});
  if (std::getenv("FTB_UPDATE_GOLDEN")) std::ofstream(golden_path) << got;
  std::ifstream in(golden_path);
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(got, want.str());
}

TEST(Sweep, JsonIndexAndFieldForJobArrays) {
  std::istringstream lines(runCommand(expandCommand, {kThreeAxis, "--json"}));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["index"], n++);
    EXPECT_TRUE(j["overrides"].is_object());
  }
  EXPECT_EQ(n, 11);
  auto j = nlohmann::json::parse(runCommand(expandCommand, {kThreeAxis, "--index", "3"}));
  EXPECT_EQ(j["tag"], "tinytest.sl256.mb2.ws2");
  EXPECT_EQ(j["overrides"]["training.micro_batch_size"], 2);
  EXPECT_EQ(j["nproc_per_node"], 2);
  EXPECT_EQ(runCommand(expandCommand, {kThreeAxis, "--index", "3", "--field", "overrides"}),
            "data.seq_len=256 training.micro_batch_size=2 "
            "'output.sweep_fmt=\"{model.name}.sl{data.seq_len}.mb{training.micro_batch_size}"
            ".ws{world_size}\"'\n");
  EXPECT_EQ(runCommand(expandCommand, {kThreeAxis, "--index", "3", "--field", "world_size"}),
            "2\n");
  EXPECT_EQ(runCommand(expandCommand, {kThreeAxis, "--field", "valid"}).substr(0, 10),
            "true\ntrue\n");
  std::ostringstream sink;
  EXPECT_EQ(errorOf([&] {
              expandCommand({kThreeAxis, "--index", "11"}, sink);
            }),
            "config error: command line: --index 11 is out of range (the sweep has 11 points)");
  EXPECT_EQ(errorOf([&] {
              expandCommand({kThreeAxis, "--field", "color"}, sink);
            }),
            "config error: command line: unknown --field 'color'\n  hint: one of: index tag hash "
            "world_size nodes nproc_per_node valid reason included layout repeat global_batch "
            "overrides args base state");
}

// Command-line overrides apply to every point after the point's own: the hash a runner
// prints and checks with --pending is the hash of the config the trainer will run.
TEST(Sweep, OverridesFoldIntoEveryPointsHashAndArgs) {
  auto point = [](std::vector<std::string> args) {
    args.insert(args.begin(), kThreeAxis);
    for (const char* a : {"--index", "0"}) args.push_back(a);
    return nlohmann::json::parse(runCommand(expandCommand, args));
  };
  const auto plain = point({});
  const auto lr = point({"training.lr=0.5"});
  EXPECT_NE(lr["hash"], plain["hash"]);
  EXPECT_EQ(lr["args"][2], "training.lr=0.5");  // after data.seq_len, micro_batch_size
  const std::string base = lr["base"];
  EXPECT_EQ(
      runCommand(tagCommand, {"--config", base, "--world-size", "1", "--hash", "data.seq_len=256",
                              "training.micro_batch_size=1", "training.lr=0.5"}),
      lr["hash"].get<std::string>() + "\n");
  // An override of an axis wins over the point's value (the point's run is that config).
  EXPECT_EQ(point({"data.seq_len=128"})["tag"], "tinytest.sl128.mb1.ws1");
  std::ostringstream sink;
  EXPECT_NE(errorOf([&] {
              expandCommand({kThreeAxis, "training.lrr=1"}, sink);
            }).find("training.lrr"),
            std::string::npos);
}

// Run dirs for --pending: completed (dropped) and every other state (kept).
void makeRunDir(const std::string& results, const std::string& tag, const std::string& state) {
  const std::string dir = results + "/" + tag;
  if (state == "corrupt") {
    test::writeFile(metricsFilePath(dir, 0), "not an HDF5 file");
    return;
  }
  RunInfo info;
  info.tag = tag;
  MetricsFile f = MetricsFile::create(metricsFilePath(dir, 0), info);
  f.declareMetric("loss", false);
  f.appendStep({{"loss", 1.0}});
  if (state != "running") f.setStatus(state, state == "completed" ? 0 : 1, "");
  f.close();
}

TEST(Sweep, PendingDropsCompletedKeepsFailed) {
  test::TempDir results;
  makeRunDir(results.path(), "tinytest.sl256.mb1.ws1", "completed");
  makeRunDir(results.path(), "tinytest.sl256.mb1.ws2", "failed");
  makeRunDir(results.path(), "tinytest.sl256.mb2.ws1", "oom");
  makeRunDir(results.path(), "tinytest.sl256.mb2.ws2", "running");  // killed mid-run
  makeRunDir(results.path(), "tinytest.sl512.mb1.ws1", "corrupt");
  makeRunDir(results.path(), "tinytest.sl512.mb1.ws2", "completed");
  EXPECT_EQ(
      runCommand(expandCommand, {kThreeAxis, "--pending", results.path(), "--field", "index"}),
      "1\n2\n3\n4\n6\n7\n8\n9\n10\n");
  std::istringstream lines(
      runCommand(expandCommand, {kThreeAxis, "--pending", results.path(), "--json"}));
  std::vector<std::string> states;
  for (std::string line; std::getline(lines, line);)
    states.push_back(nlohmann::json::parse(line)["state"]);
  EXPECT_EQ(states, (std::vector<std::string>{"failed", "oom", "running", "corrupt", "missing",
                                              "missing", "missing", "missing", "missing"}));
  // --index of a completed point prints nothing; of a pending one, the point.
  EXPECT_EQ(runCommand(expandCommand, {kThreeAxis, "--pending", results.path(), "--index", "0"}),
            "");
  EXPECT_NE(runCommand(expandCommand, {kThreeAxis, "--pending", results.path(), "--index", "1"}),
            "");
  std::string table = runCommand(expandCommand, {kThreeAxis, "--pending", results.path()});
  EXPECT_NE(table.find("state"), std::string::npos);
  EXPECT_NE(table.find("failed"), std::string::npos);
  EXPECT_EQ(table.find("sl256.mb1.ws1 "), std::string::npos);
}

// ---- Sweep file semantics and errors -----------------------------------------

using test::writeSweep;

TEST(Sweep, RulesOnWorldSizeAndResolvedKeysNestedAxesAndDedupe) {
  test::TempDir dir;
  std::string path = writeSweep(dir, R"(fmt = "sl{data.seq_len}.n{world_size}"
nodes = 2
[grid.data]
seq_len = [64, 128]
[grid]
nproc_per_node = [1, 2]
[[exclude]]
world_size = 4
[[exclude]]
"data.seq_len" = 64
"training.lr" = 1e-4      # resolved from the base config: matches
[[include]]
"data.seq_len" = 128      # same as a grid point: listed once
nproc_per_node = 1
[[include]]
"data.seq_len" = 32
)");
  std::vector<std::string> tags;
  for (const SweepPoint& p : expandSweep(loadSweep(path))) tags.push_back(p.tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"sl128.n2", "sl32.n2"}));
}

// 2 nodes x 2 ranks and 1 node x 4 ranks are different runs (they hashed alike
// and expand marked the second invalid). Single-node hashes are unchanged.
TEST(Sweep, NodeCountIsPartOfTheRunIdentity) {
  test::TempDir dir;
  auto pts = expandSweep(loadSweep(writeSweep(
      dir, "[grid]\nnproc_per_node = [4]\n[[include]]\nnodes = 2\nnproc_per_node = 2\n")));
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_TRUE(pts[0].valid) << pts[0].reason;
  EXPECT_TRUE(pts[1].valid) << pts[1].reason;
  EXPECT_NE(pts[0].tag, pts[1].tag);
  EXPECT_NE(pts[0].hash, pts[1].hash);
  const Config cfg = Config::load(test::dataDir() + "/base.toml", {});
  // One node: the stream (and so every existing single-node tag) is what it was.
  EXPECT_EQ(canonicalStream(cfg, 4, 1), canonicalStream(cfg, 4));
  EXPECT_EQ(canonicalStream(cfg, 4).find("nodes"), std::string::npos);
  EXPECT_EQ(pts[0].hash, configHash(cfg, 4));
  EXPECT_EQ(pts[1].hash, configHash(cfg, 4, 2));
  EXPECT_EQ(pts[0].legacy_tag, "");
  EXPECT_EQ(pts[1].legacy_tag, pts[0].tag);  // what the 2 x 2 run was called before
}

// A completed 2-node run directory in the format written before the node count was part
// of the tag: run.toml without a "# nodes" header, under the tag that is now the 1 x 4
// point's, rank files with node_rank 0, 0, 1, 1.
std::string writeLegacyTwoNodeRun(const std::string& results, const Config& cfg) {
  const std::string tag = formatTag(cfg, 4, kDefaultTagFmt);
  const std::string dir = results + "/" + tag;
  test::writeFile(
      dir + "/run.toml",
      "# ftbench run.toml: the resolved config of this run (written once)\n# tag = " + tag +
          "\n# config_hash = " + configHash(cfg, 4) + "\n# world_size = 4\n" + cfg.toToml());
  for (int r = 0; r < 4; ++r) {
    RunInfo info;
    info.tag = tag;
    info.config_hash = configHash(cfg, 4);
    info.config_toml = cfg.toToml();
    info.world_size = 4;
    info.rank = r;
    info.local_rank = r % 2;
    info.node_rank = r / 2;
    MetricsFile f = MetricsFile::create(metricsFilePath(dir, r), info);
    f.declareMetric("loss", false);
    for (int step = 0; step < 3; ++step) f.appendStep({{"loss", 2.0 - step}});
    f.setStatus("completed", 0, "");
    f.close();
  }
  return dir;
}

TEST(Sweep, LegacyMultiNodeRunDirStillCountsAsCompleted) {
  test::TempDir dir, results;
  const std::string sweep =
      writeSweep(dir, "[grid]\nnproc_per_node = [4]\n[[include]]\nnodes = 2\nnproc_per_node = 2\n");
  const Config cfg = Config::load(test::dataDir() + "/base.toml", {});
  const std::string legacy = writeLegacyTwoNodeRun(results.path(), cfg);
  EXPECT_EQ(runNodes(legacy), 2);  // from the rank files: the header has no nodes
  // --pending: the 2 x 2 point is done (its legacy directory); the 1 x 4 point is not,
  // although the legacy directory has its tag.
  std::istringstream lines(
      runCommand(expandCommand, {sweep, "--pending", results.path(), "--json"}));
  std::vector<std::pair<int64_t, std::string>> pending;
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    pending.emplace_back(j["nodes"], j["state"]);
  }
  EXPECT_EQ(pending, (std::vector<std::pair<int64_t, std::string>>{{1, "missing"}}));
  // The 1 x 4 run refuses the legacy directory instead of mixing into it.
  try {
    prepareRunDir(cfg, 4, results.path(), false, 1);
    ADD_FAILURE() << "a 1-node run reused the legacy 2-node directory";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("holds a run on 2 node(s)"), std::string::npos)
        << e.what();
  }
  // The 2 x 2 run of today gets its own directory, which records the node count.
  RunDir rd = prepareRunDir(cfg, 4, results.path(), false, 2);
  EXPECT_NE(rd.path, legacy);
  EXPECT_EQ(runNodes(rd.path), 2);
  // Aggregation still reads the legacy directory as a completed 2-node run.
  AggregateTable t = aggregateRuns(results.path(), AggregateOptions{});
  bool found = false;
  for (const RunRow& row : t.runs) {
    if (row.tag != formatTag(cfg, 4, kDefaultTagFmt)) continue;
    found = true;
    EXPECT_EQ(row.status, RunState::Completed) << row.message;
    EXPECT_EQ(row.nodes, 2);
  }
  EXPECT_TRUE(found);
}

TEST(Sweep, NoGridMeansBaseOrIncludesOnly) {
  test::TempDir dir;
  EXPECT_EQ(expandSweep(loadSweep(writeSweep(dir, ""))).size(), 1u);
  auto pts = expandSweep(loadSweep(writeSweep(dir, "[[include]]\n\"data.seq_len\" = 64\n")));
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_EQ(pts[0].overrides.size(), 1u);
}

// An axis of `n` seeds: "training.seed" = [0, 1, ..., n-1].
std::string seedAxis(int n, const char* key = "training.seed") {
  std::string axis = std::string("\"") + key + "\" = [";
  for (int i = 0; i < n; ++i) axis += (i ? "," : "") + std::to_string(i);
  return axis + "]\n";
}

// 8 axes x 100 values (1e16 points) took over 60 s and 1.1 GB before the first point came
// out; the count is checked from the axis lengths before anything is expanded.
TEST(Sweep, MoreThanTheMaximumPointsIsRefusedBeforeExpanding) {
  // Ten keys, any type: loadSweep checks names and lengths, the values come later.
  const std::vector<const char*> keys = {
      "training.seed",    "training.max_steps",       "metrics.skip_first_steps",
      "data.num_samples", "training.lr_warmup_steps", "training.threads",
      "data.pad_id",      "metrics.log_every",        "data.seq_len",
      "data.min_doc_len"};
  test::TempDir dir;
  std::string grid = "[grid]\n";
  for (size_t k = 0; k < 8; ++k) grid += seedAxis(100, keys[k]);
  const std::string f = writeSweep(dir, grid);
  std::string msg = errorOf([&] { loadSweep(f); });
  EXPECT_EQ(msg.rfind("config error: " + f +
                          ":2: key 'grid': the sweep has 10000000000000000 "
                          "points (training.seed(100) x training.max_steps(100) x ",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("more than the limit of 10000 points per sweep\n  hint: split it"),
            std::string::npos)
      << msg;
  // 10 axes of 100 values: 1e20 overflows int64; still refused, not wrapped.
  grid = "[grid]\n";
  for (const char* k : keys) grid += seedAxis(100, k);
  msg = errorOf([&] { loadSweep(writeSweep(dir, grid)); });
  EXPECT_NE(msg.find("the sweep has more than 2^63 points (training.seed(100) x "),
            std::string::npos)
      << msg;
  // Exactly the limit passes; one [[include]] more does not.
  const std::string at_limit = "[grid]\n" + seedAxis(100) + seedAxis(100, "training.max_steps");
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, at_limit)); }), "(no error)");
  msg = errorOf(
      [&] { loadSweep(writeSweep(dir, at_limit + "[[include]]\n\"data.seq_len\" = 64\n")); });
  EXPECT_NE(msg.find("the sweep has 10001 points (training.seed(100) x training.max_steps(100) "
                     "= 10000, + 1 [[include]]), more than the limit"),
            std::string::npos)
      << msg;
}

TEST(Sweep, ExpandingThroughAnIndexListsTheSamePointsAsTheWholeSweep) {
  const SweepSpec spec = loadSweep(kThreeAxis);
  const std::vector<SweepPoint> all = expandSweep(spec);
  for (int last : {0, 4, 9}) {
    std::vector<SweepPoint> some = expandSweep(spec, last);
    ASSERT_EQ(some.size(), static_cast<size_t>(last) + 1);
    for (int i = 0; i <= last; ++i) EXPECT_EQ(some[i].tag, all[i].tag) << i;
  }
  EXPECT_EQ(expandSweep(spec, 1000).size(), all.size());  // past the end: all of them
}

// torchtitan's command line: `--training.steps 10` exits 2 naming ftbench's key (it got
// "did you mean 'training.eps'").
TEST(Sweep, TorchtitanFlagSpellingExitsTwoNamingTheFtbenchKey) {
  std::vector<std::string> words = {
      "sweep_tagger", "tag", "--config", test::dataDir() + "/base.toml", "--training.steps", "10"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  std::ostringstream out, err;
  EXPECT_EQ(runSweepTagger(static_cast<int>(argv.size()), argv.data(), out, err), 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(err.str(),
            "sweep_tagger tag: config error: override 'training.steps=10': key 'training.steps': "
            "unknown key\n  hint: 'training.steps' is torchtitan's spelling; ftbench calls it "
            "training.max_steps\n");
}

TEST(Sweep, ErrorsNameTheFileLineAndKey) {
  test::TempDir dir;
  const std::string f = dir.path() + "/sweep.toml";
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, "[grid]\n\"data.seqlen\" = [1]\n")); }),
            "config error: " + f +
                ":3: key 'data.seqlen': unknown key in [grid]\n"
                "  hint: did you mean 'data.seq_len'?");
  // Another tool's spelling names the ftbench key, in [grid] and in rules alike.
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, "[grid]\n\"training.steps\" = [5]\n")); }),
            "config error: " + f +
                ":3: key 'training.steps': unknown key in [grid]\n"
                "  hint: 'training.steps' is torchtitan's spelling; ftbench calls it "
                "training.max_steps");
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, "[grid]\nnnodes = [1, 2]\n")); }),
            "config error: " + f +
                ":3: key 'nnodes': unknown key in [grid]\n"
                "  hint: 'nnodes' is torchrun's spelling; ftbench calls it nodes");
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, "[grid]\nzzzz = [1]\n")); }),
            "config error: " + f +
                ":3: key 'zzzz': unknown key in [grid]\n"
                "  hint: sweep keys are trainer config keys, nodes, nproc_per_node or layout");
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, "[grid]\n\"data.seq_len\" = 5\n")); }),
            "config error: " + f +
                ":3: key 'data.seq_len': a grid axis must be a non-empty "
                "array\n  hint: \"data.seq_len\" = [1, 2]");
  EXPECT_EQ(errorOf([&] { loadSweep(writeSweep(dir, "colour = 1\n")); }),
            "config error: " + f +
                ":2: key 'colour': unknown sweep key\n  hint: a sweep has "
                "base, fmt, nodes, nproc_per_node, repeats, global_batch_size, [grid], "
                "[layout.NAME], [[exclude]], [[include]], and for tune [machines] and [tune]");
  EXPECT_EQ(errorOf([&] { loadSweep(dir.path() + "/missing.toml"); })
                .rfind("config error: " + dir.path() +
                           "/missing.toml: cannot read sweep file\n  hint: no such file",
                       0),
            0u);
  // A value of the wrong type is reported by the config loader, with the point.
  std::string msg = errorOf(
      [&] { expandSweep(loadSweep(writeSweep(dir, "[grid]\n\"data.seq_len\" = [\"x\"]\n"))); });
  EXPECT_NE(msg.find("data.seq_len"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in sweep " + f + ", point data.seq_len=\"x\""), std::string::npos) << msg;
  // A base that does not exist is named with the line that set it (it was reported by
  // the config loader as "..., point " with nothing after "point").
  test::writeFile(f, "nodes = 1\nbase = \"../runs/nope.toml\"\n");
  EXPECT_EQ(errorOf([&] { loadSweep(f); }),
            "config error: " + f + ":2: key 'base': base config '" +
                std::filesystem::path(dir.path()).parent_path().string() +
                "/runs/nope.toml' does not exist\n  hint: base is relative to the sweep file's "
                "directory, e.g. base = \"../runs/tiny.toml\" in configs/sweeps/");
}

// The sweep's validity is the trainer's own validation (refusalOf = the text of the
// ConfigError TrainConfig::fromConfig throws): the same numbers, key and location.
TEST(Validity, LayoutRules) {
  auto problems = [](const std::vector<std::string>& ov, int ws) {
    return refusalOf(test::configFrom(test::kModelToml, ov), ws);
  };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  EXPECT_EQ(problems({}, 3), "");
  EXPECT_EQ(problems({"parallel.tp=2"}, 4), "");
  EXPECT_PRED2(has, problems({"parallel.tp=2"}, 3),
               "dp_shard(1) * tp(2) does not divide world_size(3)");
  EXPECT_PRED2(has, problems({"parallel.dp_replicate=2"}, 3),
               "dp_replicate(2) * dp_shard(1) * tp(1) = 2 does not equal world_size(3)");
  EXPECT_PRED2(has, problems({"parallel.tp=4"}, 4), "tp(4) does not divide n_kv_heads(2)");
  EXPECT_PRED2(has, problems({"parallel.tp=0"}, 4), "0 is out of range: expected an integer >= 1");
  EXPECT_PRED2(has, problems({"data.seq_len=1025"}, 1),
               "seq_len(1025) exceeds model.max_seq_len(1024)");
  EXPECT_PRED2(has, problems({}, 0), "world_size(0) must be >= 1");
  // Two points that expand once found valid but the trainer refused.
  EXPECT_PRED2(has, problems({"parallel.tp=2", "model.ffn_dim=345"}, 2),
               "tp(2) does not divide ffn_dim(345)");
  EXPECT_PRED2(has, problems({"parallel.tp=2", "training.optimizer=\"adafactor\""}, 2),
               "tp(2) splits tensors across ranks");
}

TEST(ShellQuote, QuotesOnlyWhenNeeded) {
  EXPECT_EQ(shellQuote("data.seq_len=512"), "data.seq_len=512");
  EXPECT_EQ(shellQuote("model.name=\"a b\""), "'model.name=\"a b\"'");
  EXPECT_EQ(shellQuote("x='y'"), "'x='\\''y'\\'''");
  EXPECT_EQ(shellQuote(""), "''");
}

}  // namespace
}  // namespace ftb
