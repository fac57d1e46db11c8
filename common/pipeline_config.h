// The pipeline keys of a run config, resolved into TrainConfig::pipeline (common/pipe_plan.h).
#pragma once

#include "common/config.h"
#include "common/run_config.h"

namespace ftb {

// Builds c.pipeline from the [parallel] pipeline keys and checks them against the layout,
// the model and the micro-batches: pp <= n_layers; pp_virtual_stages > 1 exactly with
// interleaved_1f1b; 1f1b and interleaved need m = grad_accum_steps >= pp (interleaved a
// multiple of pp); without pp_split, pp · pp_virtual_stages divides n_layers for interleaved;
// a pp_split has pp · pp_virtual_stages entries >= 1 summing to n_layers ([] = balanced by
// FLOPs); what a pipeline does not run yet is refused. Throws ConfigError.
// REQUIRES: c.model, c.data, c.layout (resolved) and c.training.grad_accum_steps (resolved)
// set by TrainConfig::fromConfig.
void resolvePipeline(const Config& cfg, TrainConfig& c);

}  // namespace ftb
