// training.cuda_graphs: the sequential runner's forward and backward captured once into a
// CUDA graph and replayed at every later step, so a step costs one graph launch instead of
// thousands of kernel launches from the host.
//
// Contract of makeCudaGraphRunner(model, sync, warmup_steps) (step_runner.h's run contract):
// - Where it runs: one GPU, world size 1, one micro-batch per step of a fixed shape, no LoRA
//   dropout, no offload, no optimizer step inside backward, DDP's gradient buffers (zero
//   stage 0). common/run_config.cpp refuses every other combination with a reason before a
//   run starts (checkCudaGraphs), so REQUIRES all of that here.
// - Steps: the first `warmup_steps` run eagerly, the next one captures (the capture runs
//   nothing) and replays, every later one replays. All of them run on one side stream of the
//   device, which waits for the work queued before run() and which the current stream waits
//   for after it; the batch goes into static device buffers first (the graph reads them),
//   and the loss normaliser too (a device scalar, not a constant of the graph).
// - Gradients accumulate into the buffers DDP made before the capture (their addresses are
//   what the graph writes), zeroed by the optimizer's step as in every layout.
// - Timing: a replay is one phase; its seconds go to fwd_s (bwd_s stays 0): forward and
//   backward cannot be told apart inside a graph. The capture's step (warmup_steps) is slow:
//   metrics.skip_first_steps > warmup_steps keeps it out of the run's figures. The losses equal an
//   eager run's within the GPU's reduction order (the same kernels, the same order).
// - In a program without CUDA (`trainer`) it throws std::logic_error: a run on a GPU runs
//   `trainer_cuda` (metrics/device.h).
#pragma once

#include <cstdint>
#include <memory>

#include "trainer/parallel/step_runner.h"

namespace ftb {

inline constexpr int64_t kCudaGraphWarmupSteps = 2;

std::unique_ptr<StepRunner> makeCudaGraphRunner(Transformer model, GradSync& sync,
                                                int64_t warmup_steps = kCudaGraphWarmupSteps);

}  // namespace ftb
