// --estimate-memory against closed forms (ZeRO paper, Rajbhandari et al. 2020): with
// Adam and fp32 master weights, model states take 16 bytes per parameter; ZeRO-3
// divides all of it by the shard degree N, tensor parallel divides the split
// matrices by tp and keeps the norms whole.
#include "common/memory_estimate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/memory_fit.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::kTinyRun;

TrainConfig llama7b(std::vector<std::string> overrides, int world) {
  overrides.insert(overrides.end(), {"model.name=\"llama-2-7b\"", "data.seq_len=4096",
                                     "training.micro_batch_size=1", "training.dtype=\"bf16\""});
  return TrainConfig::fromConfig(Config::load(kTinyRun, overrides), world);
}

constexpr double kPsi = 6738415616.0;  // Llama-2-7B parameters

// `fn` throws a ConfigError whose message names `key`.
template <class F>
void expectConfigErrorAbout(F fn, const std::string& key) {
  try {
    fn();
    ADD_FAILURE() << "no ConfigError naming " << key;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

TEST(MemoryEstimate, Zero3On8RanksIs16PsiOverN) {
  TrainConfig tc = llama7b({"parallel.dp_shard=8", "parallel.zero_stage=3"}, 8);
  MemoryEstimate e = estimateMemory(tc);
  EXPECT_EQ(e.params_local, static_cast<int64_t>(kPsi));
  EXPECT_DOUBLE_EQ(e.parameters, 4 * kPsi / 8);
  EXPECT_DOUBLE_EQ(e.gradients, 4 * kPsi / 8);
  EXPECT_DOUBLE_EQ(e.optimizer, 8 * kPsi / 8);
  EXPECT_DOUBLE_EQ(e.modelStates(), 16 * kPsi / 8);
  EXPECT_TRUE(e.checkpointing) << "ZeRO-3 recomputes every block in backward";
  // One gathered block in bf16 + its fp32 gradients, and the fp32 root (embedding,
  // output, norm) with its gradients.
  const double block = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008 + 2 * 4096;
  const double root = 2.0 * 32000 * 4096 + 4096;
  EXPECT_DOUBLE_EQ(e.gathered, 2 * block + 4 * block + 8 * root);
  std::string table = formatMemoryEstimate(tc, e, 80.0 * (1 << 30));
  for (const char* row :
       {"parameters", "gradients", "optimizer state", "model states", "gathered units (ZeRO-3)",
        "activations (no checkpointing)", "activations (checkpointing)", "communication buffers",
        "runtime baseline", "total (checkpointing)", "fits"})
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
}

// A LoRA run whose fp32 frozen base is the largest term: the hint names lora.base_dtype
// (a bf16 base halves it); a bf16 base's hint names "nf4".
TEST(MemoryEstimate, LoraFp32BaseOverBudgetHintsTheBaseDtype) {
  MemoryBudget budget;
  budget.bytes = 8.0 * (1 << 30);
  budget.source = "test";
  for (const char* dtype : {"fp32", "bf16"}) {
    TrainConfig tc = TrainConfig::fromConfig(
        Config::load(kTinyRun, {"model.name=\"llama-2-7b\"", "data.seq_len=256",
                                "training.micro_batch_size=1", "lora.rank=8", "lora.alpha=16",
                                "training.activation_checkpointing=\"full\"",
                                std::string("lora.base_dtype=\"") + dtype + "\""}),
        1);
    const std::string why = memoryFitProblem(tc, estimateMemory(tc), budget);
    EXPECT_NE(why.find("largest term: parameters"), std::string::npos) << why;
    const bool hinted = why.find("lora.base_dtype = \"bf16\"") != std::string::npos;
    EXPECT_EQ(hinted, std::string(dtype) == "fp32") << why;
    const bool nf4 = why.find("lora.base_dtype = \"nf4\"") != std::string::npos;
    EXPECT_EQ(nf4, std::string(dtype) == "bf16") << why;
  }
}

// training.optimizer_in_backward on Llama-2-7B: no gradient for the whole model; in a world
// of one the largest tensor's (the embedding table, 4·V·D bytes), under DDP one 25 MiB bucket
// at most plus two staging buffers of it (communication buffers).
TEST(MemoryEstimate, OptimizerInBackwardHoldsOneTensorsOrOneBucketsGradients) {
  const std::vector<std::string> oib = {"training.optimizer_in_backward=true",
                                        "training.max_grad_norm=0"};
  TrainConfig tc = llama7b(oib, 1);
  MemoryEstimate e = estimateMemory(tc);
  EXPECT_DOUBLE_EQ(e.gradients, 4.0 * 32000 * 4096);
  EXPECT_DOUBLE_EQ(e.parameters, 4 * kPsi);
  EXPECT_DOUBLE_EQ(e.comm_buffers, 0);
  MemoryEstimate ddp = estimateMemory(llama7b(oib, 2));
  const double table = 4.0 * 32000 * 4096;  // a single tensor larger than a 25 MiB bucket
  EXPECT_DOUBLE_EQ(ddp.gradients, table);
  EXPECT_DOUBLE_EQ(ddp.comm_buffers, 2 * table);
  EXPECT_LT(ddp.total(), estimateMemory(llama7b({}, 2)).total() - 4 * kPsi + 4 * table);
}

// training.device_memory_limit_gb is the budget (a GPU's: compared with the device estimate),
// before parallel.memory_limit_gb; --estimate-memory says which memory a table is of.
TEST(MemoryEstimate, DeviceMemoryCapIsAGpuBudget) {
  TrainConfig tc = llama7b({"training.device_memory_limit_gb=24", "parallel.memory_limit_gb=8"}, 1);
  const MemoryBudget b = memoryBudget(tc, 1);
  EXPECT_DOUBLE_EQ(b.bytes, 24.0 * (1 << 30));
  EXPECT_TRUE(b.device);
  EXPECT_EQ(b.source, "training.device_memory_limit_gb");
  const MemoryEstimate gpu = estimateDeviceMemory(tc), host = estimateMemory(tc);
  EXPECT_TRUE(gpu.device);
  EXPECT_FALSE(host.device);
  EXPECT_EQ(gpu.runtime, 0);
  EXPECT_NE(formatMemoryEstimate(tc, gpu, b.bytes).find("GPU memory"), std::string::npos);
  EXPECT_NE(formatMemoryEstimate(tc, host, 0).find("host memory: peak RSS"), std::string::npos);
}

// A 7 B Llama fully finetuned on one 24 GiB GPU at sequence 4096 (the recipe: bf16 weights
// without fp32 masters, Adafactor, the optimizer step inside backward, activation
// checkpointing) fits; the same with AdamW and stored gradients does not, and the refusal
// names the largest term.
TEST(MemoryEstimate, Llama7BOn24GiBFitsWithBf16WeightsAdafactorInBackward) {
  const std::vector<std::string> card = {"training.device=\"cuda\"",
                                         "training.device_memory_limit_gb=24",
                                         "training.activation_checkpointing=\"full\"",
                                         "training.master_weights=\"none\""};
  std::vector<std::string> recipe = card;
  recipe.insert(recipe.end(), {"training.optimizer=\"adafactor\"",
                               "training.optimizer_in_backward=true", "training.max_grad_norm=0"});
  const TrainConfig fits = llama7b(recipe, 1), adamw = llama7b(card, 1);
  const MemoryBudget budget = memoryBudget(fits, 1);
  const MemoryEstimate e = estimateDeviceMemory(fits);
  EXPECT_DOUBLE_EQ(e.parameters, 2 * kPsi);  // the fp32 norms' extra 0.5 MB is left out
  EXPECT_EQ(memoryFitProblem(fits, e, budget), "") << formatMemoryEstimate(fits, e, budget.bytes);
  const std::string why = memoryFitProblem(adamw, estimateDeviceMemory(adamw), budget);
  EXPECT_NE(why.find("exceeds 24.00 GiB (training.device_memory_limit_gb)"), std::string::npos)
      << why;
  EXPECT_NE(why.find("largest term: optimizer state"), std::string::npos) << why;
}

// training.activation_offload = "host": the inputs checkpointed blocks keep (L of them, one
// [B, T, D] each in the compute dtype) leave the device estimate; nothing else changes.
TEST(MemoryEstimate, ActivationOffloadMovesTheCheckpointedInputsToTheHost) {
  const std::vector<std::string> ckpt = {"training.device=\"cuda\"",
                                         "training.activation_checkpointing=\"full\""};
  std::vector<std::string> off = ckpt;
  off.push_back("training.activation_offload=\"host\"");
  const MemoryEstimate kept = estimateDeviceMemory(llama7b(ckpt, 1));
  const MemoryEstimate moved = estimateDeviceMemory(llama7b(off, 1));
  EXPECT_DOUBLE_EQ(kept.activations_checkpointed - moved.activations_checkpointed,
                   32 * 2.0 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(kept.modelStates(), moved.modelStates());
  expectConfigErrorAbout([] { llama7b({"training.activation_offload=\"host\""}, 1); },
                         "training.activation_checkpointing");
  expectConfigErrorAbout(
      [] { llama7b({"training.activation_offload=\"host\"", "training.device=\"cpu\"",
                    "training.activation_checkpointing=\"full\""}, 1); },
      "training.device");
}

// training.optimizer_offload = "host" on a GPU: the optimizer state leaves the device estimate
// for the host's row, beside a host copy of the trained parameters and a gradient buffer (the
// rank's shard: ZeRO-3 over 4 ranks); the device's other terms do not change. Refused on the CPU.
TEST(MemoryEstimate, OptimizerOffloadMovesTheStateAndAddsHostCopies) {
  const std::vector<std::string> zero3 = {"training.device=\"cuda\"", "parallel.dp_shard=4",
                                          "parallel.zero_stage=3"};
  std::vector<std::string> off = zero3;
  off.push_back("training.optimizer_offload=\"host\"");
  const MemoryEstimate dev = estimateDeviceMemory(llama7b(zero3, 4));
  const MemoryEstimate host = estimateDeviceMemory(llama7b(off, 4));
  EXPECT_EQ(host.optimizer, 0.0);
  EXPECT_DOUBLE_EQ(host.host_offloaded, dev.optimizer + 2 * 4.0 * kPsi / 4);
  EXPECT_DOUBLE_EQ(host.parameters, dev.parameters);
  EXPECT_DOUBLE_EQ(host.gradients, dev.gradients);
  EXPECT_DOUBLE_EQ(dev.total() - host.total(), dev.optimizer);
  const std::string text = formatMemoryEstimate(llama7b(off, 4), host, 0);
  EXPECT_NE(text.find("optimizer state on the host"), std::string::npos) << text;
  EXPECT_NE(text.find("host: optimizer state and copies"), std::string::npos) << text;
  expectConfigErrorAbout(
      [] { llama7b({"training.optimizer_offload=\"host\"", "training.device=\"cpu\""}, 1); },
      "training.device");
}

// An NF4 base: 0.5 + 4/64 bytes per block-matrix weight, fp32 norms, the embedding and
// output in bf16, plus one dequantized matrix (fp32 + int32 indices) of scratch; no weight
// cast saved for backward.
TEST(MemoryEstimate, LoraNf4BaseCountsPackedBlocksAndScratch) {
  auto lora = [](const char* dtype) {
    return TrainConfig::fromConfig(
        Config::load(kTinyRun, {"model.name=\"llama-2-7b\"", "data.seq_len=256",
                                "training.micro_batch_size=1", "lora.rank=8", "lora.alpha=16",
                                std::string("lora.base_dtype=\"") + dtype + "\""}),
        1);
  };
  const MemoryEstimate nf4 = estimateMemory(lora("nf4")), bf16 = estimateMemory(lora("bf16"));
  const double matrices = 32 * (4.0 * 4096 * 4096 + 3.0 * 4096 * 11008);
  const double norms = 32 * 2 * 4096 + 4096, tables = 2.0 * 32000 * 4096;
  const double adapters = 4.0 * loraParams(lora("nf4").model, lora("nf4").lora);
  EXPECT_DOUBLE_EQ(nf4.parameters, (0.5 + 4.0 / 64) * matrices + 4 * norms + 2 * tables + adapters);
  EXPECT_DOUBLE_EQ(bf16.parameters, 2 * (matrices + norms + tables) + adapters);
  EXPECT_DOUBLE_EQ(nf4.scratch, 8.0 * 11008 * 4096);
  EXPECT_EQ(bf16.scratch, 0);
  EXPECT_NE(formatMemoryEstimate(lora("nf4"), nf4, 0).find("NF4 dequantization scratch"),
            std::string::npos);
}

// --estimate-memory --fit on the 7 B shape and a 24 GiB card: the recipe above is the smallest
// row and fits at a micro-batch of at least 1; AdamW with stored gradients does not fit; rows
// grow in memory; under ZeRO-3 the bf16-weights rows are left out (the trainer refuses them).
TEST(MemoryFit, Llama7BOn24GiBListsTheRecipeFirst) {
  const Config cfg = Config::load(
      kTinyRun, {"model.name=\"llama-2-7b\"", "data.seq_len=4096", "training.device=\"cuda\"",
                 "training.device_memory_limit_gb=24"});
  const TrainConfig tc = TrainConfig::fromConfig(cfg, 1);
  const MemoryBudget budget = memoryBudget(tc, 1);
  const std::vector<FitRow> rows = fitTable(cfg, 1, budget);
  ASSERT_EQ(rows.size(), 16u);
  EXPECT_EQ(rows[0].weights, "bf16, no masters");
  EXPECT_EQ(rows[0].optimizer, "adafactor");
  EXPECT_EQ(rows[0].step, "inside backward");
  EXPECT_EQ(rows[0].activations, "checkpointed");
  EXPECT_GE(rows[0].largest_micro_batch, 1);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_LE(rows[i - 1].bytes_at_one, rows[i].bytes_at_one);
  for (const FitRow& r : rows)
    if (r.optimizer == "adamw" && r.step == "after backward") {
      EXPECT_EQ(r.largest_micro_batch, 0);
      EXPECT_FALSE(r.largest_term.empty());
    }
  const std::string table = formatFitTable(tc, rows, budget);
  EXPECT_NE(table.find("largest micro-batch that fits"), std::string::npos) << table;
  const Config z3 = Config::load(kTinyRun, {"model.name=\"llama-2-7b\"", "parallel.dp_shard=8",
                                            "parallel.zero_stage=3"});
  for (const FitRow& r : fitTable(z3, 8, memoryBudget(TrainConfig::fromConfig(z3, 8), 8)))
    EXPECT_NE(r.weights, "bf16, no masters");
}

TEST(MemoryEstimate, TensorParallel8SplitsMatricesNotNorms) {
  TrainConfig tc = llama7b({"parallel.tp=8"}, 8);
  MemoryEstimate e = estimateMemory(tc);
  const double per_block = (4.0 * 4096 * 4096 + 3.0 * 4096 * 11008) / 8 + 2 * 4096;
  const double local = 32 * per_block + 2.0 * 32000 * 4096 / 8 + 4096;
  EXPECT_DOUBLE_EQ(e.params_local, static_cast<int64_t>(local));
  EXPECT_DOUBLE_EQ(e.modelStates(), 16 * local);
}

TEST(MemoryEstimate, Zero1KeepsFullParamsAndGradsShardsOptimizer) {
  TrainConfig tc = llama7b({"parallel.dp_shard=8", "parallel.zero_stage=1"}, 8);
  MemoryEstimate e = estimateMemory(tc);
  // fp32 master = model weights, full gradients + this rank's reduced shard, Adam/N.
  EXPECT_DOUBLE_EQ(e.modelStates(), 8 * kPsi + 12 * kPsi / 8);
  TrainConfig ddp = llama7b({}, 8);
  EXPECT_DOUBLE_EQ(estimateMemory(ddp).modelStates(), 16 * kPsi);
}

TEST(MemoryEstimate, Zero2HoldsTheShardPlusTheUnitsInBackward) {
  TrainConfig tc = llama7b({"parallel.dp_shard=8", "parallel.zero_stage=2"}, 8);
  MemoryEstimate e = estimateMemory(tc);
  const double block = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008 + 2 * 4096;
  const double root = 2.0 * 32000 * 4096 + 4096;
  // fp32 weights, the gradient shard + the root's and one block's full gradients, Adam/N.
  EXPECT_DOUBLE_EQ(e.gradients, 4 * kPsi / 8 + 4 * (root + block));
  EXPECT_DOUBLE_EQ(e.modelStates(), 4 * kPsi + 12 * kPsi / 8 + 4 * (root + block));
  TrainConfig z1 = llama7b({"parallel.dp_shard=8", "parallel.zero_stage=1"}, 8);
  EXPECT_LT(e.modelStates(), 0.7 * estimateMemory(z1).modelStates());
}

TEST(MemoryEstimate, CheckpointingShrinksActivationsAndLimitIsReported) {
  TrainConfig none = llama7b({"parallel.tp=8"}, 8);
  TrainConfig full = llama7b({"parallel.tp=8", "training.activation_checkpointing=\"full\""}, 8);
  MemoryEstimate a = estimateMemory(none), b = estimateMemory(full);
  EXPECT_LT(b.activations_checkpointed * 5, a.activations_full);
  EXPECT_FALSE(a.checkpointing);
  EXPECT_TRUE(b.checkpointing);
  EXPECT_LT(b.total(), a.total());
  EXPECT_NE(formatMemoryEstimate(none, a, 1.0 * (1 << 30)).find("does NOT fit"), std::string::npos);
}

// Pipeline stages: 32 blocks of Llama-2-7B over pp 4 (8 each), 8 micro-batches.
TrainConfig llama7bPipeline(const std::string& schedule, std::vector<std::string> more = {}) {
  more.insert(more.end(), {"parallel.pp=4", "parallel.pp_microbatches=8",
                           "parallel.pp_schedule=\"" + schedule + "\""});
  return llama7b(more, 4);
}

TEST(MemoryEstimate, PipelineStagesHoldTheirBlocksAndTheRootParts) {
  TrainConfig tc = llama7bPipeline("1f1b", {"parallel.pp_split=[8, 8, 8, 8]"});
  const double block = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008 + 2 * 4096;
  const double table = 32000.0 * 4096;
  double sum = 0;
  for (int64_t s = 0; s < 4; ++s) {
    const MemoryEstimate e = estimateStage(tc, s);
    EXPECT_EQ(e.pp_stage, s);
    const double root = s == 0 ? table : s == 3 ? table + 4096 : 0;
    EXPECT_DOUBLE_EQ(e.params_local, static_cast<int64_t>(8 * block + root)) << "stage " << s;
    EXPECT_DOUBLE_EQ(e.modelStates(), 16 * (8 * block + root)) << "stage " << s;
    sum += double(e.params_local);
  }
  EXPECT_DOUBLE_EQ(sum, kPsi) << "the stages' parameters are the model's";
  // Tied: the last stage holds a copy of the embedding as its output projection.
  TrainConfig tied =
      llama7bPipeline("1f1b", {"parallel.pp_split=[8, 8, 8, 8]", "model.tie_embeddings=true"});
  EXPECT_DOUBLE_EQ(estimateStage(tied, 3).params_local, estimateStage(tc, 3).params_local);
  EXPECT_DOUBLE_EQ(estimateStage(tied, 0).params_local, estimateStage(tc, 0).params_local);
}

TEST(MemoryEstimate, OneFOneBKeepsPMinusSMicroBatchesGpipeAllOfThem) {
  const TrainConfig f = llama7bPipeline("1f1b", {"parallel.pp_split=[8, 8, 8, 8]"});
  const TrainConfig g = llama7bPipeline("gpipe", {"parallel.pp_split=[8, 8, 8, 8]"});
  for (int64_t s = 0; s < 4; ++s) {
    const MemoryEstimate ef = estimateStage(f, s), eg = estimateStage(g, s);
    EXPECT_DOUBLE_EQ(ef.blocks_in_flight, 8.0 * (4 - s)) << "stage " << s;
    EXPECT_DOUBLE_EQ(eg.blocks_in_flight, 8.0 * 8) << "stage " << s;
    EXPECT_DOUBLE_EQ(ef.logits_in_flight, s == 3 ? 1 : 0);
    EXPECT_DOUBLE_EQ(eg.logits_in_flight, s == 3 ? 8 : 0);
  }
  // Without logits, activations are one micro-batch's per block times the blocks in flight.
  EXPECT_DOUBLE_EQ(estimateStage(f, 0).activations_full, 2 * estimateStage(f, 2).activations_full);
  EXPECT_DOUBLE_EQ(estimateStage(g, 0).activations_full, 2 * estimateStage(f, 0).activations_full);
  EXPECT_EQ(estimateMemory(f).pp_stage, 0) << "stage 0 holds the most activations";
}

TEST(MemoryEstimate, InterleavedKeepsMegatronsWarmUpOnStageZero) {
  // Megatron: 2(p - 1) + (v - 1)p warm-up chunk forwards, then one more before the first
  // backward: 2*3 + 4 + 1 = 11 chunks of 4 blocks on stage 0, i.e. p + (p-1)/v = 5.5
  // micro-batches of its 8 blocks against 1F1B's 4.
  const TrainConfig tc = llama7bPipeline(
      "interleaved_1f1b",
      {"parallel.pp_virtual_stages=2", "parallel.pp_split=[4, 4, 4, 4, 4, 4, 4, 4]"});
  EXPECT_DOUBLE_EQ(estimateStage(tc, 0).blocks_in_flight, 11.0 * 4);
  const TrainConfig f = llama7bPipeline("1f1b", {"parallel.pp_split=[8, 8, 8, 8]"});
  EXPECT_GT(estimateStage(tc, 0).activations_full, estimateStage(f, 0).activations_full);
}

}  // namespace
}  // namespace ftb
