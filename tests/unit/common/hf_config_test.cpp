// model.from_pretrained: config.json -> model.* keys (common/hf_config.h).
#include "common/hf_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/run_config.h"

namespace ftb {
namespace {
namespace fs = std::filesystem;

constexpr const char* kLlama = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 576,
  "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
  "intermediate_size": 1536, "vocab_size": 49152, "max_position_embeddings": 8192,
  "rope_theta": 100000, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
  "hidden_act": "silu", "rope_scaling": null})";

class HfConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ftb_hf_config_test_XXXXXX";
    dir_ = fs::path(mkdtemp(tmpl)) / "SmolLM2-135M";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_.parent_path()); }
  void write(const std::string& json) { std::ofstream(dir_ / "config.json") << json; }
  Config load(const std::string& toml, std::vector<std::string> overrides = {}) {
    overrides.push_back("model.from_pretrained=" + dir_.string());
    return Config::fromString(toml, "run.toml", overrides);
  }
  std::string errorOf(const std::string& toml, std::vector<std::string> overrides = {}) {
    try {
      load(toml, std::move(overrides));
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.exitCode(), 2);
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(HfConfigTest, ShapeComesFromConfigJsonNotThePreset) {
  write(kLlama);
  Config cfg = load("");  // model.name defaults to the "tiny" preset, which must not apply
  EXPECT_EQ(cfg.getInt("model.dim"), 576);
  EXPECT_EQ(cfg.getInt("model.n_layers"), 30);
  EXPECT_EQ(cfg.getInt("model.n_heads"), 9);
  EXPECT_EQ(cfg.getInt("model.n_kv_heads"), 3);
  EXPECT_EQ(cfg.getInt("model.ffn_dim"), 1536);
  EXPECT_EQ(cfg.getInt("model.vocab_size"), 49152);
  EXPECT_EQ(cfg.getInt("model.max_seq_len"), 8192);
  EXPECT_DOUBLE_EQ(cfg.getFloat("model.rope_theta"), 100000.0);
  EXPECT_DOUBLE_EQ(cfg.getFloat("model.norm_eps"), 1e-5);
  EXPECT_TRUE(cfg.getBool("model.tie_embeddings"));
  EXPECT_EQ(cfg.getString("model.name"), "SmolLM2-135M");
  EXPECT_EQ(cfg.where("model.dim"), (dir_ / "config.json").string());
}

TEST_F(HfConfigTest, APresetsNameGivesWayToTheDirectorysAUsersOwnLabelIsKept) {
  write(kLlama);
  // configs/runs/tiny.toml with model.from_pretrained on the command line: labelled by the
  // model it runs, not by the preset it no longer uses.
  Config preset_named = load("[model]\nname = \"tiny\"\n");
  EXPECT_EQ(preset_named.getString("model.name"), "SmolLM2-135M");
  EXPECT_EQ(preset_named.getInt("model.dim"), 576);
  EXPECT_EQ(load("[model]\nname = \"my-smol\"\n").getString("model.name"), "my-smol");
  EXPECT_EQ(load("", {"model.name=tiny"}).getString("model.name"), "SmolLM2-135M");
}

TEST_F(HfConfigTest, DisagreeingKeyNamesBothValuesAgreeingKeyIsAccepted) {
  write(kLlama);
  std::string e = errorOf("[model]\nn_kv_heads = 9\n");
  EXPECT_NE(e.find("run.toml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("'model.n_kv_heads': 9 disagrees with"), std::string::npos) << e;
  EXPECT_NE(e.find("which gives 3"), std::string::npos) << e;
  EXPECT_EQ(load("[model]\nn_kv_heads = 3\n").getInt("model.n_kv_heads"), 3);
}

TEST_F(HfConfigTest, UnsupportedArchitectureAndFeaturesAreRefused) {
  write(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64})");
  EXPECT_NE(errorOf("").find("unsupported architecture \"Qwen2ForCausalLM\""), std::string::npos);
  std::string rope = kLlama;
  rope.replace(rope.find("\"rope_scaling\": null"), 20, "\"rope_scaling\": {\"type\": \"llama3\"}");
  write(rope);
  std::string e = errorOf("");
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("field \"rope_scaling\""), std::string::npos) << e;
  write("{\"architectures\": [\"LlamaForCausalLM\"]}");
  EXPECT_NE(errorOf("").find("field \"hidden_size\": missing"), std::string::npos);
  write("not json");
  EXPECT_NE(errorOf("").find("invalid JSON"), std::string::npos);
}

// A resolved run.toml (every model.* key recorded) read back where the model directory
// is gone, as sweep_tagger aggregate does on another machine, keeps its keys.
// data.seq_len above a pretrained model's length: the hint used to say "or raise
// model.max_seq_len", which applyPretrained then refuses. It now says the one way that works.
TEST_F(HfConfigTest, SeqLenAboveAPretrainedModelsLengthHintsAWayThatWorks) {
  write(kLlama);  // max_position_embeddings 8192
  const std::string refusal = refusalOf(load("", {"data.seq_len=16384"}), 1);
  EXPECT_EQ(refusal,
            "config error: override 'data.seq_len=16384': key 'data.seq_len': "
            "seq_len(16384) exceeds model.max_seq_len(8192)\n"
            "  hint: lower data.seq_len to at most 8192 (model.max_seq_len is "
            "max_position_embeddings of " +
                (dir_ / "config.json").string() +
                ": a pretrained model's length cannot be raised)");
  EXPECT_EQ(refusalOf(load("", {"data.seq_len=8192"}), 1), "");  // the hint, followed
  // What the old hint said is refused.
  EXPECT_NE(errorOf("", {"data.seq_len=16384", "model.max_seq_len=16384"})
                .find("16384 disagrees with " + (dir_ / "config.json").string()),
            std::string::npos);
  // A model without from_pretrained can still be raised.
  const std::string own = refusalOf(
      Config::fromString("", "run.toml", {"data.seq_len=16384", "model.max_seq_len=8192"}), 1);
  EXPECT_NE(own.find("hint: lower data.seq_len to at most 8192 or raise model.max_seq_len"),
            std::string::npos)
      << own;
}

TEST_F(HfConfigTest, RecordedRunTomlNeedsNoConfigJson) {
  write(kLlama);
  std::string recorded = load("").toToml();
  fs::remove(dir_ / "config.json");
  Config again = Config::fromString(recorded, "run.toml", {});
  EXPECT_EQ(again.getInt("model.dim"), 576);
  EXPECT_NE(errorOf("").find("config.json"), std::string::npos);  // keys unset: required
}

}  // namespace
}  // namespace ftb
