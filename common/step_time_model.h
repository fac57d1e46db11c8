// A model of one optimizer step's time, from the config alone and two measured figures of
// the machines: the GEMM rate one rank gets and the all-reduce bus bandwidth of the
// world (trainer --probe). `sweep_tagger tune` orders a search space by it before any run,
// and reports it against every measured step. No libtorch.
//
// Terms (each rank's view; the step time is the slowest rank's):
//   compute  = FLOPs the rank computes in the step / gemm_flops. FLOPs: the step's tokens on
//              this rank's data-parallel slice (micro_batch · grad_accum · seq_len) times
//              trainingFlops() per token (full or LoRA), divided by tp, and for a pipeline
//              the share of its costliest stage (layerCosts over the plan's split);
//              activation checkpointing every n-th block and ZeRO-3 (which recomputes every
//              block) add a block forward (a third of its training FLOPs) per recomputed
//              block.
//   comm     = bytes each rank moves in collectives / busbw, with nccl-tests' definition:
//              an all-reduce of S bytes over n ranks takes S · 2(n−1)/n / busbw, a
//              reduce-scatter or an all-gather half that. Per layout:
//                DDP     one all-reduce of the trainable gradients per step;
//                ZeRO-1  that all-reduce and an all-gather of the updated parameters;
//                ZeRO-2  a reduce-scatter per micro-batch and the all-gather per step;
//                ZeRO-3  per micro-batch the blocks all-gathered twice (forward and
//                        recompute, compute dtype) and their gradients reduce-scattered
//                        (fp32); the rest once per step;
//                tp      per block and micro-batch two all-reduces of the activations
//                        forward and two backward (two more to recompute);
//                pp      each activation and its gradient across each stage boundary.
//              Gradients are fp32 (bf16 with training.master_weights = "none"). Nothing is
//              assumed hidden behind compute: the model is pessimistic where a layout
//              overlaps its communication, and counts no latency per message.
//   bubble   = a pipeline's stage time × b / (1 − b), b = theoreticalBubble(plan).
//   total    = (compute + bubble) · compute_scale + comm. compute_scale (1 before any run)
//              is what the compute really costs against the GEMM rate (attention, norms,
//              the optimizer): tune fits it to measured steps; the bubble scales with the
//              stage time it idles against.
#pragma once

#include <string>
#include <vector>

#include "common/run_config.h"

namespace ftb {

// Measured figures of the machines a space runs on (trainer --probe).
struct MachineFigures {
  double gemm_flops = 0;  // FLOP/s of one rank, in the run's dtype and threads
  double busbw_Bps = 0;   // all-reduce bus bandwidth of the world; 0 = world 1
  std::string gemm_source, link_source;  // one line each: where the figure comes from
};

struct StepTerm {
  std::string name;  // "compute", "comm: DDP all-reduce", "pipeline bubble", ...
  double seconds = 0;
};

struct StepPrediction {
  double flops = 0;       // FLOPs of the rank with the most work, recompute included
  double comm_bytes = 0;  // bytes the busiest rank moves (the definition above)
  double compute_s = 0, comm_s = 0, bubble_s = 0;
  std::vector<StepTerm> terms;  // compute first, then each comm term, then the bubble
  double total(double compute_scale = 1) const {
    return (compute_s + bubble_s) * compute_scale + comm_s;
  }
  std::string largestTerm() const;  // the name of the largest term
};

// REQUIRES: tc from TrainConfig::fromConfig; m.gemm_flops > 0; m.busbw_Bps > 0 when
// tc.layout.world_size > 1 (else comm terms are infinite: the model cannot order them).
StepPrediction predictStep(const TrainConfig& tc, const MachineFigures& m);

}  // namespace ftb
