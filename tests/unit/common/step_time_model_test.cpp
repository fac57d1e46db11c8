// predictStep() against closed forms: FLOPs per token × tokens / GEMM rate, nccl-tests'
// bytes per collective, the pipeline's theoretical bubble.
#include "common/step_time_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/config.h"
#include "common/pipeline.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::kTinyRun;
const MachineFigures kMachine{1e10, 1e9, "test", "test"};

TrainConfig tinyTrainConfig(std::vector<std::string> overrides, int world) {
  overrides.push_back("training.global_batch_size=8");
  return TrainConfig::fromConfig(Config::load(kTinyRun, overrides), world);
}

double term(const StepPrediction& p, const std::string& prefix) {
  for (const StepTerm& t : p.terms)
    if (t.name.rfind(prefix, 0) == 0) return t.seconds;
  return 0;
}

TEST(StepTimeModel, WorldOneIsTheFlopsOverTheGemmRate) {
  const TrainConfig tc = tinyTrainConfig({}, 1);
  const StepPrediction p = predictStep(tc, {1e10, 0, "", ""});
  const double tokens = 8.0 * double(tc.data.seq_len);
  EXPECT_DOUBLE_EQ(p.flops, tokens * tc.model.flopsPerToken(tc.data.seq_len));
  EXPECT_DOUBLE_EQ(p.compute_s, p.flops / 1e10);
  EXPECT_EQ(p.comm_s, 0);
  EXPECT_EQ(p.bubble_s, 0);
  EXPECT_EQ(p.terms.size(), 1u);
  EXPECT_DOUBLE_EQ(p.total(2), 2 * p.compute_s);
}

TEST(StepTimeModel, DdpAllReducesEveryGradientOncePerStep) {
  const TrainConfig tc = tinyTrainConfig({"training.micro_batch_size=1"}, 2);  // grad_accum 4
  const StepPrediction p = predictStep(tc, kMachine);
  // All-reduce of S over 2 ranks moves 2·(1/2)·S = S: the fp32 gradients once.
  const double grads = 4.0 * double(tc.model.numParams());
  EXPECT_DOUBLE_EQ(p.comm_bytes, grads);
  EXPECT_DOUBLE_EQ(p.comm_s, grads / 1e9);
  EXPECT_GT(term(p, "comm: DDP"), 0);
  // Each rank computes half the global batch.
  EXPECT_DOUBLE_EQ(p.flops, 4.0 * tc.data.seq_len * tc.model.flopsPerToken(tc.data.seq_len));
}

TEST(StepTimeModel, ZeroStagesMoveMoreThanDdpAndZero3Recomputes) {
  const TrainConfig ddp = tinyTrainConfig({"training.micro_batch_size=2"}, 2);
  const TrainConfig z1 = tinyTrainConfig(
      {"training.micro_batch_size=2", "parallel.dp_shard=2", "parallel.zero_stage=1"}, 2);
  const TrainConfig z3 = tinyTrainConfig(
      {"training.micro_batch_size=2", "parallel.dp_shard=2", "parallel.zero_stage=3"}, 2);
  const StepPrediction pd = predictStep(ddp, kMachine), p1 = predictStep(z1, kMachine),
                       p3 = predictStep(z3, kMachine);
  // ZeRO-1: the all-reduce plus an all-gather of the fp32 parameters (half an all-reduce).
  EXPECT_DOUBLE_EQ(p1.comm_bytes, 1.5 * pd.comm_bytes);
  EXPECT_GT(p3.comm_bytes, p1.comm_bytes);
  // ZeRO-3 recomputes every block forward: a third of the blocks' training FLOPs.
  const LayerCosts c = layerCosts(ddp.model, ddp.data.seq_len);
  const double tokens = 4.0 * ddp.data.seq_len;
  EXPECT_NEAR(p3.flops - pd.flops, tokens * double(ddp.model.n_layers) * c.block / 3,
              1e-6 * pd.flops);
}

TEST(StepTimeModel, ActivationCheckpointingAddsOneBlockForward) {
  const TrainConfig off = tinyTrainConfig({}, 1);
  const TrainConfig full = tinyTrainConfig({"training.activation_checkpointing=\"full\""}, 1);
  const LayerCosts c = layerCosts(off.model, off.data.seq_len);
  const double tokens = 8.0 * off.data.seq_len;
  EXPECT_NEAR(predictStep(full, kMachine).flops - predictStep(off, kMachine).flops,
              tokens * double(off.model.n_layers) * c.block / 3, 1e-9 * tokens * c.block);
}

TEST(StepTimeModel, TensorParallelHalvesTheFlopsAndAllReducesActivations) {
  const TrainConfig w1 = tinyTrainConfig({"training.micro_batch_size=2"}, 1);
  const TrainConfig tp = tinyTrainConfig({"training.micro_batch_size=2", "parallel.tp=2"}, 2);
  const StepPrediction p = predictStep(tp, kMachine);
  EXPECT_DOUBLE_EQ(p.flops, predictStep(w1, kMachine).flops / 2);
  // 4 all-reduces per block and micro-batch (2 forward, 2 backward) of mb·T·D fp32.
  const double act = 2.0 * tp.data.seq_len * tp.model.dim * 4;
  const double micro = double(tp.training.grad_accum_steps);
  EXPECT_DOUBLE_EQ(p.comm_bytes, micro * double(tp.model.n_layers) * 4 * act);
}

TEST(StepTimeModel, PipelineBubbleIsTheTheoryOfItsSchedule) {
  const TrainConfig pp =
      tinyTrainConfig({"training.micro_batch_size=1", "parallel.pp=2"}, 2);  // m = 8
  const StepPrediction p = predictStep(pp, kMachine);
  const double b = theoreticalBubble(pp.pipeline);
  EXPECT_DOUBLE_EQ(b, 1.0 / 9);
  EXPECT_DOUBLE_EQ(p.bubble_s, p.compute_s * b / (1 - b));
  EXPECT_GT(term(p, "comm: pp"), 0);
  // The costliest stage computes at least half of the whole model's FLOPs.
  const TrainConfig w1 = tinyTrainConfig({"training.micro_batch_size=1"}, 1);
  EXPECT_GE(p.flops, predictStep(w1, kMachine).flops / 2);
  EXPECT_LT(p.flops, predictStep(w1, kMachine).flops);
}

TEST(StepTimeModel, LoraAllReducesOnlyTheAdapters) {
  const TrainConfig full = tinyTrainConfig({"training.micro_batch_size=2"}, 2);
  const TrainConfig lora = tinyTrainConfig({"training.micro_batch_size=2", "lora.rank=4"}, 2);
  const StepPrediction p = predictStep(lora, kMachine);
  EXPECT_DOUBLE_EQ(p.comm_bytes, 4.0 * double(loraParams(lora.model, lora.lora)));
  EXPECT_LT(p.comm_bytes, predictStep(full, kMachine).comm_bytes / 10);
}

TEST(StepTimeModel, TheLargestTermIsNamed) {
  const TrainConfig tc = tinyTrainConfig({"training.micro_batch_size=1"}, 2);
  EXPECT_EQ(predictStep(tc, {1e15, 1e3, "", ""}).largestTerm(), "comm: DDP gradient all-reduce");
  EXPECT_EQ(predictStep(tc, {1e3, 1e15, "", ""}).largestTerm(), "compute");
}

}  // namespace
}  // namespace ftb
