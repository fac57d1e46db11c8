// DdpSync (trainer/parallel/ddp.h) in one process over a recording Comm that stands for a
// data-parallel group of two: its all-reduce adds the peer's gradient, which the test
// chooses, so the sum the contract promises is known exactly. What it proves beyond the
// end-to-end DDP = world-1 runs: bucket boundaries (reverse forward order, bucket_bytes),
// gradients written in place into the reduced buffers, no collective before the step's
// last micro-batch (DDP's no_sync), buckets reduced in index order, and a parameter
// without a gradient reduced as zeros.
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "tests/unit/trainer/tensor_util.h"
#include "trainer/parallel/ddp.h"

namespace ftb {
namespace {

// A two-member group whose other member's contribution to every all-reduce is `peer`
// times the tensor's index within the buffer plus one (so a wrong offset shows). It
// records each all-reduce: which buffer (data pointer) and how many elements.
class PeerComm final : public Comm {
 public:
  explicit PeerComm(float peer) : peer_(peer) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allReduceSum(torch::Tensor& t) override {
    calls.push_back({t.data_ptr(), t.numel()});
    t.add_(torch::arange(1, t.numel() + 1, t.options()) * peer_);
  }
  void allReduceMax(torch::Tensor&) override { FAIL() << "DdpSync never takes a maximum"; }
  void allGather(torch::Tensor&, const torch::Tensor&) override { FAIL() << "no all-gather"; }
  void reduceScatterSum(torch::Tensor&, const torch::Tensor&) override { FAIL() << "no r-s"; }
  void broadcast(torch::Tensor&, int) override { FAIL() << "no broadcast"; }
  void barrier() override {}

  struct Call {
    void* data;
    int64_t numel;
  };
  std::vector<Call> calls;

 private:
  float peer_;
};

// Three parameters in forward order: 4 + 6 + 2 floats (16, 24 and 8 bytes).
std::vector<ModelParam> threeParams() {
  std::vector<ModelParam> ps;
  for (auto [name, n] : {std::pair<const char*, int64_t>{"a", 4}, {"b", 6}, {"c", 2}}) {
    ModelParam p;
    p.name = name;
    p.tensor = torch::linspace(0.5, 1.5, n).requires_grad_();
    ps.push_back(p);
  }
  return ps;
}

TEST(DdpSync, BucketsFormInReverseForwardOrderUpToTheByteLimit) {
  PeerComm comm(0);
  auto ps = threeParams();
  // 32 bytes: c (8) + b (24) fill the first bucket, a starts the second.
  DdpSync ddp(ps, comm, /*tp=*/1, /*bucket_bytes=*/32);
  EXPECT_EQ(ddp.numBuckets(), 2);
  DdpSync one(threeParams(), comm, 1, 1 << 20);
  EXPECT_EQ(one.numBuckets(), 1);
  DdpSync each(threeParams(), comm, 1, 1);
  EXPECT_EQ(each.numBuckets(), 3);
}

TEST(DdpSync, TheLastMicroBatchSumsThePeersGradientIntoTheParametersGrads) {
  PeerComm comm(10);
  auto ps = threeParams();
  DdpSync ddp(ps, comm, 1, 32);
  auto params = ddp.optimizerParams();
  ddp.beginStep();
  ddp.beforeBackward(false);  // micro-batch 1 of 2: accumulate only
  backwardOfScaledSum(params, 1.0);
  EXPECT_TRUE(comm.calls.empty()) << "no collective before the last micro-batch";
  ddp.beforeBackward(true);
  backwardOfScaledSum(params, 2.0);
  ddp.finishGradients();
  ASSERT_EQ(comm.calls.size(), 2u);
  // Bucket 0 (c, b: 8 floats) first, then bucket 1 (a: 4 floats); each reduced buffer is
  // where the parameters' gradients live.
  EXPECT_EQ(comm.calls[0].numel, 8);
  EXPECT_EQ(comm.calls[1].numel, 4);
  auto grads = ddp.gradients();
  EXPECT_EQ(comm.calls[0].data, grads[2].data_ptr());  // c leads bucket 0
  EXPECT_EQ(comm.calls[1].data, grads[0].data_ptr());
  // Local 1 + 2 = 3 everywhere, plus the peer's 10 * (index in the bucket + 1).
  auto expect = [](int64_t n, int64_t first) {
    return 3 + 10 * torch::arange(first + 1, first + n + 1, torch::kFloat);
  };
  EXPECT_TRUE(torch::equal(grads[2], expect(2, 0)));
  EXPECT_TRUE(torch::equal(grads[1], expect(6, 2)));
  EXPECT_TRUE(torch::equal(grads[0], expect(4, 0)));
  // Replicas hold equal copies: each counts half of the squared norm.
  double sq = 0;
  for (const auto& g : grads) sq += g.square().sum().item<double>();
  EXPECT_NEAR(ddp.localSquaredNorm(), sq / 2, 1e-6 * sq);
}

TEST(DdpSync, AParameterWithoutAGradientIsReducedAsZeros) {
  PeerComm comm(1);
  auto ps = threeParams();
  DdpSync ddp(ps, comm, 1, 1);  // one bucket per parameter
  auto params = ddp.optimizerParams();
  ddp.beforeBackward(true);
  backwardOfScaledSum({params[0], params[2]}, 1.0);  // b takes no part in the loss
  ddp.finishGradients();
  ASSERT_EQ(comm.calls.size(), 3u) << "every bucket is reduced, or the ranks would mismatch";
  // Index order: c, b, a (reverse forward order).
  EXPECT_EQ(comm.calls[1].data, ddp.gradients()[1].data_ptr());
  EXPECT_TRUE(torch::equal(ddp.gradients()[1], torch::arange(1, 7, torch::kFloat)));
}

TEST(DdpSync, AWorldOfOneCommunicatesNothing) {
  class Alone final : public Comm {
   public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    void allReduceSum(torch::Tensor&) override { FAIL() << "a world of one reduces nothing"; }
    void allReduceMax(torch::Tensor&) override { FAIL(); }
    void allGather(torch::Tensor&, const torch::Tensor&) override { FAIL(); }
    void reduceScatterSum(torch::Tensor&, const torch::Tensor&) override { FAIL(); }
    void broadcast(torch::Tensor&, int) override { FAIL(); }
    void barrier() override {}
  } alone;
  auto ps = threeParams();
  DdpSync ddp(ps, alone, 1, 32);
  auto params = ddp.optimizerParams();
  ddp.beforeBackward(true);
  backwardOfScaledSum(params, 2.0);
  ddp.finishGradients();
  for (const auto& g : ddp.gradients()) EXPECT_TRUE(torch::equal(g, torch::full_like(g, 2)));
}

}  // namespace
}  // namespace ftb
