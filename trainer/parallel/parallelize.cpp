#include "trainer/parallel/parallelize.h"

#include "trainer/parallel/ddp.h"
#include "trainer/parallel/zero.h"

namespace ftb {

ParallelModel parallelize(const TrainConfig& tc, Mesh& mesh) {
  const torch::ScalarType dtype = tc.dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  const ModelOptions opt{dtype, tc.activation_checkpointing, static_cast<uint64_t>(tc.seed),
                         tc.lora};
  ParallelModel pm;
  const int stage = static_cast<int>(tc.effectiveZeroStage());
  if (stage == 0) {
    pm.model = Transformer(tc.model, mesh.tpContext(), opt);
    const std::vector<ModelParam> all = pm.model->paramsInForwardOrder();
    pm.sync = std::make_unique<DdpSync>(trainableOnly(all), *mesh.dp_comm, tc.tp,
                                        static_cast<int64_t>(tc.bucket_bytes));
    pm.sync->setFrozen(frozenOnly(all));
    return pm;
  }
  std::unique_ptr<ZeroSync> zero =
      makeZeroSync(stage, *mesh.shard_comm, *mesh.replicate_comm, dtype, tc.tp);
  ZeroSync* z = zero.get();
  pm.model = Transformer(tc.model, mesh.tpContext(), opt,
                         [z](int64_t layer, const std::vector<ModelParam>& params) {
                           z->addUnit(layer, params);
                         });
  if (BlockExecutor* e = zero->blockExecutor()) pm.model->setBlockExecutor(e);
  pm.sync = std::move(zero);
  return pm;
}

}  // namespace ftb
