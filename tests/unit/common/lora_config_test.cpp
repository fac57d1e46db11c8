// The lora.* keys: parsed as PEFT users spell them, refused with the key and a hint.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/config.h"
#include "common/run_config.h"
#include "common/tag.h"

namespace ftb {
namespace {

const char* const kTinyRun = FTB_SOURCE_DIR "/configs/runs/tiny.toml";

TrainConfig load(const std::vector<std::string>& overrides) {
  return TrainConfig::fromConfig(Config::load(kTinyRun, overrides), 1);
}
std::string refusal(const std::vector<std::string>& overrides) {
  return refusalOf(Config::load(kTinyRun, overrides), 1);
}

TEST(LoraConfig, DefaultsAreFullFinetuningWithPeftsLlamaTargets) {
  const TrainConfig tc = load({});
  EXPECT_FALSE(tc.lora.enabled());
  EXPECT_EQ(tc.lora.targets, (std::vector<std::string>{"q", "v"}));
  EXPECT_EQ(tc.lora.alpha, 8.0);
}

TEST(LoraConfig, TargetsAcceptShortAndHfNamesInAnyOrderAndAll) {
  EXPECT_EQ(load({"lora.rank=4", "lora.targets=\"down_proj, q,v_proj\""}).lora.targets,
            (std::vector<std::string>{"q", "v", "down"}));
  EXPECT_EQ(load({"lora.rank=4", "lora.targets=\"all\""}).lora.targets, kLoraTargets);
  EXPECT_TRUE(load({"lora.rank=4", "lora.targets=\"gate\""}).lora.hasTarget("gate"));
}

TEST(LoraConfig, BadValuesNameTheKeyAndHint) {
  const std::string bad_target = refusal({"lora.rank=4", "lora.targets=\"q,qk\""});
  EXPECT_NE(bad_target.find("lora.targets"), std::string::npos) << bad_target;
  EXPECT_NE(bad_target.find("\"qk\""), std::string::npos) << bad_target;
  EXPECT_NE(refusal({"lora.base_dtype=\"fp16\"", "lora.rank=4"}).find("lora.base_dtype"),
            std::string::npos);
  EXPECT_NE(refusal({"lora.rank=-1"}).find("lora.rank"), std::string::npos);
  EXPECT_NE(refusal({"lora.dropout=1.0"}).find("lora.dropout"), std::string::npos);
  EXPECT_NE(refusal({"lora.from_pretrained=\"/x\""}).find("lora.rank > 0"), std::string::npos);
  EXPECT_NE(refusal({"lora.base_dtype=\"bf16\""}).find("lora.rank > 0"), std::string::npos);
}

// Runs recorded before the lora.* keys existed keep their tags (SchemaTest.RenamedKeyHashes...
// pins the default config's hash); a LoRA run is a different experiment.
TEST(LoraConfig, KeysHashOnlyAwayFromTheirDefaults) {
  const std::string base = configHash(Config::load(kTinyRun, {}), 1);
  EXPECT_EQ(configHash(Config::load(kTinyRun, {"lora.alpha=8.0", "lora.targets=\"q,v\""}), 1),
            base);
  EXPECT_NE(configHash(Config::load(kTinyRun, {"lora.rank=8"}), 1), base);
  EXPECT_NE(configHash(Config::load(kTinyRun, {"lora.rank=8", "lora.alpha=16"}), 1),
            configHash(Config::load(kTinyRun, {"lora.rank=8"}), 1));
}

}  // namespace
}  // namespace ftb
