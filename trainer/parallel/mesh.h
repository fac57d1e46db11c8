// The device mesh: world = dp_replicate x dp_shard x tp, tp innermost.
//
// Rank layout (Invariant): rank = (replicate * dp_shard + shard) * tp + tp_rank, so
// a tensor-parallel group is `tp` consecutive ranks (on one node when nodes hold a
// multiple of tp ranks). Groups this rank belongs to:
//   tp         ranks with the same (replicate, shard)      - Megatron collectives
//   shard      ranks with the same (replicate, tp_rank)    - ZeRO reduce-scatter/all-gather
//   replicate  ranks with the same (shard, tp_rank)        - HSDP gradient all-reduce
//   dp         ranks with the same tp_rank                 - DDP all-reduce
// The data-parallel index (which slice of the global batch this rank trains on) is
// replicate * dp_shard + shard.
#pragma once

#include <memory>

#include "trainer/parallel/dist.h"
#include "trainer/parallel/tp.h"
#include "trainer/run_config.h"

namespace ftb {

struct Mesh {
  int rank = 0, world = 1;
  int64_t tp = 1, dp_shard = 1, dp_replicate = 1;
  int64_t tp_rank = 0, shard_rank = 0, replicate_rank = 0;
  std::unique_ptr<Comm> tp_comm, shard_comm, replicate_comm, dp_comm;

  int64_t dpRank() const { return replicate_rank * dp_shard + shard_rank; }
  int64_t dpSize() const { return dp_replicate * dp_shard; }
  TpContext tpContext() const {
    return {static_cast<int>(tp_rank), static_cast<int>(tp), tp_comm.get()};
  }
};

// REQUIRES: tc validated (product of degrees == world size). Collective: every rank
// calls it; it creates the groups in the same order everywhere.
Mesh buildMesh(Distributed& dist, const TrainConfig& tc);

}  // namespace ftb
