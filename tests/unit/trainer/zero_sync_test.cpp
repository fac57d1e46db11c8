// ZeroSync stages 1 and 2 (trainer/parallel/zero.h) in one process, as rank 1 of a shard
// group of two over a Comm that stands for rank 0: its gradients and its shard are chosen
// by the test, so every sum and every gathered value the contract promises is known
// exactly. What it proves beyond the end-to-end ZeRO = world-1 runs: a unit's flat buffer
// is padded to the group and this rank owns its contiguous slice; stage 1 reduces each unit
// once, after the last backward, and keeps its slice of the sum; stage 2 reduce-scatters a
// unit during the backward that completes it, in every micro-batch, and frees the unit's
// full gradients there; after the optimizer step every rank's materialised parameters are
// the group's updated shards, gathered, and the gradients are zero again.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/trainer/tensor_util.h"
#include "trainer/parallel/zero.h"

namespace ftb {
namespace {

// Rank `rank` of a two-member group. The other member's flat gradient is `peer` × (index
// + 1) over the whole flat buffer (an all-reduce or a reduce-scatter adds it), and its
// shard, as an all-gather delivers it, is 100 + the index within the shard. Every
// collective is recorded with the size of its full buffer.
class TwoRankComm final : public Comm {
 public:
  TwoRankComm(int rank, float peer) : rank_(rank), peer_(peer) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  void allReduceSum(torch::Tensor& t) override {
    calls.push_back("all_reduce " + std::to_string(t.numel()));
    t.add_(peerGrad(t.numel()));
  }
  void reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) override {
    calls.push_back("reduce_scatter " + std::to_string(in.numel()));
    const int64_t n = out.numel();
    out.copy_((in + peerGrad(in.numel())).narrow(0, rank_ * n, n));
  }
  void allGather(torch::Tensor& out, const torch::Tensor& in) override {
    calls.push_back("all_gather " + std::to_string(out.numel()));
    const int64_t n = in.numel();
    out.narrow(0, rank_ * n, n).copy_(in);
    out.narrow(0, (1 - rank_) * n, n).copy_(torch::arange(n, in.options()) + 100);
  }
  void allReduceMax(torch::Tensor&) override { ADD_FAILURE() << "ZeRO takes no maximum"; }
  void broadcast(torch::Tensor&, int) override { ADD_FAILURE() << "ZeRO broadcasts nothing"; }
  void barrier() override {}

  torch::Tensor peerGrad(int64_t n) const { return (torch::arange(n, torch::kFloat32) + 1) * peer_; }

  std::vector<std::string> calls;

 private:
  int rank_;
  float peer_;
};

ModelParam param(const char* name, std::vector<float> values) {
  ModelParam p;
  p.name = name;
  p.tensor = torch::tensor(values).requires_grad_();
  return p;
}

// One block unit: a (3 values) and b (4): 7 flat values padded to 8, shards of 4. The root
// unit: c (2): shards of 1. As rank 1, this rank owns flat [4, 8) of the block and [1, 2)
// of the root.
struct Model {
  std::vector<ModelParam> block = {param("layers.0.a", {1, 2, 3}),
                                   param("layers.0.b", {4, 5, 6, 7})};
  std::vector<ModelParam> root = {param("c", {8, 9})};
  std::vector<torch::Tensor> tensors() const {
    return {block[0].tensor, block[1].tensor, root[0].tensor};
  }
};

struct Zero {
  Model m;
  TwoRankComm comm{/*rank=*/1, /*peer=*/10};
  std::unique_ptr<Comm> self = makeSelfComm();
  std::unique_ptr<ZeroSync> sync;
  explicit Zero(int stage) : sync(makeZeroSync(stage, comm, *self, torch::kFloat32, /*tp=*/1)) {
    sync->addUnit(0, m.block);
    sync->addUnit(-1, m.root);
  }
};

void expectValues(const torch::Tensor& t, std::vector<float> want, const std::string& what) {
  ASSERT_EQ(t.numel(), int64_t(want.size())) << what;
  EXPECT_TRUE(torch::equal(t.reshape(-1), torch::tensor(want))) << what << ": " << t;
}

TEST(ZeroSync, EachUnitIsPaddedToTheGroupAndThisRankOwnsItsContiguousSlice) {
  for (int stage : {1, 2}) {
    Zero z(stage);
    const std::vector<torch::Tensor> masters = z.sync->optimizerParams();
    ASSERT_EQ(masters.size(), 2u);
    expectValues(masters[0], {5, 6, 7, 0}, "block shard (b[1:], then the padding)");
    expectValues(masters[1], {9}, "root shard");
    const std::vector<FlatLayout> layout = z.sync->optimizerLayout();
    EXPECT_EQ(layout[0].begin, 4);
    EXPECT_EQ(layout[0].numel, 4);
    EXPECT_EQ(layout[0].offsets, (std::vector<int64_t>{0, 3}));
    EXPECT_EQ(layout[1].begin, 1);
    // Stages 1-2 keep the full parameters materialised.
    expectValues(z.m.block[0].tensor, {1, 2, 3}, "a");
    EXPECT_TRUE(z.comm.calls.empty());
  }
}

TEST(ZeroSync, Stage1AllReducesEachUnitOnceAfterTheLastBackwardAndKeepsItsSlice) {
  Zero z(1);
  z.sync->beginStep();
  z.sync->beforeBackward(false);
  backwardOfScaledSum(z.m.tensors(), 1);
  z.sync->beforeBackward(true);
  backwardOfScaledSum(z.m.tensors(), 2);
  EXPECT_TRUE(z.comm.calls.empty()) << "no collective before finishGradients";
  z.sync->finishGradients();
  EXPECT_EQ(z.comm.calls, (std::vector<std::string>{"all_reduce 8", "all_reduce 2"}));
  // This rank's 3 per value (padding 0) plus the peer's 10 × (index + 1), at [4, 8) and [1, 2).
  const std::vector<torch::Tensor> g = z.sync->gradients();
  expectValues(g[0], {53, 63, 73, 80}, "block gradient shard");
  expectValues(g[1], {23}, "root gradient shard");
  EXPECT_DOUBLE_EQ(z.sync->localSquaredNorm(), 53. * 53 + 63 * 63 + 73 * 73 + 80 * 80 + 23 * 23);
}

TEST(ZeroSync, Stage2ReduceScattersAUnitInTheBackwardThatCompletesItAndFreesItsGradients) {
  Zero z(2);
  z.sync->beginStep();
  z.sync->beforeBackward(false);
  backwardOfScaledSum(z.m.tensors(), 1);
  std::vector<std::string> first = z.comm.calls;
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, (std::vector<std::string>{"reduce_scatter 2", "reduce_scatter 8"}))
      << "every unit, during the first micro-batch's backward";
  for (const torch::Tensor& p : z.m.tensors())
    EXPECT_FALSE(p.grad().defined()) << "the full gradient is freed once reduce-scattered";
  z.sync->beforeBackward(true);
  backwardOfScaledSum(z.m.tensors(), 2);
  EXPECT_EQ(z.comm.calls.size(), 4u);
  z.sync->finishGradients();
  EXPECT_EQ(z.comm.calls.size(), 4u) << "nothing left for finishGradients";
  // Each micro-batch's reduce-scatter adds the peer's gradient once: 3 + 2 × 10 × (index + 1).
  const std::vector<torch::Tensor> g = z.sync->gradients();
  expectValues(g[0], {103, 123, 143, 160}, "block gradient shard");
  expectValues(g[1], {43}, "root gradient shard");
}

TEST(ZeroSync, AfterTheStepTheParametersAreTheGroupsUpdatedShardsAndGradientsAreZero) {
  for (int stage : {1, 2}) {
    Zero z(stage);
    z.sync->beginStep();
    z.sync->beforeBackward(true);
    backwardOfScaledSum(z.m.tensors(), 1);
    z.sync->finishGradients();
    {
      torch::NoGradGuard no_grad;
      for (torch::Tensor& master : z.sync->optimizerParams()) master.add_(1);  // the "step"
    }
    z.comm.calls.clear();
    z.sync->afterOptimizer();
    EXPECT_EQ(z.comm.calls, (std::vector<std::string>{"all_gather 8", "all_gather 2"}));
    // Flat [0, 4) is the peer's shard (100..103), [4, 8) this rank's updated one.
    expectValues(z.m.block[0].tensor, {100, 101, 102}, "a");
    expectValues(z.m.block[1].tensor, {103, 6, 7, 8}, "b");
    expectValues(z.m.root[0].tensor, {100, 10}, "c");
    for (const torch::Tensor& g : z.sync->gradients())
      EXPECT_EQ(g.abs().sum().item<float>(), 0.f) << "stage " << stage;
  }
}

}  // namespace
}  // namespace ftb
