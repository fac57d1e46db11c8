// ModelArgs counts against published parameter counts (computed by hand below), the
// torchtitan flops/token formula by hand, and TrainConfig invariant errors that carry
// the numbers.
#include "common/run_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::kTinyRun;

ModelArgs presetArgs(const std::string& name) {
  Config cfg = Config::load(kTinyRun, {"model.name=\"" + name + "\""});
  return modelArgsFromConfig(cfg);
}

TEST(ModelArgs, PresetsLoadTheirShapes) {
  ModelArgs m = presetArgs("llama-3-8b");
  EXPECT_EQ(m.name, "llama-3-8b");
  EXPECT_EQ(m.dim, 4096);
  EXPECT_EQ(m.n_layers, 32);
  EXPECT_EQ(m.n_heads, 32);
  EXPECT_EQ(m.n_kv_heads, 8);
  EXPECT_EQ(m.ffn_dim, 14336);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.headDim(), 128);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_TRUE(presetArgs("smollm2-135m").tie_embeddings);
}

// Llama-2-7B: embed 32000*4096 = 131,072,000; per layer attention 4*4096^2 = 67,108,864,
// MLP 3*4096*11008 = 135,266,304, norms 2*4096 -> 202,383,360; *32 = 6,476,267,520;
// final norm 4096; untied output 131,072,000. Total 6,738,415,616 (HF model card: 6.74 B).
TEST(ModelArgs, NumParamsLlama2_7B) {
  ModelArgs m = presetArgs("llama-2-7b");
  EXPECT_EQ(m.numParams(), 6738415616LL);
  EXPECT_EQ(m.numEmbeddingParams(), 131072000LL);
}

// SmolLM2-135M (tied): head_dim 64, kv dim 192. Attention 2*576^2 + 2*576*192 = 884,736,
// MLP 3*576*1536 = 2,654,208, norms 1152 -> 3,540,096 per layer; *30 = 106,202,880;
// embed 49152*576 = 28,311,552; final norm 576. Total 134,515,008.
TEST(ModelArgs, NumParamsSmolLM2_135M_Tied) {
  ModelArgs m = presetArgs("smollm2-135m");
  EXPECT_EQ(m.numParams(), 134515008LL);
  ModelArgs untied = m;
  untied.tie_embeddings = false;
  EXPECT_EQ(untied.numParams(), 134515008LL + 28311552LL);
}

// Llama-3-8B: embed 128256*4096 = 525,336,576 (x2, untied); attention 2*4096^2 +
// 2*4096*1024 = 41,943,040, MLP 3*4096*14336 = 176,160,768, norms 8192 -> 218,112,000
// per layer; *32 = 6,979,584,000; + 4096. Total 8,030,261,248.
TEST(ModelArgs, NumParamsLlama3_8B) {
  EXPECT_EQ(presetArgs("llama-3-8b").numParams(), 8030261248LL);
}

// The C++ model registers exactly numParams() parameters is checked in export_test.cpp.

// flops/token = 6 * N_nonembed + 12 * L * H * hd * T.
TEST(ModelArgs, FlopsPerTokenByHand) {
  // Llama-2-7B, T = 4096: N = 6,738,415,616 - 131,072,000 = 6,607,343,616 (output kept);
  // 6N = 39,644,061,696; 12*32*32*128*4096 = 6,442,450,944; sum 46,086,512,640.
  EXPECT_DOUBLE_EQ(presetArgs("llama-2-7b").flopsPerToken(4096), 46086512640.0);
  // SmolLM2 (tied), T = 2048: the output GEMM still counts, so N = 134,515,008;
  // 6N = 807,090,048; 12*30*9*64*2048 = 424,673,280; sum 1,231,763,328.
  EXPECT_DOUBLE_EQ(presetArgs("smollm2-135m").flopsPerToken(2048), 1231763328.0);
}

// Expects `fn` to throw ConfigError with every string of `parts` in its message.
template <typename Fn>
void expectConfigError(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' in: " << msg;
    EXPECT_EQ(e.exitCode(), 2);
  }
}

TrainConfig load(const std::vector<std::string>& overrides, int world_size) {
  return TrainConfig::fromConfig(Config::load(kTinyRun, overrides), world_size);
}

// parallel.local_collectives: "auto" (the default) or "off"; anything else is refused
// naming the key and the choices (exit 2).
TEST(TrainConfig, LocalCollectivesIsAutoOrOff) {
  EXPECT_EQ(load({}, 1).comm.local_collectives, "auto");
  EXPECT_EQ(load({"parallel.local_collectives=\"off\""}, 1).comm.local_collectives, "off");
  expectConfigError(
      [] { load({"parallel.local_collectives=\"shm\""}, 1); },
      {"parallel.local_collectives", "expected one of \"auto\" | \"off\"", "got \"shm\""});
}

// training.optimizer_in_backward: one backward per step, no clipping by the global norm, no
// pipeline, DDP only; each refusal names the key that conflicts and the technique (exit 2).
TEST(TrainConfig, OptimizerInBackwardRefusesWhatItCannotHold) {
  const std::string on = "training.optimizer_in_backward=true", no_clip = "training.max_grad_norm=0";
  EXPECT_TRUE(load({on, no_clip}, 1).training.optimizer_in_backward);
  EXPECT_TRUE(load({on, no_clip, "parallel.tp=2"}, 4).training.optimizer_in_backward);
  expectConfigError([&] { load({on}, 1); },
                    {"training.max_grad_norm", "optimizer_in_backward", "max_grad_norm = 0"});
  expectConfigError([&] { load({on, no_clip, "training.grad_accum_steps=2"}, 1); },
                    {"training.grad_accum_steps", "one backward", "micro_batch_size"});
  expectConfigError([&] { load({on, no_clip, "parallel.pp=2"}, 2); },
                    {"parallel.pp", "optimizer_in_backward"});
  EXPECT_TRUE(load({on, no_clip, "parallel.dp_shard=2", "parallel.zero_stage=3"}, 2)
                  .training.optimizer_in_backward);
  expectConfigError([&] { load({on, no_clip, "parallel.dp_shard=2", "parallel.zero_stage=2"}, 2); },
                    {"parallel.zero_stage", "optimizer_in_backward", "zero_stage = 0"});
  expectConfigError(
      [&] {
        load({on, no_clip, "parallel.dp_shard=2", "parallel.dp_replicate=2", "parallel.zero_stage=3"},
             4);
      },
      {"parallel.dp_replicate", "HSDP"});
}

// training.cuda_graphs: one GPU, one static micro-batch a step, nothing the host does inside
// the step; each refusal names the key that conflicts and says why (exit 2). (A CPU device
// chosen by "auto": tests/e2e/trainer/test_memory_techniques.py.)
TEST(TrainConfig, CudaGraphsRefuseWhatAGraphCannotReplay) {
  const std::string on = "training.cuda_graphs=true", gpu = "training.device=\"cuda\"";
  EXPECT_TRUE(load({on, gpu}, 1).training.cuda_graphs);
  EXPECT_FALSE(load({gpu}, 1).training.cuda_graphs);
  expectConfigError(
      [&] {
        load({on, "training.device=\"cpu\""}, 1);
      },
      {"training.cuda_graphs", "training.device", "on a GPU"});
  expectConfigError(
      [&] {
        load({on, gpu}, 2);
      },
      {"training.cuda_graphs", "2 ranks", "one rank per configuration"});
  expectConfigError(
      [&] {
        load({on, gpu, "training.grad_accum_steps=2"}, 1);
      },
      {"training.grad_accum_steps", "one micro-batch", "micro_batch_size"});
  expectConfigError(
      [&] {
        load({on, gpu, "data.padding=\"longest\""}, 1);
      },
      {"data.padding", "fixed", "max_length"});
  expectConfigError(
      [&] {
        load({on, gpu, "lora.rank=8", "lora.dropout=0.1"}, 1);
      },
      {"lora.dropout", "drawn on the host"});
  EXPECT_TRUE(load({on, gpu, "lora.rank=8"}, 1).training.cuda_graphs);
  expectConfigError(
      [&] {
        load({on, gpu, "training.optimizer_in_backward=true", "training.max_grad_norm=0"}, 1);
      },
      {"training.cuda_graphs", "optimizer_in_backward"});
}

TEST(TrainConfig, KvHeadsMustDivideHeads) {
  expectConfigError(
      [] {
        load({"model.n_heads=4", "model.n_kv_heads=3"}, 1);
      },
      {"model.n_kv_heads", "n_kv_heads(3) does not divide n_heads(4)",
       "override 'model.n_kv_heads=3'"});
  expectConfigError([] { load({"model.n_heads=3"}, 1); }, {"n_heads(3) does not divide dim(64)"});
  // head_dim 64/8 = 8 is even, kv 2 | 8: fine.
  EXPECT_EQ(load({"model.n_heads=8"}, 1).model.headDim(), 8);
}

TEST(TrainConfig, ParallelProductMustEqualWorldSize) {
  expectConfigError([] { load({"parallel.dp_replicate=3"}, 4); },
                    {"parallel.dp_replicate",
                     "dp_replicate(3) * dp_shard(1) * tp(1) = 3 does not equal world_size(4)"});
  expectConfigError([] { load({"parallel.tp=2"}, 3); },
                    {"dp_shard(1) * tp(2) does not divide world_size(3)"});
  expectConfigError([] { load({"parallel.dp_shard=2"}, 5); },
                    {"dp_shard(2) * tp(1) does not divide world_size(5)"});
  // Found by fuzz_config: degrees whose product overflows int64 are refused, not UB.
  expectConfigError(
      [] {
        load({"parallel.dp_shard=4611686018413693952", "parallel.tp=4"}, 4);
      },
      {"dp_shard(4611686018413693952) * tp(4) does not divide world_size(4)"});
  expectConfigError(
      [] {
        load({"parallel.dp_replicate=4611686018413693952", "parallel.dp_shard=2", "parallel.tp=2"},
             4);
      },
      {"= more than 2^63 does not equal world_size(4)"});
  // dp_replicate = 0 derives the data-parallel size from the world.
  TrainConfig c = load({}, 4);
  EXPECT_EQ(c.layout.dp_replicate, 4);
  EXPECT_EQ(c.layout.dpSize(), 4);
  EXPECT_EQ(c.globalBatch(), 2 * 1 * 4);
}

TEST(TrainConfig, GlobalBatchMustSplitIntoMicroBatches) {
  // micro_batch_size 2 (tiny.toml) * dp 2 = 4 samples per micro-step.
  expectConfigError([] { load({"training.global_batch_size=6"}, 2); },
                    {"training.global_batch_size", "global_batch_size(6)", "micro_batch_size(2)",
                     "data-parallel size(2) = 4", "world_size(2)"});
  TrainConfig c = load({"training.global_batch_size=12"}, 2);
  EXPECT_EQ(c.training.grad_accum_steps, 3);
  EXPECT_EQ(c.globalBatch(), 12);
  expectConfigError(
      [] {
        load({"training.global_batch_size=12", "training.grad_accum_steps=2"}, 2);
      },
      {"grad_accum_steps(2) contradicts global_batch_size(12)", "= 3"});
  EXPECT_EQ(load({"training.global_batch_size=12", "training.grad_accum_steps=3"}, 2)
                .training.grad_accum_steps,
            3);
}

TEST(TrainConfig, TensorParallelMustDivideTheModel) {
  // tiny: n_heads 4, n_kv_heads 2, ffn_dim 192, vocab 512.
  expectConfigError([] { load({"parallel.tp=3"}, 3); },
                    {"parallel.tp", "tp(3) does not divide n_heads(4)"});
  expectConfigError([] { load({"parallel.tp=4"}, 4); }, {"tp(4) does not divide n_kv_heads(2)"});
  expectConfigError(
      [] {
        load({"parallel.tp=2", "model.ffn_dim=191"}, 2);
      },
      {"tp(2) does not divide ffn_dim(191)"});
  expectConfigError(
      [] {
        load({"parallel.tp=2", "model.vocab_size=511"}, 2);
      },
      {"tp(2) does not divide vocab_size(511)"});
  // tp = 2 on 4 ranks: 2 data-parallel replicas; the global batch counts dp ranks only.
  TrainConfig c = load({"parallel.tp=2"}, 4);
  EXPECT_EQ(c.layout.dp_replicate, 2);
  EXPECT_EQ(c.globalBatch(), 2 * 1 * 2);
  expectConfigError(
      [] {
        load({"parallel.tp=2", "training.global_batch_size=6"}, 4);
      },
      {"global_batch_size(6)", "data-parallel size(2) = 4", "tp(2)"});
  expectConfigError(
      [] {
        load({"parallel.zero_stage=1", "parallel.dp_shard=2", "training.optimizer=\"adafactor\""},
             2);
      },
      {"training.optimizer", "zero_stage(1)"});
  // ZeRO without a shard degree over several replicas would run plain DDP: refused.
  expectConfigError([] { load({"parallel.zero_stage=3"}, 2); },
                    {"parallel.zero_stage", "dp_shard", "plain DDP"});
}

TEST(TrainConfig, OtherInvariantsNameTheNumbers) {
  expectConfigError([] { load({"data.seq_len=300"}, 1); },
                    {"seq_len(300) exceeds model.max_seq_len(256)"});
  expectConfigError([] { load({"training.micro_batch_size=0"}, 1); },
                    {"0 is out of range: expected an integer >= 1"});
  expectConfigError([] { load({"training.activation_checkpointing=\"every_0\""}, 1); },
                    {"every_N"});
  EXPECT_EQ(
      load({"training.activation_checkpointing=\"every_3\""}, 1).training.activation_checkpointing,
      3);
  EXPECT_EQ(
      load({"training.activation_checkpointing=\"full\""}, 1).training.activation_checkpointing, 1);
}

// A pad_id outside [0, vocab_size) would die in the embedding lookup of the first
// padded batch; it must be a ConfigError (exit 2) before training.
TEST(TrainConfig, PadIdMustBeATokenId) {
  expectConfigError([] { load({"data.pad_id=600"}, 1); }, {"data.pad_id", "600", "512"});
  expectConfigError([] { load({"data.pad_id=-1"}, 1); }, {"data.pad_id", "-1"});
  // A source of no known type is refused where it was set (it said "config: key ..."
  // from the loader, after the config was accepted).
  expectConfigError([] { load({"data.source=\"corpus.txt\""}, 1); },
                    {"override 'data.source=\"corpus.txt\"'", "unknown data file type",
                     "hint: expected \"synthetic\", a .jsonl or a .bin file"});
}

}  // namespace
}  // namespace ftb
