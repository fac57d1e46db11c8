// The key table (common/run_keys.h): each run-config key is declared once, and the
// schema, the members' values and --help-config come from its row.
#include "common/run_keys.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/error.h"

namespace ftb {
namespace {

// A struct member with an in-class default would be a second default beside its row's, free
// to disagree (the struct once said metrics.skip_first_steps = 0 and the schema 2). The
// members hold T{} until fromConfig fills them.
TEST(ConfigKeys, MembersDeclareNoDefaults) {
  int checked = 0;
  for (const KeyRow& row : runKeyRows()) {
    if (!row.member_value_initialised) continue;
    ++checked;
    EXPECT_TRUE(row.member_value_initialised())
        << row.member << " has an in-class default; the default of " << row.spec.key
        << " lives in its row (common/run_keys.cpp) only";
  }
  EXPECT_GT(checked, 50);
}

TEST(ConfigKeys, EveryRowFillsAMemberOrNamesItsReader) {
  for (const KeyRow& row : runKeyRows()) {
    const bool has_member = static_cast<bool>(row.fill);
    EXPECT_NE(has_member, !row.read_by.empty()) << row.spec.key;
    EXPECT_EQ(has_member, !row.member.empty()) << row.spec.key;
    EXPECT_EQ(has_member, static_cast<bool>(row.member_value_initialised)) << row.spec.key;
  }
}

TEST(ConfigKeys, TheSchemaIsTheRowsInOrder) {
  const auto& rows = runKeyRows();
  const auto& keys = trainerSchema().keys();
  ASSERT_EQ(rows.size(), keys.size());
  std::set<std::string> members;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].spec.key, keys[i].key);
    EXPECT_EQ(rows[i].spec.doc, keys[i].doc);
    if (!rows[i].member.empty())
      EXPECT_TRUE(members.insert(rows[i].member).second) << rows[i].member << " filled twice";
  }
}

Config tinyModelConfig(std::vector<std::string> overrides) {
  for (const char* k : {"model.name=t", "model.dim=8", "model.n_layers=2", "model.n_heads=2",
                        "model.n_kv_heads=2", "model.ffn_dim=16", "model.vocab_size=32",
                        "model.max_seq_len=16", "data.seq_len=16"})
    overrides.insert(overrides.begin(), k);
  return Config::fromString("", "run.toml", overrides);
}

// The defaults a run gets are the rows': the two the struct and the schema once disagreed
// on, and one of each conversion.
TEST(ConfigKeys, ARunGetsTheRowsDefaults) {
  const TrainConfig tc = TrainConfig::fromConfig(tinyModelConfig({}), 2);
  EXPECT_EQ(tc.metrics.skip_first_steps, 2);
  EXPECT_EQ(tc.layout.dp_replicate, 2);  // 0 in the row: derived from the world size
  EXPECT_EQ(tc.comm.bucket_bytes, 25.0 * (1 << 20));
  EXPECT_EQ(tc.lora.targets, (std::vector<std::string>{"q", "v"}));
  EXPECT_EQ(tc.training.activation_checkpointing, 0);
  EXPECT_EQ(tc.checkpoint.resume, "auto");
  EXPECT_TRUE(tc.checkpoint.save_final);
  EXPECT_EQ(tc.pipeline.stages, 1);
  EXPECT_EQ(tc.pipeline.split, (std::vector<int64_t>{2}));
}

TEST(ConfigKeys, AStringOutsideItsChoicesIsRefusedWithTheList) {
  try {
    TrainConfig::fromConfig(tinyModelConfig({"training.dtype=\"fp16\""}), 1);
    FAIL() << "fp16 accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("training.dtype"), std::string::npos) << what;
    EXPECT_NE(what.find("expected one of \"fp32\" | \"bf16\", got \"fp16\""), std::string::npos)
        << what;
  }
}

TEST(ConfigKeys, HelpConfigShowsTheChoices) {
  const std::string md = schemaMarkdown(trainerSchema());
  EXPECT_NE(md.find("| `parallel.pp_schedule` | string: \"gpipe\" \\| \"1f1b\" \\| "
                    "\"interleaved_1f1b\" \\| \"zb_h1\" |"),
            std::string::npos)
      << md;
}

}  // namespace
}  // namespace ftb

namespace ftb {
namespace {

// PEFT users write target_modules as a list; both spellings are one value and one tag.
TEST(ConfigKeys, LoraTargetsTakeATomlListOrACommaString) {
  const Config list = Config::fromString("[lora]\nrank = 4\ntargets = [\"q\", \"v_proj\"]\n",
                                         "run.toml", {});
  EXPECT_EQ(list.getString("lora.targets"), "q,v_proj");
  const Config text = Config::fromString("[lora]\nrank = 4\ntargets = \"q,v_proj\"\n", "run.toml", {});
  EXPECT_EQ(text.getString("lora.targets"), "q,v_proj");
  const Config over = Config::fromString("", "run.toml", {"lora.targets=[\"k\", \"o\"]"});
  EXPECT_EQ(over.getString("lora.targets"), "k,o");
  try {
    Config::fromString("[lora]\ntargets = [1, 2]\n", "run.toml", {});
    FAIL() << "an int list accepted as targets";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("lora.targets"), std::string::npos) << e.what();
  }
}

// A bf16 LoRA run keeps a bf16 base unless told otherwise; a full finetuning run's base is
// not a LoRA base, and an fp32 run keeps the default (and its tag).
TEST(ConfigKeys, LoraBaseDtypeFollowsTrainingDtypeWithAdapters) {
  EXPECT_EQ(Config::fromString("", "r", {"lora.rank=4", "training.dtype=\"bf16\""})
                .getString("lora.base_dtype"),
            "bf16");
  EXPECT_EQ(Config::fromString("", "r", {"training.dtype=\"bf16\""}).getString("lora.base_dtype"),
            "fp32");
  EXPECT_EQ(Config::fromString("", "r", {"lora.rank=4"}).getString("lora.base_dtype"), "fp32");
  EXPECT_EQ(Config::fromString("", "r",
                               {"lora.rank=4", "training.dtype=\"bf16\"", "lora.base_dtype=\"fp32\""})
                .getString("lora.base_dtype"),
            "fp32");
  EXPECT_EQ(Config::fromString("", "r", {"lora.rank=4", "training.dtype=\"bf16\""})
                .where("lora.base_dtype"),
            "default");
}

}  // namespace
}  // namespace ftb
