// buildMesh (trainer/parallel/mesh.h) for every rank of a layout at once, in one process:
// each rank is a thread with its own Distributed over one shared in-memory store (c10d's
// HashStore) and Gloo on the loopback. A group's members are not read from the Mesh but
// proven: every rank all-reduces a one-hot vector of the world over each of its groups, so
// the sum names exactly the ranks that joined it; each pipeline link carries its sender's
// rank to the other end. What it proves beyond the end-to-end runs, which only see that a
// layout trains like world size 1: which global ranks form the tp, shard, replicate and dp
// groups, the pipeline links and the tied-embedding pair for DDP × tp, HSDP × tp, pp × dp ×
// tp and interleaved pp = 4 (links (s, s+1) and the wrap-around (0, 3)); each rank's
// coordinates and data-parallel index; the groups a layout does not use are size-1 Comms;
// a group with every rank is the world Comm itself; and every rank creates its groups in
// an order that lets all of them finish.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "common/config.h"
#include "trainer/parallel/mesh.h"

namespace ftb {
namespace mesh_test {

// What one rank's Mesh says, and what its groups proved.
struct RankView {
  int64_t tp_rank = -1, shard_rank = -1, replicate_rank = -1, pp_rank = -1, dp_rank = -1;
  std::map<std::string, std::vector<int>> members;  // group kind -> ranks that joined it
  std::map<std::string, int> group_rank;            // group kind -> this rank's index in it
  std::map<std::string, bool> is_world;             // group kind -> the world Comm itself
  std::map<int64_t, int> link_peer;                 // peer stage -> the rank at its end
  std::string error;
};

TrainConfig layoutConfig(int world, std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), "model.n_layers=8");
  return TrainConfig::fromConfig(Config::load(FTB_SOURCE_DIR "/configs/runs/tiny.toml", overrides),
                                 world);
}

// The global ranks that took part in an all-reduce over `c` (each adds 1 at its own rank).
std::vector<int> provenMembers(Comm& c, int rank, int world) {
  torch::Tensor t = torch::zeros({world}, torch::kFloat32);
  t[rank] = 1;
  c.allReduceSum(t);
  std::vector<int> out;
  for (int r = 0; r < world; ++r) {
    const float v = t[r].item<float>();
    if (v == 1) out.push_back(r);
    if (v != 0 && v != 1) out.push_back(-1000 * r);  // a rank counted twice shows as a bad entry
  }
  return out;
}

void proveGroups(Distributed& d, const Mesh& m, RankView& v) {
  const int rank = d.env.rank, world = d.env.world_size;
  std::vector<std::pair<std::string, Comm*>> groups = {{"tp", m.tp_comm},
                                                       {"shard", m.shard_comm},
                                                       {"replicate", m.replicate_comm},
                                                       {"dp", m.dp_comm}};
  if (m.tied_comm) groups.push_back({"tied", m.tied_comm});
  for (const auto& [kind, comm] : groups) {  // every rank in this order: collectives match
    v.members[kind] = provenMembers(*comm, rank, world);
    v.group_rank[kind] = comm->rank();
    v.is_world[kind] = comm == d.world.get();
  }
  // Every link: this rank's number to the peer, the peer's back; all posted, then waited.
  std::vector<torch::Tensor> out, in;
  std::vector<std::unique_ptr<PendingWork>> works;
  for (const auto& [stage, link] : m.links) {
    out.push_back(torch::full({1}, float(rank)));
    in.push_back(torch::full({1}, -1.0f));
    works.push_back(link->sendAsync(out.back(), 7, "rank"));
    works.push_back(link->recvAsync(in.back(), 7, "rank"));
  }
  for (auto& w : works) w->wait();
  size_t i = 0;
  for (const auto& [stage, link] : m.links) v.link_peer[stage] = int(in[i++].item<float>());
}

// Every rank keeps its groups until all ranks are done with theirs: a rank that closed its
// connections early could cut off a peer still finishing a collective.
struct AllDone {
  std::mutex mu;
  std::condition_variable cv;
  int left;
  void arriveAndWait() {
    std::unique_lock<std::mutex> lock(mu);
    if (--left == 0) cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return left == 0; });
  }
};

void runRank(const TrainConfig& tc, int rank, int world, c10::intrusive_ptr<c10d::Store> store,
             RankView& v, AllDone& done) {
  try {
    Distributed d;
    d.env.rank = rank;
    d.env.world_size = world;
    d.env.master_addr = "127.0.0.1";
    d.store = store;
    d.timeout = std::chrono::milliseconds(30000);
    d.backend = "gloo";
    d.local_collectives = "off";  // every group on Gloo: threads of one process
    d.pp_local_p2p = false;
    for (int r = 0; r < world; ++r) d.members.push_back(CommMember{r, "localhost", "127.0.0.1"});
    std::vector<int> all;
    for (int r = 0; r < world; ++r) all.push_back(r);
    d.world = d.newGroup("world", all);
    Mesh m = buildMesh(d, tc);
    v.tp_rank = m.tp_rank;
    v.shard_rank = m.shard_rank;
    v.replicate_rank = m.replicate_rank;
    v.pp_rank = m.pp_rank;
    v.dp_rank = m.dpRank();
    proveGroups(d, m, v);
    done.arriveAndWait();
  } catch (const std::exception& e) {
    v.error = e.what();
    done.arriveAndWait();
  }
}

// Every rank of `tc`'s layout builds its mesh on a thread of its own.
std::vector<RankView> buildEveryRank(const TrainConfig& tc) {
  const int world = tc.layout.world_size;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<RankView> views(world);
  AllDone done;
  done.left = world;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { runRank(tc, r, world, store, views[r], done); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(views[r].error, "") << "rank " << r;
  return views;
}

using Groups = std::vector<std::vector<int>>;

// Each rank's group of `kind` is the entry of `want` that holds it, and its index there is
// its rank in the group; `want` empty: a size-1 group of the rank alone.
void expectGroups(const std::vector<RankView>& views, const std::string& kind, const Groups& want) {
  for (int r = 0; r < int(views.size()); ++r) {
    std::vector<int> expect = {r};
    for (const auto& g : want)
      if (std::find(g.begin(), g.end(), r) != g.end()) expect = g;
    EXPECT_EQ(views[r].members.at(kind), expect) << kind << " group of rank " << r;
    const int index = int(std::find(expect.begin(), expect.end(), r) - expect.begin());
    EXPECT_EQ(views[r].group_rank.at(kind), index) << kind << " rank of rank " << r;
  }
}

TEST(Mesh, DdpTimesTpGroupsConsecutiveRanksForTpAndStridedRanksForData) {
  // world 8 = dp_replicate 4 x tp 2, no ZeRO: tp pairs (2r, 2r+1); dp = the same tp rank.
  const std::vector<RankView> v = buildEveryRank(layoutConfig(8, {"parallel.tp=2"}));
  expectGroups(v, "tp", {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expectGroups(v, "dp", {{0, 2, 4, 6}, {1, 3, 5, 7}});
  expectGroups(v, "shard", {});  // unused without ZeRO
  expectGroups(v, "replicate", {});
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(v[r].tp_rank, r % 2);
    EXPECT_EQ(v[r].replicate_rank, r / 2);
    EXPECT_EQ(v[r].dp_rank, r / 2) << "the batch slice of rank " << r;
    EXPECT_FALSE(v[r].members.count("tied"));
    EXPECT_TRUE(v[r].link_peer.empty());
  }
}

TEST(Mesh, HsdpShardsWithinAReplicaAndAllReducesAcrossReplicasAtOneTpRank) {
  // world 8 = dp_replicate 2 x dp_shard 2 x tp 2, ZeRO-2: rank = (rep * 2 + shard) * 2 + tp.
  const std::vector<RankView> v = buildEveryRank(
      layoutConfig(8, {"parallel.tp=2", "parallel.dp_shard=2", "parallel.zero_stage=2"}));
  expectGroups(v, "tp", {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expectGroups(v, "shard", {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  expectGroups(v, "replicate", {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  expectGroups(v, "dp", {});  // ZeRO: gradients go through shard and replicate
  const int64_t shard[8] = {0, 0, 1, 1, 0, 0, 1, 1};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(v[r].tp_rank, r % 2);
    EXPECT_EQ(v[r].shard_rank, shard[r]);
    EXPECT_EQ(v[r].replicate_rank, r / 4);
    EXPECT_EQ(v[r].dp_rank, (r / 4) * 2 + shard[r]) << "replicate * dp_shard + shard";
  }
}

TEST(Mesh, PipelineStagesAreBlocksOfConsecutiveRanksLinkedAtTheSameInnerIndex) {
  // world 8 = pp 2 x dp 2 x tp 2 with tied embeddings: stage 0 is ranks 0-3, stage 1 4-7.
  const std::vector<RankView> v = buildEveryRank(layoutConfig(
      8, {"parallel.pp=2", "parallel.tp=2", "parallel.pp_microbatches=2",
          "model.tie_embeddings=true"}));
  expectGroups(v, "tp", {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  expectGroups(v, "dp", {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  expectGroups(v, "tied", {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(v[r].pp_rank, r / 4);
    EXPECT_EQ(v[r].dp_rank, (r % 4) / 2) << "every stage trains on the same slice";
    const int64_t other = 1 - r / 4;
    EXPECT_EQ(v[r].link_peer, (std::map<int64_t, int>{{other, other == 1 ? r + 4 : r - 4}}));
  }
}

TEST(Mesh, InterleavedStagesLinkTheirNeighboursAndTheFirstToTheLast) {
  // pp 4 of one rank each, two chunks per stage: the schedule wraps from stage 3 to 0.
  const std::vector<RankView> v = buildEveryRank(layoutConfig(
      4, {"parallel.pp=4", "parallel.pp_schedule=\"interleaved_1f1b\"",
          "parallel.pp_virtual_stages=2", "parallel.pp_microbatches=4",
          "model.tie_embeddings=true"}));
  const std::vector<std::map<int64_t, int>> links = {
      {{1, 1}, {3, 3}}, {{0, 0}, {2, 2}}, {{1, 1}, {3, 3}}, {{0, 0}, {2, 2}}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(v[r].pp_rank, r);
    EXPECT_EQ(v[r].link_peer, links[r]) << "links of stage " << r;
    for (const char* kind : {"tp", "shard", "replicate", "dp"})
      EXPECT_EQ(v[r].members.at(kind), std::vector<int>{r}) << kind;
  }
  // The tied pair is the first and the last stage; the middle stages hold no copy.
  EXPECT_EQ(v[0].members.at("tied"), (std::vector<int>{0, 3}));
  EXPECT_EQ(v[3].members.at("tied"), (std::vector<int>{0, 3}));
  EXPECT_EQ(v[3].group_rank.at("tied"), 1);
  EXPECT_FALSE(v[1].members.count("tied"));
  EXPECT_FALSE(v[2].members.count("tied"));
}

TEST(Mesh, AGroupOfEveryRankIsTheWorldCommItself) {
  // ZeRO-3 over all 4 ranks: the shard group is the world; no other group is.
  const std::vector<RankView> z =
      buildEveryRank(layoutConfig(4, {"parallel.dp_shard=4", "parallel.zero_stage=3"}));
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(z[r].is_world.at("shard")) << "rank " << r;
    EXPECT_EQ(z[r].members.at("shard"), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(z[r].group_rank.at("shard"), r);
    EXPECT_EQ(z[r].shard_rank, r);
    EXPECT_FALSE(z[r].is_world.at("tp"));
    EXPECT_FALSE(z[r].is_world.at("dp"));
  }
  // pp 2 of one rank each with tied embeddings: the tied pair is the world.
  const std::vector<RankView> p = buildEveryRank(layoutConfig(
      2, {"parallel.pp=2", "parallel.pp_microbatches=2", "model.tie_embeddings=true"}));
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(p[r].is_world.at("tied"));
    EXPECT_EQ(p[r].link_peer, (std::map<int64_t, int>{{1 - r, 1 - r}}));
  }
}

}  // namespace mesh_test
}  // namespace ftb
