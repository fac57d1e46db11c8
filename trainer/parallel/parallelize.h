// Applies the configured layout to the model (torchtitan's parallelize step): builds
// this rank's tensor-parallel slice of the model (with a pipeline, of its stage's model
// chunks), lets ZeRO shard each unit as it is built, and picks the gradient-
// synchronisation strategy (grad_sync.h) and the step runner (step_runner.h). The weights
// are the seeded initialisation; with model.from_pretrained the loop then fills this
// rank's pieces from the HF directory (hf::loadPretrained, after parallelize(), as
// torchtitan's checkpointer loads into the already-parallelised model).
//
// Strategy by layout (TrainConfig::effectiveZeroStage()):
//   0  DdpSync   bucketed all-reduce over the data-parallel group (parallel/ddp.h)
//   1  ZeRO-1, 2  ZeRO-2, 3  ZeRO-3 / FSDP over the shard group (parallel/zero.h)
// Tensor parallelism (tp > 1) composes with each. Pipeline parallelism (pp > 1): the
// stage's chunks run by a pipeline runner (parallel/pipeline.h), the strategy over the
// stage's own parameters.
// REQUIRES: mesh built by buildMesh(dist, tc); both outlive the result. Collective over
// the shard group for ZeRO (flat shards are cut at construction).
#pragma once

#include <memory>

#include "common/run_config.h"
#include "trainer/model/llama.h"
#include "trainer/parallel/grad_sync.h"
#include "trainer/parallel/mesh.h"
#include "trainer/parallel/step_runner.h"

namespace ftb {

struct ParallelModel {
  Transformer model{nullptr};  // with a pipeline, this stage's first chunk
  std::unique_ptr<GradSync> sync;
  std::unique_ptr<StepRunner> runner;
};

ParallelModel parallelize(const TrainConfig& tc, Mesh& mesh);

}  // namespace ftb
