// The pipeline's pure functions (common/pipeline.h): the FLOP-balanced layer split, the
// three schedules as per-stage action lists (complete, dependency-respecting, deadlock-free
// when executed, 1F1B's bounded in-flight micro-batches, the bubble against the theory),
// and the validation of the pipeline keys shared by the trainer and `sweep_tagger expand`.
#include "common/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/tag.h"
#include "test_util.h"

namespace ftb {
namespace {

TEST(PipeSplit, BalancesCostWithEmbeddingFirstAndHeadLast) {
  // Blocks cost 1, the head 2: [5, 3] has largest chunk 5 (3 + 2 on the last),
  // [4, 4] would have 6.
  EXPECT_EQ(balancedSplit(8, 2, {1.0, 0.0, 2.0}), (std::vector<int64_t>{5, 3}));
  // An embedding as heavy as the head: symmetric.
  EXPECT_EQ(balancedSplit(8, 2, {1.0, 2.0, 2.0}), (std::vector<int64_t>{4, 4}));
  // A head of 3 blocks: the last of 4 chunks keeps one block, the others share the rest.
  EXPECT_EQ(balancedSplit(10, 4, {1.0, 0.0, 3.0}), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(balancedSplit(4, 4, {1.0, 0.0, 100.0}), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_THROW(balancedSplit(2, 3, {1.0, 0.0, 0.0}), std::logic_error);
}

TEST(PipeSplit, ModelCostsPutFewerBlocksOnTheLastStageOfASmallModel) {
  ModelArgs m;  // tiny: the 512 x 64 output GEMM costs about a third of a block
  m.dim = 64, m.n_layers = 8, m.n_heads = 4, m.n_kv_heads = 2, m.ffn_dim = 192;
  m.vocab_size = 8192, m.max_seq_len = 256;
  const LayerCosts c = layerCosts(m, 64);
  EXPECT_GT(c.head, c.block);  // vocabulary 8192: the head outweighs a block
  EXPECT_LT(c.embed, c.block);
  const std::vector<int64_t> split = balancedSplit(8, 2, c);
  EXPECT_EQ(split[0] + split[1], 8);
  EXPECT_GT(split[0], split[1]);
}

// Interleaved 1F1B's step time is bounded by the heaviest stage (the sum of its chunks), so
// its default split balances the stages first, then the chunks within each stage.
TEST(PipeSplit, InterleavedBalancesTheStagesBeforeTheChunks) {
  const LayerCosts heavy_head{1.0, 0.0, 4.5};  // D512/L8's output layer and loss, 32000 tokens
  // Balancing the 4 chunks alone: stage 0 (chunks 0, 2) 4 blocks, stage 1 4 blocks + head.
  EXPECT_EQ(balancedSplit(8, 4, heavy_head), (std::vector<int64_t>{3, 3, 1, 1}));
  // Stages 3 + 3 = 6 against 1 + 1 + 4.5: the same largest chunk (the head's).
  EXPECT_EQ(interleavedSplit(8, 2, 2, heavy_head), (std::vector<int64_t>{3, 1, 3, 1}));
  // Equal chunks stay equal; the embedding counts on stage 0's first chunk.
  EXPECT_EQ(interleavedSplit(8, 2, 2, {1.0, 0.0, 0.0}), (std::vector<int64_t>{2, 2, 2, 2}));
  // Stage 0: 5 blocks + embedding 2 = 7 = stage 1's 7 blocks; chunk 0 takes 2 + 2.
  EXPECT_EQ(interleavedSplit(12, 2, 2, {1.0, 2.0, 0.0}), (std::vector<int64_t>{2, 4, 3, 3}));
  // Every stage keeps v blocks even when the head outweighs everything.
  EXPECT_EQ(interleavedSplit(6, 3, 2, {1.0, 0.0, 100.0}), (std::vector<int64_t>{1, 1, 1, 1, 1, 1}));
  EXPECT_THROW(interleavedSplit(3, 2, 2, {1.0, 0.0, 0.0}), std::logic_error);
}

struct Case {
  PipeSchedule schedule;
  int64_t p, v, m;
};

PipePlan planFor(const Case& c) {
  PipePlan plan;
  plan.schedule = c.schedule;
  plan.stages = c.p;
  plan.virtual_stages = c.v;
  plan.microbatches = c.m;
  plan.split.assign(c.p * c.v, 1);
  return plan;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t p : {1, 2, 3, 4}) {
    for (int64_t m : {1, 2, 4, 8}) {
      out.push_back({PipeSchedule::kGpipe, p, 1, m});
      if (m >= p) out.push_back({PipeSchedule::k1F1B, p, 1, m});
      if (m >= p) out.push_back({PipeSchedule::kZbH1, p, 1, m});
      if (p > 1 && m % p == 0) {
        out.push_back({PipeSchedule::kInterleaved1F1B, p, 2, m});
        out.push_back({PipeSchedule::kInterleaved1F1B, p, 3, m});
      }
    }
  }
  return out;
}

std::string name(const Case& c) {
  return std::string(pipeScheduleName(c.schedule)) + " p" + std::to_string(c.p) + " v" +
         std::to_string(c.v) + " m" + std::to_string(c.m);
}

// Every (micro-batch, chunk) forwarded once and backwarded once on every stage, the
// backward after the forward; zb_h1 also runs its weight pass once, after its backward, in
// micro-batch order, the final micro-batch's last.
TEST(PipeSchedule, EveryMicroBatchRunsForwardThenBackwardOncePerChunk) {
  for (const Case& c : cases()) {
    const PipePlan plan = planFor(c);
    const bool zb = c.schedule == PipeSchedule::kZbH1;
    for (int64_t s = 0; s < c.p; ++s) {
      std::set<std::pair<int64_t, int64_t>> fwd, bwd;
      std::vector<int64_t> weights;
      for (const PipeAction& a : computeOrder(plan, s)) {
        auto key = std::make_pair(a.mb, a.chunk);
        if (a.kind == PipeAction::kForward) {
          EXPECT_TRUE(fwd.insert(key).second) << name(c) << " stage " << s << " " << describe(a);
        } else if (a.kind == PipeAction::kWeight) {
          EXPECT_TRUE(zb) << name(c) << " " << describe(a);
          EXPECT_TRUE(bwd.count(key)) << name(c) << " weight pass before backward: " << describe(a);
          weights.push_back(a.mb);
        } else {
          ASSERT_EQ(a.kind, PipeAction::kBackward);
          EXPECT_TRUE(fwd.count(key)) << name(c) << " backward before forward: " << describe(a);
          EXPECT_TRUE(bwd.insert(key).second) << name(c) << " " << describe(a);
        }
      }
      EXPECT_EQ(int64_t(fwd.size()), c.m * c.v) << name(c);
      EXPECT_EQ(int64_t(bwd.size()), c.m * c.v) << name(c);
      std::vector<int64_t> in_order(zb ? c.m : 0);
      for (int64_t i = 0; i < int64_t(in_order.size()); ++i) in_order[i] = i;
      EXPECT_EQ(weights, in_order) << name(c) << " stage " << s;
    }
  }
}

// ZB-H1's deferral: stage s runs each weight pass s backwards after its own, so it holds
// 1F1B's p − s micro-batches of activations and s pending weight passes, and the last
// action of every stage is the final micro-batch's weight pass.
TEST(PipeSchedule, ZbH1DefersStageSWeightPassesBySBackwards) {
  const PipePlan plan = planFor({PipeSchedule::kZbH1, 4, 1, 8});
  for (int64_t s = 0; s < 4; ++s) {
    const std::vector<PipeAction> order = computeOrder(plan, s);
    int64_t backwards = 0, most_pending = 0;
    for (const PipeAction& a : order) {
      if (a.kind == PipeAction::kBackward) ++backwards;
      if (a.kind == PipeAction::kWeight) {
        if (a.mb + s < 8) EXPECT_EQ(backwards, a.mb + s + 1) << "stage " << s << " " << describe(a);
        most_pending = std::max(most_pending, backwards - a.mb - 1);
      }
    }
    EXPECT_EQ(most_pending, s);
    EXPECT_EQ(order.back(), (PipeAction{PipeAction::kWeight, 7, 0, -1})) << "stage " << s;
    const PipeSimulation sim = simulatePipeline(pipeActions(plan));
    EXPECT_EQ(sim.peak_in_flight[s], 4 - s);
  }
}

// Every receive has exactly one matching send from the named peer, every send a receive:
// activations flow to the next model chunk, gradients to the previous one.
TEST(PipeSchedule, EveryTransferPairsWithItsNeighbour) {
  for (const Case& c : cases()) {
    const PipePlan plan = planFor(c);
    std::multiset<std::tuple<bool, int64_t, int64_t, int64_t, int64_t>> sends, recvs;
    const auto all = pipeActions(plan);
    for (int64_t s = 0; s < c.p; ++s) {
      for (const PipeAction& a : all[s]) {
        const int64_t k = plan.modelChunk(s, a.chunk);
        if (a.kind == PipeAction::kSendAct) sends.insert({false, a.mb, k + 1, s, a.peer});
        if (a.kind == PipeAction::kSendGrad) sends.insert({true, a.mb, k - 1, s, a.peer});
        if (a.kind == PipeAction::kRecvAct) recvs.insert({false, a.mb, k, a.peer, s});
        if (a.kind == PipeAction::kRecvGrad) recvs.insert({true, a.mb, k, a.peer, s});
      }
    }
    EXPECT_EQ(sends, recvs) << name(c);
    const int64_t boundaries = c.p * c.v - 1;
    EXPECT_EQ(int64_t(sends.size()), 2 * boundaries * c.m) << name(c);
  }
}

// Executed with blocking receives, every schedule finishes (no stage waits forever), and
// the bubble of GPipe and 1F1B is exactly the theory when forward and backward take the
// same time; interleaving shrinks it; zb_h1's is its theory when the forward, the
// input-gradient pass and the weight pass take the same time, a third of 1F1B's with its
// backward twice as long (B + W).
TEST(PipeSchedule, SimulatedRunsFinishWithTheTheoreticalBubble) {
  for (const Case& c : cases()) {
    const PipePlan plan = planFor(c);
    const double t = 1.0 / double(c.v);
    const PipeSimulation sim = simulatePipeline(pipeActions(plan), {t, t, t});
    ASSERT_EQ(sim.deadlock, "") << name(c);
    const bool zb = c.schedule == PipeSchedule::kZbH1;
    // per stage: m·v chunks, forward and backward (and zb_h1's weight passes)
    const double busy = (zb ? 3.0 : 2.0) * double(c.m);
    const double bubble = 1.0 - busy / sim.makespan;
    if (zb) {
      PipePlan f1b = plan;
      f1b.schedule = PipeSchedule::k1F1B;
      const PipeSimulation base = simulatePipeline(pipeActions(f1b), {1, 2, 0});
      EXPECT_NEAR(1.0 - busy / base.makespan, theoreticalBubble(f1b), 1e-12) << name(c);
      EXPECT_NEAR(base.makespan - busy, 3 * (sim.makespan - busy), 1e-9) << name(c);
    }
    if (c.schedule != PipeSchedule::kInterleaved1F1B) {
      EXPECT_NEAR(bubble, theoreticalBubble(plan), 1e-12) << name(c);
    } else {
      PipePlan flat = plan;
      flat.schedule = PipeSchedule::k1F1B;
      flat.virtual_stages = 1;
      EXPECT_LT(bubble, theoreticalBubble(flat)) << name(c);
      // (p−1)/v of idle chunk slots at each end: (p−1)/(v·m + p − 1), the exact
      // interleaved bubble; the stated theory (p−1)/(m+p−1)/v is at most 1/v above it.
      const double exact = double(c.p - 1) / double(c.v * c.m + c.p - 1);
      EXPECT_NEAR(bubble, exact, 1e-12) << name(c);
    }
  }
}

// What the trainer reports per stage (pipelineIdleFraction of the stage's span, its
// receive waits and the longest span) is the theory on every stage of GPipe and 1F1B.
// Receive waits over the stage's own span read low on the last stage: its wait for the
// first stage's drain comes after its own last action.
TEST(PipeSchedule, EveryStageIdlesTheTheoreticalFractionOfTheMakespan) {
  for (const Case& c : cases()) {
    if (c.schedule == PipeSchedule::kInterleaved1F1B) continue;
    const PipePlan plan = planFor(c);
    const PipeSimulation sim = simulatePipeline(pipeActions(plan));
    ASSERT_EQ(sim.deadlock, "") << name(c);
    for (int64_t s = 0; s < c.p; ++s)
      EXPECT_NEAR(pipelineIdleFraction(sim.finish[s], sim.waited[s], sim.makespan),
                  theoreticalBubble(plan), 1e-12)
          << name(c) << ", stage " << s;
    // zb_h1's last stage ends last (its deferred weight passes): its span is the makespan.
    const int64_t last = c.p - 1;
    if (c.p > 1 && c.schedule != PipeSchedule::kZbH1)
      EXPECT_LT(sim.waited[last] / sim.finish[last], theoreticalBubble(plan) - 0.01) << name(c);
  }
  EXPECT_EQ(pipelineIdleFraction(0, 0, 0), 0.0);
}

TEST(PipeSchedule, OneFOneBKeepsAtMostPMicroBatchesInFlightOnStageZero) {
  for (int64_t p : {2, 4}) {
    for (int64_t m : {4, 8, 16}) {
      const PipePlan f1b = planFor({PipeSchedule::k1F1B, p, 1, m});
      const PipePlan gpipe = planFor({PipeSchedule::kGpipe, p, 1, m});
      const PipePlan inter = planFor({PipeSchedule::kInterleaved1F1B, p, 2, m});
      const PipeSimulation a = simulatePipeline(pipeActions(f1b));
      EXPECT_EQ(a.peak_in_flight[0], p);
      for (int64_t s = 0; s < p; ++s) EXPECT_EQ(a.peak_in_flight[s], p - s);
      EXPECT_EQ(simulatePipeline(pipeActions(gpipe)).peak_in_flight[0], m);
      // Interleaved keeps more chunks of activations (each a 1/v share of the stage).
      EXPECT_GT(simulatePipeline(pipeActions(inter)).peak_in_flight[0], p);
    }
  }
}

TEST(PipeSchedule, SimulatorReportsADeadlockNamingTheWaits) {
  // Stage 0 waits for micro-batch 0's gradient before forwarding micro-batch 1, while
  // stage 1 forwards both micro-batches before its first backward.
  const PipePlan plan = planFor({PipeSchedule::kGpipe, 2, 1, 2});
  const std::vector<PipeAction> s0 = {{PipeAction::kForward, 0, 0, -1},
                                      {PipeAction::kBackward, 0, 0, -1},
                                      {PipeAction::kForward, 1, 0, -1},
                                      {PipeAction::kBackward, 1, 0, -1}};
  const PipeSimulation sim =
      simulatePipeline({withTransfers(plan, 0, s0), withTransfers(plan, 1, computeOrder(plan, 1))});
  EXPECT_EQ(sim.deadlock,
            "stage 0 waits to receive gradients mb 0 chunk 0 from stage 1; stage 1 waits to "
            "receive activations mb 1 chunk 0 from stage 0");
}

TEST(PipeSchedule, TheoryFormulas) {
  EXPECT_DOUBLE_EQ(theoreticalBubble(planFor({PipeSchedule::k1F1B, 2, 1, 8})), 1.0 / 9.0);
  EXPECT_DOUBLE_EQ(theoreticalBubble(planFor({PipeSchedule::kGpipe, 4, 1, 8})), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(theoreticalBubble(planFor({PipeSchedule::kInterleaved1F1B, 2, 2, 8})),
                   1.0 / 18.0);
  EXPECT_DOUBLE_EQ(theoreticalBubble(planFor({PipeSchedule::k1F1B, 1, 1, 8})), 0.0);
  EXPECT_DOUBLE_EQ(theoreticalBubble(planFor({PipeSchedule::kZbH1, 4, 1, 8})), 3.0 / 27.0);
  EXPECT_EQ(theoreticalBubbleFormula(planFor({PipeSchedule::kZbH1, 4, 1, 8})), "(p-1)/(3m+p-1)");
}

// ---- validation of the keys (TrainConfig::fromConfig, shared with sweep_tagger expand)

using test::kTinyRun;

std::string fourLayerRefusal(std::vector<std::string> overrides, int world) {
  overrides.insert(overrides.begin(), "model.n_layers=4");  // a later override wins
  return refusalOf(Config::load(kTinyRun, overrides), world);
}

void expectRefusal(const std::vector<std::string>& overrides, int world,
                   const std::vector<std::string>& parts) {
  const std::string r = fourLayerRefusal(overrides, world);
  ASSERT_NE(r, "") << "accepted";
  EXPECT_NE(r.find("hint:"), std::string::npos) << r;
  for (const std::string& part : parts) EXPECT_NE(r.find(part), std::string::npos) << r;
}

TEST(PipeConfig, MoreStagesThanBlocksIsRefused) {
  expectRefusal({"parallel.pp=8"}, 8,
                {"key 'parallel.pp'", "pp(8) exceeds model.n_layers(4)", "at most 4"});
}

TEST(PipeConfig, ZeroBubbleWithReduceScatteringZeroOrChunksIsRefused) {
  expectRefusal({"parallel.pp=2", "parallel.pp_microbatches=2", "parallel.pp_schedule=zb_h1",
                 "parallel.dp_shard=2", "parallel.zero_stage=2"},
                4, {"\"zb_h1\" with zero_stage(2)", "zero_stage = 0 or 1"});
  expectRefusal({"parallel.pp=2", "parallel.pp_microbatches=2", "parallel.pp_schedule=zb_h1",
                 "parallel.pp_virtual_stages=2"},
                2, {"pp_virtual_stages(2) > 1 needs pp_schedule \"interleaved_1f1b\""});
  EXPECT_EQ(
      fourLayerRefusal({"parallel.pp=2", "parallel.pp_microbatches=2", "parallel.pp_schedule=zb_h1",
                        "parallel.dp_shard=2", "parallel.zero_stage=1"},
                       4),
      "");
}

TEST(PipeConfig, TooFewMicroBatchesForTheScheduleIsRefused) {
  expectRefusal(
      {"parallel.pp=4", "parallel.pp_microbatches=2"}, 4,
      {"key 'parallel.pp_microbatches'", "\"1f1b\" needs at least pp(4) micro-batches", "got 2"});
  expectRefusal({"parallel.pp=2", "parallel.pp_schedule=\"interleaved_1f1b\"",
                 "parallel.pp_virtual_stages=2", "parallel.pp_microbatches=3"},
                2, {"groups of pp(2)", "got 3"});
  // GPipe runs any number of micro-batches: the refusal is the not-yet-implemented pp.
  const std::string gpipe = fourLayerRefusal(
      {"parallel.pp=4", "parallel.pp_microbatches=2", "parallel.pp_schedule=\"gpipe\""}, 4);
  EXPECT_EQ(gpipe.find("micro-batches"), std::string::npos) << gpipe;
}

TEST(PipeConfig, VirtualStagesThatDoNotDivideTheBlocksAreRefused) {
  expectRefusal(
      {"parallel.pp=2", "parallel.pp_schedule=\"interleaved_1f1b\"", "parallel.pp_virtual_stages=3",
       "parallel.pp_microbatches=2"},
      2, {"key 'parallel.pp_virtual_stages'", "6 model chunks do not divide model.n_layers(4)"});
  expectRefusal({"model.n_layers=6", "parallel.pp=2", "parallel.pp_schedule=\"interleaved_1f1b\"",
                 "parallel.pp_virtual_stages=2", "parallel.pp_microbatches=2"},
                2, {"4 model chunks do not divide model.n_layers(6)", "parallel.pp_split"});
  expectRefusal({"parallel.pp=2", "parallel.pp_virtual_stages=2"}, 2,
                {"needs pp_schedule \"interleaved_1f1b\""});
  expectRefusal(
      {"parallel.pp=2", "parallel.pp_schedule=\"interleaved_1f1b\"", "parallel.pp_microbatches=2"},
      2, {"needs pp_virtual_stages >= 2"});
}

TEST(PipeConfig, SplitThatDoesNotSumToTheBlocksIsRefused) {
  expectRefusal({"parallel.pp=2", "parallel.pp_split=[1, 2]", "parallel.pp_microbatches=2"}, 2,
                {"key 'parallel.pp_split'", "[1, 2] sums to 3, not model.n_layers(4)"});
  expectRefusal({"parallel.pp=2", "parallel.pp_split=[4]", "parallel.pp_microbatches=2"}, 2,
                {"[4] has 1 entries, expected pp(2) * pp_virtual_stages(1) = 2"});
  expectRefusal({"parallel.pp=2", "parallel.pp_split=[4, 0]", "parallel.pp_microbatches=2"}, 2,
                {"gives a chunk 0 blocks"});
}

TEST(PipeConfig, StagesAreInTheWorldSizeProduct) {
  expectRefusal({"parallel.pp=2", "parallel.tp=2"}, 2,
                {"pp(2) * dp_shard(1) * tp(2) does not divide world_size(2)"});
  const TrainConfig tc = TrainConfig::fromConfig(Config::load(kTinyRun, {"model.n_layers=4"}), 4);
  EXPECT_EQ(tc.layout.pp, 1);
  EXPECT_EQ(tc.layout.dp_replicate, 4);
  EXPECT_EQ(tc.pipeline.split, (std::vector<int64_t>{4}));
}

// D512/L8 with Llama-2's vocabulary: the head costs 4.45 blocks. Balancing the chunks gave
// [2, 3, 2, 1]: stage 0 computed 4 blocks, stage 1 4 blocks and the head.
TEST(PipeConfig, InterleavedDefaultSplitBalancesTheStagesOfD512L8) {
  const TrainConfig tc = TrainConfig::fromConfig(
      Config::load(kTinyRun, {"model.dim=512", "model.n_layers=8", "model.n_heads=8",
                              "model.n_kv_heads=8", "model.ffn_dim=1376", "model.vocab_size=32000",
                              "model.max_seq_len=512", "data.seq_len=512", "parallel.pp=2",
                              "parallel.pp_schedule=\"interleaved_1f1b\"",
                              "parallel.pp_virtual_stages=2", "parallel.pp_microbatches=8"}),
      2);
  EXPECT_EQ(tc.pipeline.split, (std::vector<int64_t>{3, 1, 3, 1}));
}

TEST(PipeConfig, MicroBatchesSetGradientAccumulationOrMustAgree) {
  const TrainConfig tc = TrainConfig::fromConfig(
      Config::load(kTinyRun, {"model.n_layers=4", "parallel.pp_microbatches=4"}), 1);
  EXPECT_EQ(tc.training.grad_accum_steps, 4);
  EXPECT_EQ(tc.pipeline.microbatches, 4);
  expectRefusal({"parallel.pp_microbatches=4", "training.grad_accum_steps=2"}, 1,
                {"pp_microbatches(4) contradicts grad_accum_steps(2)"});
}

// The pipeline keys came after run directories existed: at their defaults they leave a
// run's tag as it was (SchemaTest.RenamedKeyHashesAsItsOldNameDid pins those hashes);
// set, they make another run.
TEST(PipeConfig, KeysAtTheirDefaultsLeaveTheRunTagUnchanged) {
  auto hash = [](std::vector<std::string> o) { return configHash(Config::load(kTinyRun, o), 2); };
  const std::string plain = hash({});
  EXPECT_EQ(hash({"parallel.pp=1", "parallel.pp_schedule=\"1f1b\"", "parallel.pp_split=[]",
                  "parallel.pp_virtual_stages=1", "parallel.pp_microbatches=0"}),
            plain);
  EXPECT_NE(hash({"parallel.pp=2"}), plain);
  EXPECT_NE(hash({"parallel.pp_schedule=\"gpipe\""}), plain);
  EXPECT_NE(hash({"parallel.pp_split=[2]"}), plain);
}

TEST(PipeConfig, AValidPipelineResolvesItsPlan) {
  const TrainConfig tc = TrainConfig::fromConfig(
      Config::load(kTinyRun,
                   {"model.n_layers=4", "parallel.pp=2", "parallel.pp_microbatches=4",
                    "parallel.pp_schedule=\"interleaved_1f1b\"", "parallel.pp_virtual_stages=2"}),
      4);
  EXPECT_EQ(tc.layout.pp, 2);
  EXPECT_EQ(tc.layout.dp_replicate, 2);
  EXPECT_EQ(tc.globalBatch(), 2 * 4 * 2);  // micro_batch_size * m * dp: stages share samples
  const PipePlan& plan = tc.pipeline;
  EXPECT_EQ(plan.schedule, PipeSchedule::kInterleaved1F1B);
  EXPECT_EQ(plan.microbatches, 4);
  EXPECT_EQ(plan.split, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(simulatePipeline(pipeActions(plan)).deadlock, "");
}

TEST(PipeConfig, WhatAStageCannotRunYetIsRefused) {
  // Tied embeddings run with DDP inside the stages; under ZeRO the tied gradient is sharded.
  EXPECT_EQ(fourLayerRefusal(
                {"parallel.pp=2", "parallel.pp_microbatches=2", "model.tie_embeddings=true"}, 2),
            "");
  expectRefusal({"parallel.pp=2", "parallel.pp_microbatches=2", "model.tie_embeddings=true",
                 "parallel.dp_shard=2", "parallel.zero_stage=1"},
                4,
                {"key 'parallel.zero_stage'", "tied embeddings in a pipeline", "ZeRO shards it"});
  expectRefusal({"parallel.pp=4", "parallel.pp_microbatches=4", "parallel.dp_shard=2",
                 "parallel.zero_stage=3"},
                8, {"key 'parallel.zero_stage'", "needs pp = 2 with one chunk per stage"});
  expectRefusal({"parallel.pp=2", "parallel.pp_microbatches=2", "data.padding=\"longest\"",
                 "training.activation_checkpointing=\"full\""},
                2, {"key 'data.padding'", "need one length per step"});
}

}  // namespace
}  // namespace ftb
