#include "trainer/parallel/parallelize.h"

#include "trainer/metrics/device.h"
#include "trainer/model/activation_checkpoint.h"
#include "trainer/parallel/ddp.h"
#include "trainer/parallel/graph_runner.h"
#include "trainer/parallel/pipeline.h"
#include "trainer/parallel/tied_embedding.h"
#include "trainer/parallel/zero.h"

namespace ftb {
namespace {

// This stage's model chunks: chunk c is model chunk c·pp + stage (common/pipeline.h).
std::vector<ModelPart> stageParts(const TrainConfig& tc, int64_t stage) {
  if (tc.layout.pp == 1) return {ModelPart{}};
  const PipePlan& plan = tc.pipeline;
  const int64_t last = plan.stages * plan.virtual_stages - 1;
  std::vector<ModelPart> parts;
  for (int64_t c = 0; c < plan.virtual_stages; ++c) {
    const int64_t k = plan.modelChunk(stage, c), first = plan.firstLayer(k);
    parts.push_back(ModelPart{first, first + plan.split[k], k == 0, k == last});
  }
  return parts;
}

std::unique_ptr<StepRunner> runnerFor(const TrainConfig& tc, Mesh& mesh,
                                      std::vector<Transformer> chunks, GradSync& sync,
                                      torch::ScalarType dtype) {
  if (tc.training.cuda_graphs) return makeCudaGraphRunner(chunks[0], sync);  // one GPU
  if (tc.layout.pp == 1) return makeSequentialRunner(chunks[0], sync, tc.layout.tp);
  return makePipelineRunner(tc.pipeline, mesh.pp_rank, std::move(chunks), sync, mesh.links,
                            tc.layout.tp, tc.model.dim, dtype);
}

// The first and the last stage's copies of a tied embedding, their gradients summed
// (parallel/tied_embedding.h). REQUIRES: mesh.tied_comm set, so this stage holds a copy.
std::unique_ptr<GradSync> tieStages(std::unique_ptr<GradSync> sync,
                                    const std::vector<ModelParam>& params, const Mesh& mesh) {
  for (const ModelParam& p : params)
    if (p.name == "tok_embeddings.weight")
      return tieEmbeddingGradients(std::move(sync), p.tensor, *mesh.tied_comm, mesh.pp_rank == 0,
                                   mesh.dpSize());
  throw std::logic_error("tied embeddings: this stage holds no copy of tok_embeddings.weight");
}

}  // namespace

ParallelModel parallelize(const TrainConfig& tc, Mesh& mesh) {
  setActivationOffload(tc.training.activation_offload == "host");
  const torch::ScalarType dtype =
      tc.training.dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  const ModelOptions opt{dtype,
                         tc.training.activation_checkpointing,
                         static_cast<uint64_t>(tc.training.seed),
                         tc.lora,
                         computeDevice(),
                         tc.training.master_weights == "none"};
  const std::vector<ModelPart> parts = stageParts(tc, mesh.pp_rank);
  std::vector<Transformer> chunks;
  ParallelModel pm;
  const int stage = static_cast<int>(tc.layout.effectiveZeroStage());
  if (stage == 0) {
    std::vector<ModelParam> params;
    for (const ModelPart& part : parts) {
      chunks.push_back(Transformer(tc.model, mesh.tpContext(), opt, nullptr, part));
      const std::vector<ModelParam> p = chunks.back()->paramsInForwardOrder();
      params.insert(params.end(), p.begin(), p.end());
    }
    pm.sync = std::make_unique<DdpSync>(trainableOnly(params), *mesh.dp_comm, tc.layout.tp,
                                        static_cast<int64_t>(tc.comm.bucket_bytes),
                                        tc.training.optimizer_in_backward);
    pm.sync->setFrozen(frozenOnly(params));
    if (mesh.tied_comm) pm.sync = tieStages(std::move(pm.sync), params, mesh);
  } else {
    // REQUIRES (validated): one chunk per stage, holding a root unit, under ZeRO.
    std::unique_ptr<ZeroSync> zero =
        makeZeroSync(stage, *mesh.shard_comm, *mesh.replicate_comm, dtype, tc.layout.tp);
    ZeroSync* z = zero.get();
    chunks.push_back(Transformer(
        tc.model, mesh.tpContext(), opt,
        [z](int64_t layer, const std::vector<ModelParam>& params) { z->addUnit(layer, params); },
        parts[0]));
    if (BlockExecutor* e = zero->blockExecutor()) chunks[0]->setBlockExecutor(e);
    pm.sync = std::move(zero);
  }
  pm.model = chunks[0];
  pm.runner = runnerFor(tc, mesh, std::move(chunks), *pm.sync, dtype);
  return pm;
}

}  // namespace ftb
