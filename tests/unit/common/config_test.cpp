// Tests for Config: TOML loading, overrides, presets, errors, serialization.
//
// Each test gets a fresh temp tree: <tmp>/runs/ for run files and <tmp>/models/ for
// presets, which presetDirs() finds as "<dir of config>/../models".
#include "common/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/run_config.h"
#include "common/tag.h"

namespace ftb {
namespace {
namespace fs = std::filesystem;

constexpr const char* kSmallPreset = R"([model]
dim = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
ffn_dim = 128
vocab_size = 256
max_seq_len = 128
rope_theta = 500000.0
)";

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("FTB_MODELS_DIR");
    char tmpl[] = "/tmp/ftb_config_test_XXXXXX";
    root_ = mkdtemp(tmpl);
    fs::create_directories(root_ / "runs");
    fs::create_directories(root_ / "models");
    write("models/small.toml", kSmallPreset);
    write("models/tiny.toml",
          "[model]\ndim = 8\nn_layers = 1\nn_heads = 2\nn_kv_heads = 2\nffn_dim = 16\n"
          "vocab_size = 32\nmax_seq_len = 16\n");
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes `text` to <root>/<rel> and returns the full path.
  std::string write(const std::string& rel, const std::string& text) {
    std::string path = (root_ / rel).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string run(const std::string& name) const { return (root_ / "runs" / name).string(); }
  std::string models() const { return (root_ / "models").string(); }

  // The what() of the ConfigError thrown by loading `text` (as runs/<name>).
  std::string loadError(const std::string& text, const std::vector<std::string>& overrides = {},
                        const std::string& name = "r.toml") {
    std::string path = write("runs/" + name, text);
    try {
      Config::load(path, overrides);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.exitCode(), 2);
      return e.what();
    }
    ADD_FAILURE() << "no ConfigError";
    return "";
  }

  fs::path root_;
};

TEST_F(ConfigTest, LoadsValuesOriginsAndDefaults) {
  std::string path =
      write("runs/r.toml", "[training]\nlr = 1e-3\nmax_steps = 7\n\n[data]\nsource = \"a.bin\"\n");
  Config cfg = Config::load(path, {});
  EXPECT_EQ(cfg.sourcePath(), path);
  EXPECT_DOUBLE_EQ(cfg.getFloat("training.lr"), 1e-3);
  EXPECT_EQ(cfg.getInt("training.max_steps"), 7);
  EXPECT_EQ(cfg.getString("data.source"), "a.bin");
  EXPECT_EQ(cfg.where("training.max_steps"), path + ":3");
  EXPECT_EQ(cfg.where("data.source"), path + ":6");
  EXPECT_EQ(cfg.getInt("data.seq_len"), 256);
  EXPECT_EQ(cfg.where("data.seq_len"), "default");
  EXPECT_EQ(cfg.getString("model.name"), "tiny");
  EXPECT_EQ(cfg.getInt("model.dim"), 8);  // from the default preset
  EXPECT_FALSE(cfg.has("model.from_pretrained"));
  EXPECT_EQ(cfg.where("model.from_pretrained"), "");
  try {
    cfg.getString("model.from_pretrained");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "config error: key 'model.from_pretrained': missing required key\n"
                 "  hint: set it in the config file or with model.from_pretrained=VALUE");
  }
}

TEST_F(ConfigTest, IntWidenedToFloat) {
  Config cfg = Config::load(write("runs/r.toml", "[training]\nlr = 1\n"), {});
  EXPECT_EQ(cfg.getFloat("training.lr"), 1.0);
  EXPECT_TRUE(std::holds_alternative<double>(cfg.entries().at("training.lr").value));
}

TEST_F(ConfigTest, UnknownKeyDidYouMean) {
  EXPECT_EQ(loadError("[training]\nlr = 1e-3\nmax_step = 10\n"),
            "config error: " + run("r.toml") +
                ":3: key 'training.max_step': unknown key\n"
                "  hint: did you mean 'training.max_steps'?");
  // Right name, wrong table.
  EXPECT_EQ(loadError("[model]\nlr = 0.1\n"),
            "config error: " + run("r.toml") +
                ":2: key 'model.lr': unknown key\n  hint: did you mean 'training.lr'?");
}

// torchtitan's `--training.steps 10` got "did you mean 'training.eps'" (edit distance 2).
TEST_F(ConfigTest, AnotherToolsSpellingNamesTheFtbenchKey) {
  EXPECT_EQ(loadError("", {"training.steps=10"}),
            "config error: override 'training.steps=10': key 'training.steps': unknown key\n"
            "  hint: 'training.steps' is torchtitan's spelling; ftbench calls it "
            "training.max_steps");
  EXPECT_EQ(loadError("[optimizer]\nlr = 1e-3\n"),
            "config error: " + run("r.toml") +
                ":2: key 'optimizer.lr': unknown key\n"
                "  hint: 'optimizer.lr' is torchtitan's spelling; ftbench calls it training.lr");
  EXPECT_EQ(loadError("[parallelism]\ntensor_parallel_degree = 2\n"),
            "config error: " + run("r.toml") +
                ":2: key 'parallelism.tensor_parallel_degree': unknown key\n"
                "  hint: 'parallelism.tensor_parallel_degree' is torchtitan's spelling; ftbench "
                "calls it parallel.tp");
  EXPECT_EQ(loadError("", {"parallelism.pipeline_parallel_degree=2"}),
            "config error: override 'parallelism.pipeline_parallel_degree=2': key "
            "'parallelism.pipeline_parallel_degree': unknown key\n"
            "  hint: 'parallelism.pipeline_parallel_degree' is torchtitan's spelling; ftbench "
            "calls it parallel.pp");
  EXPECT_EQ(loadError("", {"parallelism.context_parallel_degree=2"}),
            "config error: override 'parallelism.context_parallel_degree=2': key "
            "'parallelism.context_parallel_degree': unknown key\n"
            "  hint: 'parallelism.context_parallel_degree' is torchtitan's spelling; ftbench "
            "has no such setting");
  // A dotless spelling matches the last part of the key, in any table.
  EXPECT_EQ(loadError("[training]\nlearning_rate = 1e-3\n"),
            "config error: " + run("r.toml") +
                ":2: key 'training.learning_rate': unknown key\n"
                "  hint: 'learning_rate' is the Hugging Face Trainer's spelling; ftbench calls "
                "it training.lr");
  // Typos of ftbench's own keys keep their did-you-mean.
  EXPECT_NE(loadError("", {"training.max_step=3"}).find("did you mean 'training.max_steps'?"),
            std::string::npos);
}

// training.warmup_steps (steps left out of summaries) sat beside training.lr_warmup_steps and
// read as the learning-rate warm-up; it is metrics.skip_first_steps now. The old name is
// refused (exit 2, checked by loadError) with the new one in the hint, not "did you mean
// 'training.lr_warmup_steps'".
TEST_F(ConfigTest, RenamedKeyIsRefusedNamingItsNewName) {
  const std::string hint =
      "  hint: 'training.warmup_steps' is now called metrics.skip_first_steps; write "
      "metrics.skip_first_steps (the first N steps (warm-up) are left out of summaries "
      "(tokens/s, MFU, step times); not the learning-rate warm-up, training.lr_warmup_steps)";
  EXPECT_EQ(
      loadError("[training]\nwarmup_steps = 3\n"),
      "config error: " + run("r.toml") + ":2: key 'training.warmup_steps': unknown key\n" + hint);
  EXPECT_EQ(loadError("", {"training.warmup_steps=3"}),
            "config error: override 'training.warmup_steps=3': key 'training.warmup_steps': "
            "unknown key\n" +
                hint);
  std::string path = write("runs/new.toml", "[metrics]\nskip_first_steps = 3\n");
  EXPECT_EQ(Config::load(path, {}).getInt("metrics.skip_first_steps"), 3);
}

// A run.toml the trainer wrote before the rename (it starts with kRecordedConfigMark) reads
// under the new name: aggregate and export still read old run directories.
TEST_F(ConfigTest, RecordedRunTomlWithARenamedKeyReadsUnderTheNewName) {
  const std::string body = "[model]\nname = \"tiny\"\n[training]\nwarmup_steps = 5\n";
  const std::string recorded = std::string(kRecordedConfigMark) +
                               " the resolved config of this run (written once)\n"
                               "# config_hash = 0123456789abcdef\n" +
                               body;
  std::string path = write("runs/run.toml", recorded);
  const Config cfg = Config::load(path, {});
  EXPECT_EQ(cfg.getInt("metrics.skip_first_steps"), 5);
  EXPECT_FALSE(cfg.has("training.warmup_steps"));
  // Only a recorded config: a user's file with the old name is refused.
  EXPECT_NE(loadError(body).find("is now called metrics.skip_first_steps"), std::string::npos);
}

TEST(SchemaTest, RenamedKeysPointToRealKeys) {
  const Schema& schema = trainerSchema();
  ASSERT_FALSE(renamedKeys().empty());
  for (const RenamedKey& r : renamedKeys()) {
    SCOPED_TRACE(r.old_key);
    EXPECT_EQ(schema.find(r.old_key), nullptr);
    EXPECT_NE(schema.find(r.key), nullptr);
    EXPECT_EQ(renamedFrom(r.old_key), &r);
    EXPECT_EQ(renamedTo(r.key), &r);
  }
}

// Run directories are named by the hash of the resolved config; `expand --pending` finds the
// finished ones by name. The hashes below are what the build before the rename computed
// (sweep_tagger tag --hash --world-size 2) for these keys with training.warmup_steps left at
// its default and set to 5: the renamed key hashes as its old name did.
TEST(SchemaTest, RenamedKeyHashesAsItsOldNameDid) {
  const std::vector<std::string> model = {
      "model.name=t",        "model.dim=8",          "model.n_layers=1",
      "model.n_heads=2",     "model.n_kv_heads=2",   "model.ffn_dim=16",
      "model.vocab_size=32", "model.max_seq_len=16", "data.seq_len=16"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), model.begin(), model.end());
    return Config::fromString("", "run.toml", extra);
  };
  EXPECT_EQ(configHash(with({}), 2), "c8c529675a8fd846");
  EXPECT_EQ(configHash(with({"metrics.skip_first_steps=5"}), 2), "e6be0f7f58903b82");
  EXPECT_EQ(formatTag(with({"metrics.skip_first_steps=5"}), 2, kDefaultTagFmt),
            "t.ws2.e6be0f7f58903b82");
}

// Throughput-only sweeps had no way to skip the final checkpoint of every point.
TEST(SchemaTest, CheckpointSaveFinalIsABoolOutsideTheRunIdentity) {
  const std::vector<std::string> model = {
      "model.name=t",        "model.dim=8",          "model.n_layers=1",
      "model.n_heads=2",     "model.n_kv_heads=2",   "model.ffn_dim=16",
      "model.vocab_size=32", "model.max_seq_len=16", "data.seq_len=16"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), model.begin(), model.end());
    return Config::fromString("", "run.toml", extra);
  };
  EXPECT_TRUE(TrainConfig::fromConfig(with({}), 1).checkpoint.save_final);  // default: save
  const Config off = with({"checkpoint.save_final=false"});
  EXPECT_FALSE(TrainConfig::fromConfig(off, 1).checkpoint.save_final);
  // Not part of the run identity: a sweep rerun with it off finds its run directories.
  EXPECT_EQ(configHash(off, 2), configHash(with({}), 2));
  try {
    with({"checkpoint.save_final=0"});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    EXPECT_NE(std::string(e.what()).find("key 'checkpoint.save_final': expected bool, got int"),
              std::string::npos)
        << e.what();
  }
}

TEST(SchemaTest, ForeignSpellingsNameRealKeys) {
  const Schema& schema = trainerSchema();
  ASSERT_GE(foreignSpellings().size(), 30u);
  for (const ForeignSpelling& f : foreignSpellings()) {
    SCOPED_TRACE(f.spelling);
    EXPECT_EQ(schema.find(f.spelling), nullptr);  // never shadows an ftbench key
    const std::string ours = f.key;
    const bool launch = ours == "nodes" || ours == "nproc_per_node";
    EXPECT_TRUE(ours.empty() || launch || schema.find(ours) != nullptr) << ours;
    const std::string hint = unknownKeyHint(
        schema, f.spelling, launch ? std::vector<std::string>{ours} : std::vector<std::string>{});
    EXPECT_EQ(hint,
              "'" + std::string(f.spelling) + "' is " + f.tool + "'s spelling; " +
                  (ours.empty() ? "ftbench has no such setting" : "ftbench calls it " + ours));
  }
  // torchrun's spellings are sweep words: not offered where nodes is no key (a run config).
  EXPECT_EQ(unknownKeyHint(schema, "nnodes").find("torchrun"), std::string::npos);
}

TEST_F(ConfigTest, UnknownKeyListsTableKeys) {
  std::string msg = loadError("[parallel]\nsomething_else = 1\n");
  EXPECT_EQ(msg,
            "config error: " + run("r.toml") +
                ":2: key 'parallel.something_else': unknown key\n"
                "  hint: valid keys in [parallel]: backend, bucket_mb, dp_replicate, dp_shard, "
                "local_collectives, "
                "memory_limit_gb, pp, pp_local_p2p, pp_microbatches, pp_schedule, pp_split, "
                "pp_virtual_stages, timeout_seconds, tp, zero_stage");
  EXPECT_EQ(loadError("[zzzzzz]\nqqqq = 1\n"),
            "config error: " + run("r.toml") +
                ":2: key 'zzzzzz.qqqq': unknown key\n"
                "  hint: valid tables: checkpoint, data, lora, metrics, model, output, parallel, "
                "sweep, training");
}

// A wrong type names the key and the type expected; the hint says what the key is and
// its default (no bare "expected int" for a user who does not know the key).
TEST_F(ConfigTest, WrongType) {
  EXPECT_EQ(loadError("[training]\nmax_steps = \"ten\"\n"),
            "config error: " + run("r.toml") +
                ":2: key 'training.max_steps': expected int, got string (\"ten\")\n"
                "  hint: training.max_steps: optimizer steps to run (default 20)");
  EXPECT_EQ(
      loadError("[model]\ntie_embeddings = 1\n"),
      "config error: " + run("r.toml") +
          ":2: key 'model.tie_embeddings': expected bool, got int (1)\n"
          "  hint: model.tie_embeddings: share input embedding and output head (default false)");
  EXPECT_EQ(loadError("[data]\nseq_len = [1, 2.5]\n"),
            "config error: " + run("r.toml") +
                ":2: key 'data.seq_len': expected int, got mixed or non-int/string array "
                "([ 1, 2.5 ])\n  hint: data.seq_len: tokens per sample (default 256)");
}

TEST_F(ConfigTest, FloatNeverTruncatedToInt) {
  EXPECT_EQ(loadError("[training]\nmax_steps = 10.5\n"),
            "config error: " + run("r.toml") +
                ":2: key 'training.max_steps': expected int, got float (10.5)\n"
                "  hint: training.max_steps: optimizer steps to run (default 20)");
  EXPECT_EQ(loadError("[training]\nmax_steps = 10.0\n"),
            "config error: " + run("r.toml") +
                ":2: key 'training.max_steps': expected int, got float (10.0)\n"
                "  hint: write it as an integer: 10");
}

TEST_F(ConfigTest, MalformedTomlReportsLine) {
  std::string msg = loadError("[training]\nlr = 1e-3\nmax_steps = = 3\n");
  EXPECT_EQ(msg.rfind("config error: " + run("r.toml") + ":3: TOML syntax error: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("\n  hint: check that line: key = value"), std::string::npos) << msg;
}

TEST_F(ConfigTest, MissingFile) {
  try {
    Config::load(run("absent.toml"), {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("config error: " + run("absent.toml") +
                                              ": cannot read config file\n  hint: no such file",
                                          0),
              0u)
        << e.what();
  }
}

TEST_F(ConfigTest, DirectoryIsNotAConfig) {
  try {
    Config::load(models(), {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "config error: " + models() +
                  ": is a directory, expected a regular file\n  hint: pass the path of a TOML "
                  "config file");
  }
}

// /dev/zero would read without limit and a FIFO would block: both are refused
// before reading, naming the file; an over-size regular file is refused by size.
TEST_F(ConfigTest, NonRegularAndHugeFilesAreRefused) {
  std::string fifo = run("fifo.toml");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {std::string("/dev/zero"), fifo}) {
    try {
      Config::load(path, {});
      FAIL() << path;
    } catch (const ConfigError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path + ": is a "), std::string::npos) << msg;
      EXPECT_NE(msg.find("expected a regular file"), std::string::npos) << msg;
      EXPECT_EQ(e.exitCode(), 2);
    }
  }
  std::string big = write("runs/big.toml", "# " + std::string(kMaxInputFileBytes, 'x') + "\n");
  try {
    Config::load(big, {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(big + ": config file is 1048579 bytes (1024 KiB), more "
                                               "than the limit of 1048576 bytes (1024 KiB)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ConfigTest, OverridesParseTomlValues) {
  Config cfg =
      Config::load(write("runs/r.toml", "[training]\nmax_steps = 3\n"),
                   {"training.max_steps=7", "training.lr=1e-4", "model.tie_embeddings=true",
                    "training.optimizer=\"adafactor\"", "data.source=/data/x.bin", "output.dir=123",
                    "training.beta1 = 0.5", "parallel.timeout_seconds=60"});
  EXPECT_EQ(cfg.getInt("training.max_steps"), 7);
  EXPECT_EQ(cfg.where("training.max_steps"), "override 'training.max_steps=7'");
  EXPECT_EQ(cfg.getFloat("training.lr"), 1e-4);
  EXPECT_TRUE(cfg.getBool("model.tie_embeddings"));
  EXPECT_EQ(cfg.getString("training.optimizer"), "adafactor");
  EXPECT_EQ(cfg.getString("data.source"), "/data/x.bin");  // bare string
  EXPECT_EQ(cfg.getString("output.dir"), "123");           // string key keeps the text
  EXPECT_EQ(cfg.getFloat("training.beta1"), 0.5);
  EXPECT_EQ(cfg.getFloat("parallel.timeout_seconds"), 60.0);  // int widened
}

TEST_F(ConfigTest, OverrideLaterWins) {
  Config cfg = Config::load(write("runs/r.toml", ""), {"training.seed=1", "training.seed=2"});
  EXPECT_EQ(cfg.getInt("training.seed"), 2);
}

TEST_F(ConfigTest, OverrideErrors) {
  EXPECT_EQ(loadError("", {"training.max_steps=abc"}),
            "config error: override 'training.max_steps=abc': key 'training.max_steps': "
            "expected int, got string (\"abc\")\n"
            "  hint: training.max_steps: optimizer steps to run (default 20)");
  EXPECT_EQ(loadError("", {"training.max_steps=1e3"}),
            "config error: override 'training.max_steps=1e3': key 'training.max_steps': "
            "expected int, got float (1000.0)\n  hint: write it as an integer: 1000");
  EXPECT_EQ(loadError("", {"training.lrr=1"}),
            "config error: override 'training.lrr=1': key 'training.lrr': unknown key\n"
            "  hint: did you mean 'training.lr'?");
  EXPECT_EQ(loadError("", {"training.lr"}),
            "config error: override 'training.lr': expected key=value\n"
            "  hint: e.g. training.lr=1e-3");
  EXPECT_EQ(loadError("", {"=3"}),
            "config error: override '=3': empty key before '='\n  hint: e.g. training.lr=1e-3");
}

// A schema with list keys and a nested table, to test lists and serialization.
Schema listSchema() {
  Schema s;
  s.add({"x.ints", ValueType::kIntList, Value(std::vector<int64_t>{}), "ints"});
  s.add({"x.names", ValueType::kStringList, std::nullopt, "names"});
  s.add({"x.sub.depth", ValueType::kInt, Value(int64_t{1}), "nested"});
  s.add({"x.ratio", ValueType::kFloat, Value(0.25), "ratio"});
  s.add({"y.label", ValueType::kString, Value(std::string("a \"q\"\n")), "label"});
  s.add({"top", ValueType::kBool, Value(true), "root-level key"});
  return s;
}

TEST_F(ConfigTest, Lists) {
  Schema schema = listSchema();
  Config cfg = Config::fromString("[x]\nints = [1, 2]\nnames = []\n", "t.toml",
                                  {"x.ints=[3, 4, 5]"}, schema);
  EXPECT_EQ(cfg.getIntList("x.ints"), std::vector<int64_t>({3, 4, 5}));
  EXPECT_EQ(std::get<std::vector<std::string>>(cfg.entries().at("x.names").value),
            std::vector<std::string>{});
  cfg = Config::fromString("x.names = [\"a\", \"b\"]\n", "t.toml", {}, schema);
  EXPECT_EQ(std::get<std::vector<std::string>>(cfg.entries().at("x.names").value),
            std::vector<std::string>({"a", "b"}));
  try {
    Config::fromString("", "t.toml", {"x.ints=[1, \"a\"]"}, schema);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(
        e.what(),
        "config error: override 'x.ints=[1, \"a\"]': key 'x.ints': expected int list, "
        "got mixed or non-int/string array ([ 1, 'a' ])\n  hint: x.ints: ints (default [])");
  }
}

TEST_F(ConfigTest, PresetFillsUnsetModelKeys) {
  std::string path = write("runs/r.toml", "[model]\nname = \"small\"\nn_layers = 3\n");
  Config cfg = Config::load(path, {"model.dim=32"});
  EXPECT_EQ(cfg.getInt("model.n_layers"), 3);  // file > preset
  EXPECT_EQ(cfg.where("model.n_layers"), path + ":3");
  EXPECT_EQ(cfg.getInt("model.dim"), 32);  // override > preset
  EXPECT_EQ(cfg.getInt("model.n_heads"), 4);
  EXPECT_EQ(cfg.where("model.n_heads"), "preset " + models() + "/small.toml:4");
  EXPECT_EQ(cfg.getFloat("model.rope_theta"), 500000.0);  // preset > default
  EXPECT_EQ(cfg.getFloat("model.norm_eps"), 1e-5);        // default

  cfg = Config::load(path, {"model.n_layers=5"});
  EXPECT_EQ(cfg.getInt("model.n_layers"), 5);  // override > file
  EXPECT_EQ(cfg.getInt("model.dim"), 64);
}

TEST_F(ConfigTest, PresetFromEnvironmentDirFirst) {
  fs::create_directories(root_ / "env_models");
  write("env_models/small.toml", "[model]\ndim = 99\n");
  setenv("FTB_MODELS_DIR", (root_ / "env_models").c_str(), 1);
  std::vector<std::string> dirs = presetDirs(run("r.toml"));
  ASSERT_GE(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], (root_ / "env_models").string());
  EXPECT_EQ(dirs[1], models());
  Config cfg = Config::load(write("runs/r.toml", "model.name = \"small\"\n"), {});
  unsetenv("FTB_MODELS_DIR");
  EXPECT_EQ(cfg.getInt("model.dim"), 99);
  EXPECT_FALSE(cfg.has("model.n_layers"));
}

TEST_F(ConfigTest, MissingPreset) {
  std::string msg = loadError("[model]\nname = \"nope\"\n");
  std::string head = "config error: " + run("r.toml") +
                     ":2: key 'model.name': no preset 'nope' in " + models() + ", ";
  EXPECT_EQ(msg.rfind(head, 0), 0u) << msg;
  size_t hint = msg.find("\n  hint: available presets: ");
  ASSERT_NE(hint, std::string::npos) << msg;
  EXPECT_NE(msg.find("small", hint), std::string::npos) << msg;  // ours + configs/models
  EXPECT_NE(msg.find("; or set model.dim, model.n_layers, ... explicitly", hint),
            std::string::npos);

  // Explicit shape: no preset needed; keys without default stay absent.
  Config cfg = Config::load(write("runs/r.toml", "[model]\nname = \"mine\"\ndim = 16\n"), {});
  EXPECT_EQ(cfg.getInt("model.dim"), 16);
  EXPECT_FALSE(cfg.has("model.n_layers"));
}

TEST_F(ConfigTest, PresetKeysAreValidated) {
  write("models/bad.toml", "[model]\ndim = 8\ndimm = 3\n");
  EXPECT_EQ(loadError("model.name = \"bad\"\n"),
            "config error: " + models() +
                "/bad.toml:3: key 'model.dimm': unknown key\n  hint: did you mean 'model.dim'?");
  write("models/worse.toml", "[model]\ndim = 8\n[training]\nlr = 1.0\n");
  EXPECT_EQ(loadError("model.name = \"worse\"\n"),
            "config error: " + models() +
                "/worse.toml:4: key 'training.lr': a preset may only set [model] keys\n"
                "  hint: move training.lr into the run config (configs/runs/), or drop it");
}

TEST_F(ConfigTest, FailUsesWhere) {
  Config cfg = Config::load(write("runs/r.toml", "[training]\nmicro_batch_size = 0\n"), {});
  try {
    cfg.fail("training.micro_batch_size", "must be >= 1, got 0", "use 1 or more");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    EXPECT_EQ(std::string(e.what()),
              "config error: " + run("r.toml") +
                  ":2: key 'training.micro_batch_size': must be >= 1, got 0\n"
                  "  hint: use 1 or more");
  }
  // Without a hint of its own, the key's doc line, choices and default are the hint.
  try {
    cfg.fail("training.optimizer", "expected one of \"adamw\" | \"adafactor\", got \"adamx\"");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "config error: default: key 'training.optimizer': expected one of \"adamw\" | "
              "\"adafactor\", got \"adamx\"\n"
              "  hint: training.optimizer: the optimizer; one of \"adamw\" | \"adafactor\" "
              "(default \"adamw\")");
  }
}

TEST_F(ConfigTest, GetterTypeMismatchIsInternalError) {
  Config cfg = Config::load(write("runs/r.toml", ""), {});
  EXPECT_THROW(cfg.getInt("training.lr"), ConfigError);
  EXPECT_THROW(cfg.getInt("no.such"), ConfigError);
  try {
    cfg.getString("training.lr");
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "config error: key 'training.lr': internal: key declared float, read as string");
  }
}

TEST_F(ConfigTest, SetValidates) {
  Config cfg = Config::load(write("runs/r.toml", ""), {});
  cfg.set("training.lr", Value(int64_t{2}), "command line");
  EXPECT_EQ(cfg.getFloat("training.lr"), 2.0);
  EXPECT_EQ(cfg.where("training.lr"), "command line");
  EXPECT_THROW(cfg.set("training.max_steps", Value(1.5), "x"), ConfigError);
  EXPECT_THROW(cfg.set("training.nope", Value(true), "x"), ConfigError);
}

TEST_F(ConfigTest, ToTomlFormat) {
  Schema schema = listSchema();
  Config cfg = Config::fromString("[x]\nints = [1, 2]\nsub.depth = 3\n", "t.toml", {}, schema);
  EXPECT_EQ(cfg.toToml(),
            "top = true\n"
            "\n"
            "[x]\n"
            "ints = [1, 2]\n"
            "ratio = 0.25\n"
            "sub.depth = 3\n"
            "\n"
            "[y]\n"
            "label = \"a \\\"q\\\"\\n\"\n");
}

TEST_F(ConfigTest, ToTomlRoundTrips) {
  std::string path = write("runs/r.toml", "[model]\nname = \"small\"\n[training]\nlr = 3e-4\n");
  Config cfg = Config::load(path, {"training.eps=1e-8", "data.source=it's \"odd\"\\path",
                                   "training.beta2=0.95", "metrics.peak_tflops=123.456789"});
  std::string text = cfg.toToml();
  EXPECT_NE(text.find("[training]\n"), std::string::npos);
  EXPECT_NE(text.find("lr = 3e-4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rope_theta = 5e5\n"), std::string::npos) << text;  // formatDouble
  Config back = Config::fromString(text, "roundtrip.toml", {});
  ASSERT_EQ(back.entries().size(), cfg.entries().size());
  for (const auto& [key, entry] : cfg.entries()) {
    ASSERT_TRUE(back.has(key)) << key;
    EXPECT_EQ(back.entries().at(key).value, entry.value) << key;
  }
  EXPECT_EQ(back.toToml(), text);
}

TEST(ValueToString, TomlSpelling) {
  EXPECT_EQ(valueToString(Value(int64_t{-3})), "-3");
  // Floats are spelled by formatDouble, the spelling of the run-tag hash.
  for (double d : {1e-4, 1e-5, 10000.0, 0.1, 1.0 / 3, 0.001, 1e22, -2.5e-10})
    EXPECT_EQ(valueToString(Value(d)), formatDouble(d)) << d;
  EXPECT_EQ(valueToString(Value(1e-4)), "1e-4");
  EXPECT_EQ(valueToString(Value(1e-5)), "1e-5");
  EXPECT_EQ(valueToString(Value(10000.0)), "10000.0");
  EXPECT_EQ(valueToString(Value(0.1)), "0.1");
  EXPECT_EQ(valueToString(Value(1.0 / 3)), "0.3333333333333333");
  EXPECT_EQ(valueToString(Value(true)), "true");
  EXPECT_EQ(valueToString(Value(std::string("a\\b\t"))), "\"a\\\\b\\t\"");
  EXPECT_EQ(valueToString(Value(std::vector<int64_t>{1, 2})), "[1, 2]");
  EXPECT_EQ(valueToString(Value(std::vector<std::string>{"s"})), "[\"s\"]");
}

TEST(ValueFromString, ReadsEveryTomlSpellingBack) {
  for (const Value& v : {Value(int64_t{-3}), Value(1e-4), Value(1e-5), Value(0.1), Value(1e22),
                         Value(true), Value(std::string("a\\b\t\"q")),
                         Value(std::vector<int64_t>{1, 2}), Value(std::vector<std::string>{"s"})})
    EXPECT_EQ(valueFromString(valueToString(v)), v) << valueToString(v);
  // The spelling of ftbench before formatDouble was the one ("%.15g".."%.17g").
  EXPECT_EQ(valueFromString("0.0001"), Value(1e-4));
  EXPECT_EQ(valueFromString("1e-05"), Value(1e-5));
  EXPECT_EQ(valueFromString("1.0000000000000001e-05"), Value(1e-5));
  EXPECT_FALSE(valueFromString("adamw").has_value());  // a bare word is not a TOML value
  EXPECT_FALSE(valueFromString("1 2").has_value());
}

TEST(SameValue, NumbersCompareNumericallyOthersExactly) {
  EXPECT_TRUE(sameValue(Value(1e-4), Value(0.0001)));
  EXPECT_TRUE(sameValue(Value(int64_t{10000}), Value(10000.0)));
  EXPECT_TRUE(sameValue(Value(10000.0), Value(int64_t{10000})));
  EXPECT_FALSE(sameValue(Value(1e-4), Value(1.0000000000000002e-4)));  // next double
  EXPECT_FALSE(sameValue(Value(int64_t{3}), Value(int64_t{4})));
  EXPECT_FALSE(sameValue(Value(true), Value(int64_t{1})));
  EXPECT_FALSE(sameValue(Value(std::string("1")), Value(int64_t{1})));
  EXPECT_TRUE(sameValue(Value(std::vector<int64_t>{1, 2}), Value(std::vector<int64_t>{1, 2})));
}

TEST(ConfigErrorFormat, WithAndWithoutHint) {
  ConfigError e("parallel.tp", "run.toml:4", "tp(2) does not divide n_kv_heads(3)");
  EXPECT_STREQ(e.what(),
               "config error: run.toml:4: key 'parallel.tp': tp(2) does not divide "
               "n_kv_heads(3)");
  EXPECT_EQ(e.exitCode(), 2);
  ConfigError h("a.b", "override 'a.b=1'", "bad", "do this");
  EXPECT_STREQ(h.what(), "config error: override 'a.b=1': key 'a.b': bad\n  hint: do this");
}

TEST(SchemaTest, TrainerSchemaKeys) {
  const Schema& s = trainerSchema();
  EXPECT_EQ(s.keys().size(), 92u);  // 55 + parallel.bucket_mb + checkpoint.preempt_grace_s
                                    // + training.device + data.tokenizer/text_field/
                                    // prompt_field/completion_field
                                    // + parallel.local_collectives + checkpoint.save_final
                                    // + training.fp32_gemm + training.attention
                                    // + lora.* (6) + sweep.layout + sweep.repeat
                                    // + parallel.pp/pp_schedule/pp_virtual_stages/
                                    // pp_microbatches/pp_split
                                    // + metrics.max_interference
                                    // + parallel.pp_local_p2p
                                    // + training.optimizer_in_backward/master_weights/
                                    // bf16_update/device_memory_limit_gb/
                                    // activation_offload/optimizer_offload
                                    // + data.chat_template
                                    // + metrics.link_probe, metrics.gemm_probe
                                    // + training.cuda_kernels, training.cuda_graphs
  ASSERT_NE(s.find("training.lr"), nullptr);
  EXPECT_EQ(s.find("training.lr")->type, ValueType::kFloat);
  EXPECT_EQ(std::get<double>(*s.find("training.lr")->default_value), 3e-4);
  EXPECT_FALSE(s.find("model.dim")->default_value.has_value());
  EXPECT_EQ(std::get<std::string>(*s.find("output.sweep_fmt")->default_value),
            "{model.name}.ws{world_size}.{hash}");
  EXPECT_TRUE(s.find("parallel.tp")->affects_experiment);
  EXPECT_FALSE(s.find("parallel.timeout_seconds")->affects_experiment);
  EXPECT_FALSE(s.find("checkpoint.keep_last")->affects_experiment);
  EXPECT_FALSE(s.find("metrics.log_every")->affects_experiment);
  EXPECT_TRUE(s.find("metrics.peak_tflops")->affects_experiment);
  for (const KeySpec& k : s.keys()) EXPECT_FALSE(k.doc.empty()) << k.key;
}

// Every row of the --help-config table has its 4 cells in markdown (a `|` in a doc or a
// default would start a new cell), `<x>` outside code is not swallowed as an HTML tag, and
// planned keys say so.
TEST(SchemaTest, MarkdownEscapesBarsAndMarksPlannedKeys) {
  Schema sc;
  sc.add(KeySpec{"a.mode", ValueType::kString, Value(std::string("x|<y>")), "\"x\" | <y>"});
  KeySpec later{"a.later", ValueType::kInt, Value(int64_t{0}), "comes later"};
  later.planned = true;
  sc.add(later);
  const std::string md = schemaMarkdown(sc);
  EXPECT_EQ(md,
            "| key | type | default | meaning |\n|---|---|---|---|\n"
            "| `a.mode` | string | `\"x\\|<y>\"` | \"x\" \\| \\<y> |\n"
            "| `a.later` | int | `0` | **planned** (not implemented yet; refused if set): comes "
            "later |\n");
  std::istringstream rows(schemaMarkdown(trainerSchema()));
  for (std::string row; std::getline(rows, row);) {
    int cells = -1;  // a row starts and ends with a bar
    for (size_t i = 0; i < row.size(); ++i)
      cells += row[i] == '|' && (i == 0 || row[i - 1] != '\\');
    EXPECT_EQ(cells, 4) << row;
  }
}

TEST(SchemaTest, Closest) {
  const Schema& s = trainerSchema();
  EXPECT_EQ(s.closest("model.dimm"), "model.dim");
  EXPECT_EQ(s.closest("trainig.lr"), "training.lr");
  EXPECT_EQ(s.closest("model.lr"), "training.lr");  // same leaf, other table
  EXPECT_EQ(s.closest("completely.different"), "");
}

}  // namespace
}  // namespace ftb
