#include "trainer/parallel/mesh.h"

namespace ftb {

Mesh buildMesh(Distributed& dist, const TrainConfig& tc) {
  Mesh m;
  m.rank = dist.env.rank;
  m.world = dist.env.world_size;
  m.tp = tc.tp;
  m.dp_shard = tc.dp_shard;
  m.dp_replicate = tc.dp_replicate;
  m.tp_rank = m.rank % m.tp;
  m.shard_rank = (m.rank / m.tp) % m.dp_shard;
  m.replicate_rank = m.rank / (m.tp * m.dp_shard);
  auto rankOf = [&](int64_t rep, int64_t sh, int64_t t) {
    return static_cast<int>((rep * m.dp_shard + sh) * m.tp + t);
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
  m.tp_comm = dist.newGroup(name("tp", tp_ranks), tp_ranks);
  m.shard_comm = dist.newGroup(name("shard", shard_ranks), shard_ranks);
  m.replicate_comm = dist.newGroup(name("rep", rep_ranks), rep_ranks);
  m.dp_comm = dist.newGroup(name("dp", dp_ranks), dp_ranks);
  return m;
}

}  // namespace ftb
