// Tag hash invariances, value rendering and run-directory creation.
#include "common/tag.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::configFrom;
using test::kModelToml;

std::string hashOf(const std::string& toml, int ws = 2,
                   const std::vector<std::string>& overrides = {}) {
  return configHash(configFrom(toml, overrides), ws);
}

TEST(ConfigHash, Is16HexChars) {
  std::string h = hashOf(kModelToml);
  ASSERT_EQ(h.size(), 16u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(ConfigHash, IgnoresSpellingOfTheSameConfig) {
  const std::string model = kModelToml;
  const std::string a = model + "[training]\nlr = 1e-4\nmax_steps = 7\n[data]\nseq_len = 512\n";
  // Key order, float spelling, inline tables, dotted keys, int for a float key.
  const std::vector<std::string> same = {
      "[data]\nseq_len = 512\n[training]\nmax_steps = 7\nlr = 0.0001\n" + model,
      "training = { max_steps = 7, lr = 1.0e-4 }\ndata = { seq_len = 512 }\n" + model,
      model + "[training]\nlr = 10e-5\nmax_steps = 7\n[data]\nseq_len = 512\n",
      model + "[training]\nlr = 0.000_1\nmax_steps = 7\n[data]\nseq_len = 512\n",
      "training.lr = 1e-4\ntraining.max_steps = 7\ndata.seq_len = 512\n" + model,
  };
  for (const std::string& b : same) EXPECT_EQ(hashOf(a), hashOf(b)) << b;
  // An override equals the same value written in the file.
  EXPECT_EQ(hashOf(a), hashOf(model + "[data]\nseq_len = 512\n", 2,
                              {"training.lr=0.0001", "training.max_steps=7"}));
  // int vs float for a float key.
  EXPECT_EQ(hashOf(model + "[training]\nlr = 1\n"), hashOf(model + "[training]\nlr = 1.0\n"));
  // A default written out explicitly is the same experiment.
  EXPECT_EQ(hashOf(model), hashOf(model + "[training]\noptimizer = \"adamw\"\n"));
}

TEST(ConfigHash, IgnoresKeysThatDoNotChangeTheExperiment) {
  const std::string model = kModelToml;
  EXPECT_EQ(hashOf(model), hashOf(model + "[output]\ndir = \"elsewhere\"\n"
                                          "[metrics]\nlog_every = 10\n"
                                          "[checkpoint]\ninterval = 5\n"));
}

TEST(ConfigHash, ChangesWithEveryExperimentKeyAndWorldSize) {
  const std::string model = kModelToml;
  std::string h = hashOf(model);
  EXPECT_NE(h, hashOf(model, 4));
  EXPECT_NE(h, hashOf(model + "[training]\nlr = 1.0000000000000002e-4\n"));
  EXPECT_NE(h, hashOf(model + "[data]\nseq_len = 257\n"));
  EXPECT_NE(h, hashOf(model, 2, {"model.tie_embeddings=true"}));
  EXPECT_NE(h, hashOf(model, 2, {"data.source=\"x\""}));
}

// lora.base_dtype hashes only away from its default (training.dtype's with adapters): an
// fp32 LoRA run keeps its tag when "fp32" is written out; "nf4" and "bf16" change it.
TEST(ConfigHash, LoraBaseDtypeHashesOnlyAwayFromItsDefault) {
  const std::string model = kModelToml;
  const std::string h = hashOf(model, 2, {"lora.rank=4"});
  EXPECT_EQ(h, hashOf(model, 2, {"lora.rank=4", "lora.base_dtype=\"fp32\""}));
  EXPECT_NE(h, hashOf(model, 2, {"lora.rank=4", "lora.base_dtype=\"nf4\""}));
  EXPECT_NE(h, hashOf(model, 2, {"lora.rank=4", "lora.base_dtype=\"bf16\""}));
  EXPECT_NE(hashOf(model, 2, {"lora.rank=4", "lora.base_dtype=\"nf4\""}),
            hashOf(model, 2, {"lora.rank=4", "lora.base_dtype=\"bf16\""}));
}

// The memory techniques' keys hash only away from their defaults: a run directory named
// before they existed keeps its tag when a default is written out, and each other value is
// its own experiment.
TEST(ConfigHash, MemoryTechniqueKeysHashOnlyAwayFromTheirDefaults) {
  const std::string model = kModelToml;
  const std::string h = hashOf(model, 2);
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"training.optimizer_in_backward=false", "training.optimizer_in_backward=true"},
      {"training.master_weights=\"fp32\"", "training.master_weights=\"none\""},
      {"training.bf16_update=\"stochastic\"", "training.bf16_update=\"kahan\""},
      {"training.device_memory_limit_gb=0", "training.device_memory_limit_gb=24"}};
  for (const auto& [at_default, away] : keys) {
    EXPECT_EQ(h, hashOf(model, 2, {at_default})) << at_default;
    EXPECT_NE(h, hashOf(model, 2, {away})) << away;
  }
}

// fairseq2's SweepTagger joins keys and values without separators, so
// {"a": "bc"} and {"ab": "c"} hash the same. Length prefixes keep them apart.
TEST(ConfigHash, NoConcatenationAmbiguity) {
  const std::string model = std::string(kModelToml);
  auto with = [&](const std::string& name, const std::string& source) {
    return hashOf(model, 2, {"model.name=\"" + name + "\"", "data.source=\"" + source + "\""});
  };
  EXPECT_NE(with("a", "bc"), with("ab", "c"));
  EXPECT_NE(with("", "abc"), with("abc", ""));
  // A value that spells a length prefix and another record must not collide either.
  Config a = configFrom(model), b = configFrom(model);
  a.set("model.name", std::string("x"), "test");
  a.set("data.source", std::string("y"), "test");
  b.set("model.name", std::string("x\0\0\0\0\0\0\0\x01y", 10), "test");
  b.set("data.source", std::string("y"), "test");
  EXPECT_NE(configHash(a, 2), configHash(b, 2));
}

TEST(ConfigHash, CanonicalStreamIsDocumentedFormat) {
  std::string s = canonicalStream(configFrom(kModelToml), 2);
  EXPECT_EQ(s.rfind("ftbench-sweep-tag-v1\n", 0), 0u);
  // Last record: 'W', len-prefixed "world_size", len-prefixed "2".
  std::string tail = std::string("W") + std::string(7, '\0') + "\x0a" + "world_size" +
                     std::string(7, '\0') + "\x01" + "2";
  EXPECT_EQ(s.substr(s.size() - tail.size()), tail);
  EXPECT_EQ(s.find("output.dir"), std::string::npos);
  EXPECT_NE(s.find("training.lr"), std::string::npos);
}

TEST(FormatDouble, ShortestRoundTrip) {
  EXPECT_EQ(formatDouble(1e-4), "1e-4");  // shorter than 0.0001
  EXPECT_EQ(formatDouble(0.0001), "1e-4");
  EXPECT_EQ(formatDouble(0.001), "0.001");
  EXPECT_EQ(formatDouble(1e-7), "1e-7");
  EXPECT_EQ(formatDouble(2.0), "2.0");
  EXPECT_EQ(formatDouble(-0.0), "0.0");
  EXPECT_EQ(formatDouble(3e-4), "3e-4");
  EXPECT_EQ(formatDouble(-2.5e-10), "-2.5e-10");
  EXPECT_EQ(formatDouble(100.0), "100.0");
  EXPECT_EQ(formatDouble(1e22), "1e22");
  EXPECT_EQ(formatDouble(0.1 + 0.2), "0.30000000000000004");
  for (double v : {1e-300, 123.456, 6.02214076e23, 1.0 / 3})
    EXPECT_EQ(std::stod(formatDouble(v)), v);
}

TEST(PathSafe, MapsUnsafeBytesAndShortensLongValues) {
  EXPECT_EQ(pathSafe("Llama-2_7b.v1"), "Llama-2_7b.v1");
  EXPECT_EQ(pathSafe("a/b c"), "a_b_c");
  EXPECT_EQ(pathSafe(".."), "_.");
  EXPECT_EQ(pathSafe(".hidden"), "_hidden");
  EXPECT_EQ(pathSafe(""), "_");
  EXPECT_EQ(pathSafe("h\xc3\xa9"), "h__");
  std::string long_a(100, 'a'), long_b = std::string(99, 'a') + "b";
  EXPECT_EQ(pathSafe(long_a).size(), kMaxTagValueLen);
  EXPECT_EQ(pathSafe(long_a).substr(0, 55), std::string(55, 'a'));
  EXPECT_NE(pathSafe(long_a), pathSafe(long_b));
  EXPECT_EQ(pathSafe(std::string(64, 'x')), std::string(64, 'x'));
}

TEST(FormatTag, DefaultFmtAndLists) {
  Config cfg = configFrom(kModelToml);
  EXPECT_EQ(formatTag(cfg, 2, kDefaultTagFmt), "tinytest.ws2." + configHash(cfg, 2));
}

// ---- prepareRunDir ------------------------------------------------------------

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PrepareRunDir, CreatesOnceThenReuses) {
  test::TempDir tmp;
  Config cfg = configFrom(kModelToml);
  RunDir a = prepareRunDir(cfg, 2, tmp.path(), false);
  EXPECT_TRUE(a.created);
  EXPECT_EQ(a.path, tmp.path() + "/" + a.tag);
  std::string text = slurp(a.path + "/run.toml");
  EXPECT_NE(text.find("# config_hash = " + configHash(cfg, 2)), std::string::npos);
  // run.toml round-trips to the same experiment.
  EXPECT_EQ(configHash(Config::fromString(text, "run.toml", {}), 2), configHash(cfg, 2));

  // Same experiment, different non-experiment key: same dir, not rewritten.
  Config cfg2 = configFrom(kModelToml, {"metrics.log_every=7"});
  RunDir b = prepareRunDir(cfg2, 2, tmp.path(), false);
  EXPECT_FALSE(b.created);
  EXPECT_EQ(b.path, a.path);
  EXPECT_EQ(slurp(a.path + "/run.toml"), text);
  // No temp files left behind.
  auto entries = std::distance(std::filesystem::directory_iterator(a.path),
                               std::filesystem::directory_iterator());
  EXPECT_EQ(entries, 1);
}

TEST(PrepareRunDir, DetectsCollisions) {
  test::TempDir tmp;
  // A fmt without {hash}: different configs map to the same directory.
  Config a = configFrom(kModelToml, {"output.sweep_fmt=\"{model.name}\""});
  Config b = configFrom(kModelToml, {"output.sweep_fmt=\"{model.name}\"", "training.lr=0.5"});
  EXPECT_TRUE(prepareRunDir(a, 2, tmp.path(), false).created);
  try {
    prepareRunDir(b, 2, tmp.path(), false);
    FAIL() << "expected a collision";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg, "tag collision: " + tmp.path() + "/tinytest/run.toml records config_hash " +
                       configHash(a, 2) + " (world_size 2) but this run has config_hash " +
                       configHash(b, 2) +
                       " (world_size 2); include {hash} in output.sweep_fmt or choose another "
                       "output.dir");
  }
  // Same config, other world size: also a collision.
  EXPECT_THROW(prepareRunDir(a, 4, tmp.path(), false), ConfigError);
  EXPECT_FALSE(prepareRunDir(a, 2, tmp.path(), false).created);
}

TEST(PrepareRunDir, NoSweepDirWritesIntoOutputDir) {
  test::TempDir tmp;
  Config cfg = configFrom(kModelToml);
  RunDir rd = prepareRunDir(cfg, 1, tmp.path() + "/flat", true);
  EXPECT_EQ(rd.path, tmp.path() + "/flat");
  EXPECT_TRUE(std::filesystem::exists(tmp.path() + "/flat/run.toml"));
  EXPECT_THROW(
      prepareRunDir(configFrom(kModelToml, {"training.lr=1.0"}), 1, tmp.path() + "/flat", true),
      ConfigError);
}

TEST(PrepareRunDir, HandWrittenRunTomlIsHashed) {
  test::TempDir tmp;
  Config cfg = configFrom(kModelToml);
  std::string dir = tmp.path() + "/" + formatTag(cfg, 1, kDefaultTagFmt);
  test::writeFile(dir + "/run.toml", kModelToml);
  EXPECT_FALSE(prepareRunDir(cfg, 1, tmp.path(), false).created);
  test::writeFile(dir + "/run.toml", "this is not toml [");
  EXPECT_THROW(prepareRunDir(cfg, 1, tmp.path(), false), ConfigError);
}

TEST(PrepareRunDir, ConcurrentCallersCreateExactlyOnce) {
  test::TempDir tmp;
  Config cfg = configFrom(kModelToml);
  std::atomic<int> created{0}, errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      try {
        created += prepareRunDir(cfg, 8, tmp.path(), false).created;
      } catch (...) {
        ++errors;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(created, 1);
  EXPECT_EQ(errors, 0);
}

}  // namespace
}  // namespace ftb
