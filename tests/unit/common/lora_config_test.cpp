// The lora.* keys: parsed as PEFT users spell them, refused with the key and a hint.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/run_config.h"
#include "common/tag.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::kTinyRun;

TrainConfig load(const std::vector<std::string>& overrides) {
  return TrainConfig::fromConfig(Config::load(kTinyRun, overrides), 1);
}
using test::refusal;

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
  const std::string tp_dropout =
      refusalOf(Config::load(kTinyRun, {"lora.rank=4", "lora.dropout=0.1", "parallel.tp=2"}), 2);
  EXPECT_NE(tp_dropout.find("lora.dropout"), std::string::npos) << tp_dropout;
}

// lora-v1 reduces to counting by hand on a small model: forward 2N + 2Na, input gradients
// 2N + 2Na less block 0's q/k/v inputs, weight gradients 2Na, attention as full-v1.
TEST(LoraConfig, FlopsFollowWhatIsComputed) {
  const TrainConfig full = load({});
  const TrainConfig lora = load({"lora.rank=4", "lora.targets=\"q,o\""});
  const ModelArgs& m = full.model;
  const FlopsCount f = trainingFlops(m, full.lora, full.data.seq_len);
  EXPECT_EQ(f.formula, "full-v1");
  EXPECT_EQ(f.per_token, m.flopsPerToken(full.data.seq_len));
  EXPECT_EQ(f.trainable_params, m.numParams());
  const int64_t D = m.dim, q = m.n_heads * m.headDim(), kv = m.n_kv_heads * m.headDim();
  const int64_t na = m.n_layers * 4 * ((D + q) + (q + D));
  EXPECT_EQ(loraParams(m, lora.lora), na);
  const FlopsCount l = trainingFlops(m, lora.lora, lora.data.seq_len);
  EXPECT_EQ(l.formula, "lora-v1");
  EXPECT_EQ(l.trainable_params, na);
  EXPECT_EQ(l.total_params, m.numParams() + na);
  const double attention = 12.0 * m.n_layers * m.n_heads * m.headDim() * double(lora.data.seq_len);
  const double n = (m.flopsPerToken(lora.data.seq_len) - attention) / 6.0;
  const double skipped = double(q * D + 2 * kv * D) + double(4 * D);  // + q's A
  EXPECT_DOUBLE_EQ(l.per_token, 4 * n + 6 * double(na) - 2 * skipped + attention);
  EXPECT_LT(l.per_token, f.per_token);
}

// The other conventions by hand: causal halves the attention term; the hardware count adds
// each recomputed block's forward (2 per block weight and norm weight, 2 per adapter
// parameter, 4·H·hd·T), for every n-th block with activation checkpointing n and every
// block under ZeRO-3.
TEST(LoraConfig, CausalAndHardwareFlopsCountWhatTheyName) {
  const TrainConfig plain = load({});
  const ModelArgs& m = plain.model;
  const double T = double(plain.data.seq_len), L = double(m.n_layers);
  const double attention = 12.0 * L * double(m.n_heads * m.headDim()) * T;
  const FlopsCount f = trainingFlops(plain);
  EXPECT_DOUBLE_EQ(f.per_token_causal, f.per_token - attention / 2);
  EXPECT_EQ(f.per_token_hardware, f.per_token);  // nothing recomputed
  const double block_fwd =
      2.0 * double(m.blockMatrixParams() + 2 * m.dim) + 4.0 * double(m.n_heads * m.headDim()) * T;
  EXPECT_DOUBLE_EQ(m.blockForwardFlops(plain.data.seq_len), block_fwd);
  ASSERT_GE(m.n_layers, 2);
  const TrainConfig every2 = load({"training.activation_checkpointing=\"every_2\""});
  EXPECT_EQ(recomputedBlocks(every2, L), std::ceil(L / 2));
  EXPECT_DOUBLE_EQ(trainingFlops(every2).per_token_hardware,
                   f.per_token + std::ceil(L / 2) * block_fwd);
  const TrainConfig lora =
      load({"lora.rank=4", "lora.targets=\"q,o\"", "training.activation_checkpointing=\"full\""});
  const double na_block = double(loraParams(m, lora.lora)) / L;
  const FlopsCount l = trainingFlops(lora);
  EXPECT_DOUBLE_EQ(l.per_token_hardware, l.per_token + L * (block_fwd + 2 * na_block));
  EXPECT_DOUBLE_EQ(l.per_token_causal, l.per_token - attention / 2);
  const TrainConfig zero3 = TrainConfig::fromConfig(
      Config::load(kTinyRun, {"parallel.dp_shard=2", "parallel.zero_stage=3"}), 2);
  EXPECT_EQ(recomputedBlocks(zero3, L), L);
  EXPECT_DOUBLE_EQ(trainingFlops(zero3).per_token_hardware, f.per_token + L * block_fwd);
}

// One shape per target for the model, its checkpoints, the PEFT export, the FLOPs and the
// estimator: the base weight's in/out features, which together make up a block's matrices.
TEST(LoraConfig, TargetShapesAreTheBlocksWeights) {
  ModelArgs m = load({}).model;
  m.n_kv_heads = m.n_heads / 2;  // grouped-query: k and v narrower than q
  m.ffn_dim = 3 * m.dim;
  const int64_t D = m.dim, q = m.n_heads * m.headDim(), kv = m.n_kv_heads * m.headDim();
  const int64_t F = m.ffn_dim;
  using InOut = std::pair<int64_t, int64_t>;  // kLoraTargets order: q k v o gate up down
  const std::vector<InOut> want = {{D, q}, {D, kv}, {D, kv}, {q, D}, {D, F}, {D, F}, {F, D}};
  int64_t matrices = 0;
  for (size_t t = 0; t < kLoraTargets.size(); ++t) {
    const LoraTargetShape s = loraTargetShape(m, kLoraTargets[t]);
    EXPECT_EQ(std::make_pair(s.in, s.out), want[t]) << kLoraTargets[t];
    matrices += s.in * s.out;
  }
  EXPECT_EQ(matrices, m.blockMatrixParams());
  EXPECT_THROW(loraTargetShape(m, "q_proj"), std::invalid_argument);
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
