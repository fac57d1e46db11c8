// One step's forward and backward over this rank's micro-batches, behind one interface so
// the training loop never asks which layout it runs: the plain sequential loop (every
// layout without a pipeline: makeSequentialRunner), a pipeline stage's schedule
// (parallel/pipeline.h) or one GPU's step replayed from a CUDA graph (training.cuda_graphs:
// parallel/graph_runner.h). parallelize() picks it.
//
// Contract of run(mine, positions): every micro-batch's loss is Σ token CE / positions
// (positions = the global batch's loss positions); gradients accumulate into the model's
// parameters, and the GradSync hooks are called as grad_sync.h orders them (beginStep()
// stays with the caller). Returns what this rank measured and the loss terms it computed.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "trainer/data/dataset.h"
#include "trainer/model/llama.h"
#include "trainer/parallel/grad_sync.h"

namespace ftb {

struct FwdBwdStats {
  // Σ token CE, padded and dataset tokens of the micro-batches whose loss this rank
  // computes (a pipeline's last stage; every rank without a pipeline).
  double loss_sum = 0, padded = 0, dataset = 0;
  double fwd_s = 0, bwd_s = 0;  // compute, without the communication waited on inside
  double comm_s = 0;            // collectives and pipeline transfers waited on during the step
  double bubble_s = 0;    // pipeline: blocked receiving from a neighbour stage (part of comm_s)
  int64_t p2p_bytes = 0;  // pipeline: bytes sent to neighbour stages
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual FwdBwdStats run(const StepBatches& mine, double positions) = 0;
  // How many ranks load each sample of the global batch (tp, times pp with a pipeline):
  // the world sum of every rank's positions counts each this many times.
  virtual int64_t sampleCopies() const = 0;
};

// The plain loop: forward, loss and backward of each micro-batch in turn.
std::unique_ptr<StepRunner> makeSequentialRunner(Transformer model, GradSync& sync, int64_t tp);

}  // namespace ftb
