#include "common/pipeline_limits.h"

#include <algorithm>
#include <optional>

#include "common/checked_math.h"

namespace ftb {

PipeBoundProblem pipeMicrobatchProblem(const TrainConfig& tc, int64_t dataset_samples,
                                       const std::string& dataset) {
  const int64_t m = tc.training.grad_accum_steps, b = tc.training.micro_batch_size;
  const int64_t dp = tc.layout.dpSize();
  const std::optional<int64_t> step = checkedProduct({m, b, dp});
  if (tc.layout.pp == 1 || (step && *step <= dataset_samples)) return {};
  return {"pp_microbatches(" + std::to_string(m) + ") x micro_batch_size(" + std::to_string(b) +
              ") x data-parallel size(" + std::to_string(dp) +
              ") = " + (step ? std::to_string(*step) : std::string("more than 2^63")) +
              " samples per step exceed the " + std::to_string(dataset_samples) + " samples of " +
              dataset + ": one step would read a sample twice",
          "at most " + std::to_string(dataset_samples / (b * dp)) +
              " micro-batches per step with this data: lower parallel.pp_microbatches (or "
              "training.grad_accum_steps / global_batch_size), or train on more samples"};
}

void checkPipeMicrobatchBound(const Config& cfg, const TrainConfig& tc) {
  if (tc.data.data_source != "synthetic") return;  // the trainer checks a file when it opens it
  const PipeBoundProblem p = pipeMicrobatchProblem(tc, tc.data.num_samples, "data.num_samples");
  if (p.what.empty()) return;
  const char* key = cfg.where("parallel.pp_microbatches") != "default" ? "parallel.pp_microbatches"
                    : cfg.getInt("training.global_batch_size") > 0 ? "training.global_batch_size"
                                                                   : "training.grad_accum_steps";
  cfg.fail(key, p.what, p.hint);
}

namespace {

// The running maxima of a stage's compute order (memory_estimate.h): blocks and heads alive.
PipeInFlight walkInFlight(const PipePlan& plan, int64_t stage) {
  const int64_t last = plan.stages * plan.virtual_stages - 1;
  PipeInFlight r;
  double alive = 0, heads = 0;
  for (const PipeAction& a : computeOrder(plan, stage)) {
    const int64_t k = plan.modelChunk(stage, a.chunk);
    if (a.kind == PipeAction::kWeight) continue;  // no block activations of its own
    const double sign = a.kind == PipeAction::kForward ? 1.0 : -1.0;
    alive += sign * double(plan.split[k]);
    if (k == last) heads += sign;
    r.blocks = std::max(r.blocks, alive);
    r.heads = std::max(r.heads, heads);
  }
  return r;
}

}  // namespace

// GPipe forwards all m micro-batches before the first backward; 1F1B's stage s holds at
// most min(p − s, m) (its warm-up p − s − 1 and the one before the first backward); both
// run chunk 0 alone. Interleaved 1F1B's warm-up W = 2(p − s − 1) + (v − 1)p forwards is
// followed by (forward, backward) pairs whose in-flight count repeats with period p·v (p·v
// forward steps and p·v backward steps each cover every chunk p times), so the order of
// m' = ceil((W + p·v) / v) micro-batches has the same maxima as any m > m'. Each compute
// action receives unless it is the first model chunk's forward or the last's backward and
// sends unless it is the last's forward or the first's backward.
PipeInFlight pipeInFlight(const PipePlan& plan, int64_t stage) {
  const int64_t p = plan.stages, v = plan.virtual_stages, m = plan.microbatches;
  const int64_t last = p * v - 1, k0 = plan.modelChunk(stage, 0);
  const bool interleaved = plan.schedule == PipeSchedule::kInterleaved1F1B;
  PipeInFlight r;
  for (int64_t c = 0; c < (interleaved ? v : 1); ++c) {
    const int64_t k = plan.modelChunk(stage, c);
    r.transfers += 2.0 * double(m) * double(int(k > 0) + int(k < last));
  }
  if (interleaved) {
    PipePlan capped = plan;
    const int64_t warmup = 2 * (p - stage - 1) + (v - 1) * p;
    capped.microbatches = std::min(m, (warmup + p * v + v - 1) / v);
    const PipeInFlight w = walkInFlight(capped, stage);
    r.blocks = w.blocks;
    r.heads = w.heads;
    return r;
  }
  const double n =
      plan.schedule == PipeSchedule::kGpipe ? double(m) : double(std::min(p - stage, m));
  r.blocks = n * double(plan.split[k0]);
  r.heads = k0 == last ? n : 0.0;
  // zb_h1: before each steady-state backward, p − s forwards alive and s weight passes
  // pending (zbH1Order), at most the m − (p − s) micro-batches that follow the warm-up.
  if (plan.schedule == PipeSchedule::kZbH1)
    r.weight_blocks = double(std::min(stage, std::max<int64_t>(0, m - (p - stage)))) *
                      double(plan.split[k0]);
  return r;
}

}  // namespace ftb
