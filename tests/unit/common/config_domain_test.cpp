// Every numeric key has a domain in the schema, and a value outside it
// is refused (ConfigError, exit 2) naming the key, the value, the allowed range and where
// the value came from; values on the boundary are accepted. An invariant
// between two keys blames the one the user set.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/run_config.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::kTinyRun;

// The refusal text of `overrides` on tiny.toml at `world_size`, "" when accepted.
using test::refusal;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(ConfigDomain, EveryNumericKeyDeclaresADomain) {
  for (const KeySpec& k : trainerSchema().keys()) {
    bool numeric = k.type == ValueType::kInt || k.type == ValueType::kFloat;
    EXPECT_EQ(k.domain.declared, numeric) << k.key << ": add it with Schema::add(spec, domain)";
  }
}

// The values the issue found accepted (exit 0, a nan loss recorded "completed").
TEST(ConfigDomain, IssueCasesAreRefusedNamingKeyValueAndRange) {
  struct Case {
    const char* override_arg;
    const char* key;
    const char* value;
    const char* range;
  };
  const Case cases[] = {
      {"training.lr=nan", "training.lr", "nan", "a finite number >= 0"},
      {"training.lr=inf", "training.lr", "inf", "a finite number >= 0"},
      {"training.lr=-inf", "training.lr", "-inf", "a finite number >= 0"},
      {"training.lr=-1", "training.lr", "-1.0", "a finite number >= 0"},
      {"training.beta1=1.5", "training.beta1", "1.5", "a finite number in [0, 1)"},
      {"training.beta1=1", "training.beta1", "1.0", "a finite number in [0, 1)"},
      {"training.beta2=-0.1", "training.beta2", "-0.1", "a finite number in [0, 1)"},
      {"training.threads=-1", "training.threads", "-1", "an integer >= 0"},
      {"training.stop_after_seconds=-1", "training.stop_after_seconds", "-1.0",
       "a finite number >= 0"},
      {"training.eps=0", "training.eps", "0.0", "a finite number > 0"},
      {"parallel.zero_stage=4", "parallel.zero_stage", "4", "an integer in [0, 3]"},
      {"parallel.timeout_seconds=nan", "parallel.timeout_seconds", "nan", "a finite number > 0"},
      {"metrics.peak_tflops=-2", "metrics.peak_tflops", "-2.0", "a finite number >= 0"},
      {"model.norm_eps=0", "model.norm_eps", "0.0", "a finite number > 0"},
  };
  for (const Case& c : cases) {
    std::string msg = refusal({c.override_arg});
    const std::string want = std::string("config error: override '") + c.override_arg + "': key '" +
                             c.key + "': " + c.value + " is out of range: expected " + c.range;
    EXPECT_EQ(msg.substr(0, want.size()), want) << msg;
  }
}

// One value just outside each end of every declared domain, and nan/inf for every float
// key: each is refused naming the key and the range. The boundary itself passes the
// domain check (cross-key checks may still refuse it).
TEST(ConfigDomain, EveryKeyRefusesBothSidesOfItsRange) {
  int checked = 0;
  for (const KeySpec& k : trainerSchema().keys()) {
    if (!k.domain.declared) continue;
    const bool is_int = k.type == ValueType::kInt;
    const Domain& d = k.domain;
    std::vector<double> bad, good;
    if (std::isfinite(d.lo)) {
      bad.push_back(is_int ? d.lo - 1 : std::nextafter(d.lo, -HUGE_VAL));
      (d.lo_open ? bad : good).push_back(d.lo);
      if (d.lo_open) good.push_back(is_int ? d.lo + 1 : std::nextafter(d.lo, HUGE_VAL));
    }
    if (std::isfinite(d.hi)) {
      bad.push_back(d.hi_open ? d.hi : (is_int ? d.hi + 1 : std::nextafter(d.hi, HUGE_VAL)));
      good.push_back(d.hi_open ? (is_int ? d.hi - 1 : std::nextafter(d.hi, -HUGE_VAL)) : d.hi);
    }
    if (!is_int) {
      bad.push_back(std::nan(""));
      bad.push_back(HUGE_VAL);
      bad.push_back(-HUGE_VAL);
    }
    for (double v : bad) {
      Value value = is_int ? Value(static_cast<int64_t>(v)) : Value(v);
      const std::string arg = k.key + "=" + valueToString(value);
      try {
        Config::load(kTinyRun, {arg}).checkDomains();
        ADD_FAILURE() << arg << " accepted";
      } catch (const ConfigError& e) {
        EXPECT_EQ(e.exitCode(), 2);
        for (const std::string& part :
             {"override '" + arg + "'", "key '" + k.key + "'",
              valueToString(value) + " is out of range", d.describe(is_int)})
          EXPECT_TRUE(contains(e.what(), part)) << part << " not in: " << e.what();
      }
      ++checked;
    }
    for (double v : good) {
      Value value = is_int ? Value(static_cast<int64_t>(v)) : Value(v);
      const std::string arg = k.key + "=" + valueToString(value);
      EXPECT_NO_THROW(Config::load(kTinyRun, {arg}).checkDomains()) << arg;
    }
  }
  EXPECT_GT(checked, 60);  // 40-odd numeric keys, most with a lower bound
}

// A bad value in the run file is blamed at its file:line.
TEST(ConfigDomain, FileValueNamesFileAndLine) {
  Config cfg = Config::fromString("[training]\nmax_steps = 3\nbeta1 = 1.5\n", "run.toml", {});
  try {
    cfg.checkDomains();
    ADD_FAILURE() << "beta1 = 1.5 accepted";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(),
                         "run.toml:3: key 'training.beta1': 1.5 is out of range: "
                         "expected a finite number in [0, 1)"))
        << e.what();
  }
}

// Values on the edge of their domain run: the trainer accepts the whole config.
TEST(ConfigDomain, BoundaryValuesAreAcceptedByTheTrainer) {
  for (const char* arg :
       {"training.lr=0", "training.beta1=0", "training.beta2=0.999999", "training.threads=0",
        "training.stop_after_seconds=0", "training.weight_decay=0", "training.max_grad_norm=0",
        "metrics.skip_first_steps=0", "metrics.peak_tflops=0", "parallel.memory_limit_gb=0",
        "training.seed=0"})
    EXPECT_EQ(refusal({arg}), "") << arg;
  EXPECT_EQ(refusal({"parallel.zero_stage=3", "parallel.dp_shard=2"}, 2), "");
}

// The preset's n_heads no longer takes the blame for model.dim=66.
TEST(ConfigBlame, OverriddenDimIsBlamedNotThePresetsHeads) {
  std::string msg = refusal({"model.dim=66"});
  EXPECT_TRUE(contains(msg,
                       "override 'model.dim=66': key 'model.dim': n_heads(4) does not "
                       "divide dim(66); model.n_heads = 4 comes from preset "))
      << msg;
  EXPECT_TRUE(contains(msg, "configs/models/tiny.toml:5")) << msg;
  // The heads set by the user are blamed when the dim is the preset's.
  msg = refusal({"model.n_heads=3"});
  EXPECT_TRUE(contains(msg,
                       "key 'model.n_heads': n_heads(3) does not divide dim(64); "
                       "model.dim = 64 comes from preset "))
      << msg;
}

TEST(ConfigBlame, TensorParallelIsBlamedNotTheDefaultShardDegree) {
  std::string msg = refusal({"parallel.tp=3"}, 4);
  EXPECT_TRUE(contains(msg,
                       "override 'parallel.tp=3': key 'parallel.tp': dp_shard(1) * tp(3) "
                       "does not divide world_size(4); parallel.dp_shard = 1 is the default"))
      << msg;
  // dp_shard set by the user (tp the default) is blamed itself.
  msg = refusal({"parallel.dp_shard=3"}, 4);
  EXPECT_TRUE(contains(msg,
                       "key 'parallel.dp_shard': dp_shard(3) * tp(1) does not divide "
                       "world_size(4); parallel.tp = 1 is the default"))
      << msg;
  // Both set in the same place: the shard degree (first) as before, no origin note.
  msg = refusal({"parallel.dp_shard=3", "parallel.tp=1"}, 4);
  EXPECT_TRUE(contains(msg, "key 'parallel.dp_shard'")) << msg;
  EXPECT_FALSE(contains(msg, "is the default")) << msg;
}

}  // namespace
}  // namespace ftb

namespace ftb {
namespace {

// Found by fuzz_config: toml++ 3.3.0 reached __builtin_unreachable() (undefined
// behaviour) on a code point in U+00A1..U+0499 where it expects whitespace; common/toml.h
// compiles that classifier with the upstream fix, so the input is refused (exit 2).
TEST(TomlReader, NonAsciiWhereWhitespaceIsExpectedIsRefusedNotUndefined) {
  for (const char* text : {"[training]\nlr = \xcf\x9a-3\n", "s = \"\"\"\\\n\xc2\xa7\"\"\"\n"}) {
    try {
      Config::fromString(text, "run.toml", {});
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("run.toml:"), std::string::npos) << e.what();
      EXPECT_EQ(e.exitCode(), 2);
    }
  }
}

// Found by fuzz_config: an array of tables holding a float in (0, 1) made toml++ 3.3.0's
// formatter cast a negative log10 to size_t (undefined behaviour) when the value was
// spelled for the error message; common/toml.cpp spells arrays and tables itself.
TEST(TomlReader, ArrayOfTablesWithASmallFloatIsRefusedAndSpelled) {
  try {
    Config::fromString("[[training]]\nlr = 1e-3\n", "run.toml", {});
    ADD_FAILURE() << "an array of tables was accepted as a config section";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    EXPECT_NE(std::string(e.what()).find("training"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ftb
