#include "trainer/parallel/mesh.h"

#include <algorithm>

namespace ftb {

namespace {

// Links between the pipeline neighbours of this rank's inner index: (s, s+1), and
// (0, pp-1) when the schedule wraps around (interleaved chunks). Every rank creates its
// links in one global order of the stage pairs, so no two ranks wait on each other.
void buildLinks(Distributed& dist, const TrainConfig& tc, Mesh& m) {
  const int64_t inner = m.world / m.pp, local = m.rank % inner;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t s = 0; s + 1 < m.pp; ++s) pairs.push_back({s, s + 1});
  if (tc.pipeline.virtual_stages > 1 && m.pp > 2) pairs.push_back({0, m.pp - 1});
  std::sort(pairs.begin(), pairs.end());
  for (const auto& [a, b] : pairs) {
    if (a != m.pp_rank && b != m.pp_rank) continue;
    const int64_t peer = a == m.pp_rank ? b : a;
    const int peer_rank = static_cast<int>(peer * inner + local);
    const std::string name =
        "pp_" + std::to_string(a * inner + local) + "_" + std::to_string(b * inner + local);
    m.owned_links.push_back(dist.newLink(
        name, PeerInfo{static_cast<int>(peer), peer_rank, dist.members.at(peer_rank).host}));
    m.links[peer] = m.owned_links.back().get();
  }
}

}  // namespace

Mesh buildMesh(Distributed& dist, const TrainConfig& tc) {
  Mesh m;
  m.rank = dist.env.rank;
  m.world = dist.env.world_size;
  m.tp = tc.layout.tp;
  m.dp_shard = tc.layout.dp_shard;
  m.dp_replicate = tc.layout.dp_replicate;
  m.pp = tc.layout.pp;
  const int64_t inner = m.world / m.pp;
  m.pp_rank = m.rank / inner;
  const int64_t local = m.rank % inner;
  m.tp_rank = local % m.tp;
  m.shard_rank = (local / m.tp) % m.dp_shard;
  m.replicate_rank = local / (m.tp * m.dp_shard);
  auto rankOf = [&](int64_t rep, int64_t sh, int64_t t) {
    return static_cast<int>(m.pp_rank * inner + (rep * m.dp_shard + sh) * m.tp + t);
  };
  std::vector<int> tp_ranks, shard_ranks, rep_ranks, dp_ranks;
  for (int64_t t = 0; t < m.tp; ++t) tp_ranks.push_back(rankOf(m.replicate_rank, m.shard_rank, t));
  for (int64_t s = 0; s < m.dp_shard; ++s)
    shard_ranks.push_back(rankOf(m.replicate_rank, s, m.tp_rank));
  for (int64_t r = 0; r < m.dp_replicate; ++r)
    rep_ranks.push_back(rankOf(r, m.shard_rank, m.tp_rank));
  for (int64_t r = 0; r < m.dp_replicate; ++r)
    for (int64_t s = 0; s < m.dp_shard; ++s) dp_ranks.push_back(rankOf(r, s, m.tp_rank));
  // Group names encode their members, so distinct groups never share store keys.
  auto name = [](const char* kind, const std::vector<int>& ranks) {
    std::string n = kind;
    for (int r : ranks) n += "_" + std::to_string(r);
    return n;
  };
  // Every rank takes the same branches (they depend on tc only), so the collective
  // group creation stays in the same order everywhere.
  auto group = [&](const char* kind, const std::vector<int>& ranks) -> Comm* {
    if (static_cast<int>(ranks.size()) == m.world) return dist.world.get();
    m.owned.push_back(dist.newGroup(name(kind, ranks), ranks));
    return m.owned.back().get();
  };
  auto self = [&m]() -> Comm* {
    m.owned.push_back(makeSelfComm());
    return m.owned.back().get();
  };
  m.tp_comm = m.tp > 1 ? group("tp", tp_ranks) : self();
  if (tc.layout.effectiveZeroStage() > 0) {  // ZeRO: shard group, plus replicas for HSDP
    m.shard_comm = group("shard", shard_ranks);
    m.replicate_comm = m.dp_replicate > 1 ? group("rep", rep_ranks) : self();
    m.dp_comm = self();  // unused: gradients go through shard (+ replicate)
  } else {
    m.dp_comm = m.dpSize() > 1 ? group("dp", dp_ranks) : self();
    m.shard_comm = self();
    m.replicate_comm = self();
  }
  if (m.pp > 1) buildLinks(dist, tc, m);
  if (m.pp > 1 && tc.model.tie_embeddings && !tc.lora.enabled() &&
      (m.pp_rank == 0 || m.pp_rank == m.pp - 1)) {
    const int first = static_cast<int>(local), last = static_cast<int>((m.pp - 1) * inner + local);
    m.tied_comm = group("tied", {first, last});
  }
  return m;
}

}  // namespace ftb
