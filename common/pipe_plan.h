// The validated pipeline of a run: TrainConfig::pipeline, built once by
// TrainConfig::fromConfig (common/pipeline_config.h) and read by the stage executor, the
// step log and the memory estimator. No libtorch, no config: plain data.
#pragma once

#include <cstdint>
#include <vector>

namespace ftb {

// kZbH1: zero-bubble H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): 1F1B with
// each backward split into the input-gradient pass and the weight-gradient pass, the weight
// passes of stage s deferred by s micro-batches into the bubble; one chunk per stage.
enum class PipeSchedule { kGpipe, k1F1B, kInterleaved1F1B, kZbH1 };

// "gpipe" | "1f1b" | "interleaved_1f1b" | "zb_h1"
const char* pipeScheduleName(PipeSchedule s);

// Terms: p = stages (ranks along the pipeline, parallel.pp), v = virtual_stages (model
// chunks per stage), S = p·v model chunks in model order, m = microbatches per optimizer
// step (= training.grad_accum_steps). Chunk c of stage s is model chunk c·p + s.
// Invariant (after TrainConfig::fromConfig): split has p·v entries >= 1 summing to
// model.n_layers; 1F1B, zb_h1 and interleaved have m >= p, interleaved m % p == 0; zb_h1 v = 1.
struct PipePlan {
  PipeSchedule schedule = PipeSchedule::k1F1B;
  int64_t stages = 1, virtual_stages = 1, microbatches = 1;
  std::vector<int64_t> split;  // blocks per model chunk, size stages·virtual_stages
  // first model layer of model chunk k: sum of split[0..k)
  int64_t firstLayer(int64_t model_chunk) const;
  int64_t modelChunk(int64_t stage, int64_t chunk) const { return chunk * stages + stage; }
};

}  // namespace ftb
