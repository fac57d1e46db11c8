// A pipeline's micro-batch count is bounded and costs nothing per micro-batch to plan:
// `parallel.pp_microbatches = 1000000000000` was accepted and filled the machine, and the
// memory estimate walked a list per micro-batch (+320 MB at 10^6, bad_alloc at 10^7).
// - pipeMicrobatchProblem / checkPipeMicrobatchBound (common/pipeline.h): one step's
//   samples at most the dataset's, refused naming the key that set the count.
// - pipeInFlight: the closed form equals walking the schedules (the estimator's former
//   loop, kept here as the reference) for every small case, and takes no time at 10^12.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/memory_estimate.h"
#include "common/pipeline_limits.h"
#include "test_util.h"

namespace ftb {
namespace {

using test::kTinyRun;

// What the estimator computed before (memory_estimate.cpp's stageShare, per action), and
// zb_h1's pending weight passes beside the most activations: the pending ones before a
// backward that starts with the most blocks alive.
PipeInFlight walked(const PipePlan& plan, int64_t stage) {
  const int64_t last = plan.stages * plan.virtual_stages - 1;
  PipeInFlight r;
  double alive = 0, heads = 0, pending = 0;
  const std::vector<PipeAction> order = computeOrder(plan, stage);
  for (const PipeAction& a : order) {
    const int64_t k = plan.modelChunk(stage, a.chunk);
    if (a.kind == PipeAction::kWeight) {
      pending -= double(plan.split[k]);
      continue;
    }
    if (a.kind == PipeAction::kBackward && alive == r.blocks)
      r.weight_blocks = std::max(r.weight_blocks, pending);
    if (a.kind == PipeAction::kBackward && plan.schedule == PipeSchedule::kZbH1)
      pending += double(plan.split[k]);
    const double sign = a.kind == PipeAction::kForward ? 1.0 : -1.0;
    alive += sign * double(plan.split[k]);
    if (k == last) heads += sign;
    r.blocks = std::max(r.blocks, alive);
    r.heads = std::max(r.heads, heads);
  }
  for (const PipeAction& a : withTransfers(plan, stage, order))
    if (a.kind != PipeAction::kForward && a.kind != PipeAction::kBackward &&
        a.kind != PipeAction::kWeight)
      r.transfers += 1;
  return r;
}

TEST(PipeInFlight, EqualsWalkingTheScheduleForSmallCounts) {
  std::mt19937 rng(5);
  int compared = 0;
  for (PipeSchedule s : {PipeSchedule::kGpipe, PipeSchedule::k1F1B,
                         PipeSchedule::kInterleaved1F1B, PipeSchedule::kZbH1}) {
    for (int64_t p = 1; p <= 5; ++p) {
      for (int64_t v = 1; v <= (s == PipeSchedule::kInterleaved1F1B ? 4 : 1); ++v) {
        for (int64_t m = 1; m <= 4 * p * v + 6; ++m) {
          if ((s == PipeSchedule::k1F1B || s == PipeSchedule::kZbH1) && m < p) continue;
          if (s == PipeSchedule::kInterleaved1F1B && (p < 2 || v < 2 || m % p != 0)) continue;
          PipePlan plan;
          plan.schedule = s, plan.stages = p, plan.virtual_stages = v, plan.microbatches = m;
          for (int64_t k = 0; k < p * v; ++k) plan.split.push_back(1 + int64_t(rng() % 4));
          for (int64_t st = 0; st < p; ++st) {
            const PipeInFlight want = walked(plan, st), got = pipeInFlight(plan, st);
            const std::string at = std::string(pipeScheduleName(s)) + " p" + std::to_string(p) +
                                   " v" + std::to_string(v) + " m" + std::to_string(m) + " stage " +
                                   std::to_string(st);
            EXPECT_EQ(got.blocks, want.blocks) << at;
            EXPECT_EQ(got.heads, want.heads) << at;
            EXPECT_EQ(got.transfers, want.transfers) << at;
            EXPECT_EQ(got.weight_blocks, want.weight_blocks) << at;
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

TEST(PipeInFlight, TakesNoTimeForATrillionMicroBatches) {
  const auto t0 = std::chrono::steady_clock::now();
  for (PipeSchedule s :
       {PipeSchedule::kGpipe, PipeSchedule::k1F1B, PipeSchedule::kInterleaved1F1B}) {
    PipePlan plan;
    plan.schedule = s, plan.stages = 4, plan.microbatches = 1'000'000'000'000;
    plan.virtual_stages = s == PipeSchedule::kInterleaved1F1B ? 2 : 1;
    plan.split.assign(size_t(plan.stages * plan.virtual_stages), 2);
    const PipeInFlight f = pipeInFlight(plan, 0);
    // GPipe holds every micro-batch; the 1F1B schedules a bounded number whatever m is.
    EXPECT_EQ(f.blocks, s == PipeSchedule::kGpipe  ? 2e12
                        : s == PipeSchedule::k1F1B ? 8.0
                                                   : 22.0)
        << pipeScheduleName(s);
    EXPECT_EQ(f.transfers, s == PipeSchedule::kInterleaved1F1B ? 6e12 : 2e12);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

std::string fromConfigError(const std::vector<std::string>& overrides, int world) {
  try {
    TrainConfig::fromConfig(Config::load(kTinyRun, overrides), world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// tiny.toml: synthetic data of 1024 samples, micro-batch 2.
TEST(PipeBound, OneStepMayDrawEverySampleOnceNotMore) {
  EXPECT_EQ(fromConfigError({"parallel.pp=2", "parallel.pp_microbatches=512"}, 2), "");
  const std::string r = fromConfigError({"parallel.pp=2", "parallel.pp_microbatches=514"}, 2);
  EXPECT_NE(r.find("key 'parallel.pp_microbatches': pp_microbatches(514) x micro_batch_size(2) "
                   "x data-parallel size(1) = 1028 samples per step exceed the 1024 samples of "
                   "data.num_samples"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("hint: at most 512 micro-batches per step"), std::string::npos) << r;
  // Two data-parallel replicas of the pipeline halve the bound.
  EXPECT_NE(
      fromConfigError({"parallel.pp=2", "parallel.pp_microbatches=258"}, 4).find("= 1032 samples"),
      std::string::npos);
  // Without a pipeline the count only accumulates gradients: no per-micro-batch state.
  EXPECT_EQ(fromConfigError({"training.grad_accum_steps=1000"}, 1), "");
}

TEST(PipeBound, ATrillionMicroBatchesAreRefusedAtOnceNamingTheKeyThatSetThem) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string r = fromConfigError({"parallel.pp=2", "parallel.pp_microbatches=1000000000000"}, 2);
  EXPECT_NE(r.find("key 'parallel.pp_microbatches': pp_microbatches(1000000000000)"),
            std::string::npos)
      << r;
  r = fromConfigError({"parallel.pp=2", "training.grad_accum_steps=1000000000000"}, 2);
  EXPECT_NE(r.find("key 'training.grad_accum_steps'"), std::string::npos) << r;
  r = fromConfigError({"parallel.pp=2", "training.global_batch_size=2000000000000"}, 2);
  EXPECT_NE(r.find("key 'training.global_batch_size'"), std::string::npos) << r;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(PipeBound, AFileIsCheckedAgainstItsSamplesWhenOpened) {
  // At configuration time a file's samples are unknown: the trainer checks them at open.
  const TrainConfig tc = TrainConfig::fromConfig(
      Config::load(kTinyRun, {"parallel.pp=2", "parallel.pp_microbatches=64"}), 2);
  EXPECT_EQ(pipeMicrobatchProblem(tc, 128, "x.bin").what, "");
  const PipeBoundProblem p = pipeMicrobatchProblem(tc, 127, "x.bin");
  EXPECT_NE(p.what.find("128 samples per step exceed the 127 samples of x.bin"), std::string::npos)
      << p.what;
  EXPECT_NE(p.hint.find("at most 63 micro-batches"), std::string::npos) << p.hint;
}

// The estimate of a large count on a dataset that allows it: closed form, no list.
TEST(PipeBound, MemoryEstimateOfAMillionMicroBatchesAllocatesNothingPerMicroBatch) {
  const TrainConfig tc = TrainConfig::fromConfig(
      Config::load(kTinyRun, {"parallel.pp=2", "parallel.pp_microbatches=10000000",
                              "data.num_samples=100000000", "training.micro_batch_size=1"}),
      2);
  const auto t0 = std::chrono::steady_clock::now();
  const MemoryEstimate e = estimateMemory(tc);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_GT(e.total(), 0);
  EXPECT_LE(e.blocks_in_flight, 2 * double(tc.model.n_layers));  // 1F1B: at most p in flight
}

}  // namespace
}  // namespace ftb
