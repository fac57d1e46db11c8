// The device mesh: world = pp x dp_replicate x dp_shard x tp, pipeline stages
// outermost, tp innermost.
//
// Rank layout (Invariant): rank = pp_rank * inner + (replicate * dp_shard + shard) * tp +
// tp_rank with inner = dp_replicate * dp_shard * tp, so a tensor-parallel group is `tp`
// consecutive ranks (on one node when nodes hold a multiple of tp ranks) and a pipeline
// stage is `inner` consecutive ranks: the launcher places ranks node-major (rank =
// node * nproc_per_node + local rank), so stages fall across nodes and tp within one.
// Groups this rank belongs to (all within its stage):
//   tp         ranks with the same (replicate, shard)      - Megatron collectives
//   shard      ranks with the same (replicate, tp_rank)    - ZeRO reduce-scatter/all-gather
//   replicate  ranks with the same (shard, tp_rank)        - HSDP gradient all-reduce
//   dp         ranks with the same tp_rank                 - DDP all-reduce
// Pipeline links join the ranks of the same inner index in neighbouring stages; with tied
// embeddings a group joins those of the first and the last stage.
// The data-parallel index (which slice of the global batch this rank trains on) is
// replicate * dp_shard + shard; every stage of a pipeline trains on the same slice.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "common/run_config.h"
#include "trainer/comm/tp.h"
#include "trainer/parallel/dist.h"

namespace ftb {

struct Mesh {
  int rank = 0, world = 1;
  int64_t tp = 1, dp_shard = 1, dp_replicate = 1;
  int64_t tp_rank = 0, shard_rank = 0, replicate_rank = 0;
  // Non-owning; valid while the Mesh and the Distributed it was built from live. Only
  // the groups this layout uses are real (others are self Comms), and a group with
  // every rank is the world Comm itself, so no ranks pair twice for the same members.
  Comm *tp_comm = nullptr, *shard_comm = nullptr, *replicate_comm = nullptr, *dp_comm = nullptr;
  std::vector<std::unique_ptr<Comm>> owned;
  int64_t pp = 1, pp_rank = 0;  // pipeline stages and this rank's stage
  // Links to the neighbour stages this rank's schedule talks to, by stage (pp > 1).
  std::map<int64_t, P2PLink*> links;
  std::vector<std::unique_ptr<P2PLink>> owned_links;
  // Tied embeddings in a pipeline (model.tie_embeddings, pp > 1, trained): the first and
  // the last stage's ranks of this inner index (parallel/tied_embedding.h); null elsewhere.
  Comm* tied_comm = nullptr;

  int64_t dpRank() const { return replicate_rank * dp_shard + shard_rank; }
  int64_t dpSize() const { return dp_replicate * dp_shard; }
  TpContext tpContext() const { return {static_cast<int>(tp_rank), static_cast<int>(tp), tp_comm}; }
};

// REQUIRES: tc validated (product of degrees == world size). Collective: every rank
// calls it; it creates the groups in the same order everywhere.
Mesh buildMesh(Distributed& dist, const TrainConfig& tc);

}  // namespace ftb
