// Tests for the link probe (trainer/parallel/link_probe.h) over a stand-in Comm of two members:
// the all-reduces it issues, the figure it returns, and the error a failing collective becomes.
#include "trainer/parallel/link_probe.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"

namespace ftb {
namespace {

// Member 0 of two whose peer adds nothing: sums and maxima leave the tensor as it is. Records
// the bytes of each all-reduce sum; collective number `fail_at` (1-based, 0 = none) throws.
class LinkEchoComm final : public Comm {
 public:
  explicit LinkEchoComm(int fail_at = 0) : fail_at_(fail_at) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allReduceSum(torch::Tensor& t) override {
    note();
    sums.push_back(static_cast<int64_t>(t.nbytes()));
  }
  void allReduceMax(torch::Tensor&) override { note(); }
  void allGather(torch::Tensor&, const torch::Tensor&) override { FAIL() << "no all-gather"; }
  void reduceScatterSum(torch::Tensor&, const torch::Tensor&) override { FAIL() << "no r-s"; }
  void broadcast(torch::Tensor&, int) override { FAIL() << "no broadcast"; }
  void barrier() override {}

  std::vector<int64_t> sums;  // bytes of each all-reduce sum, in issue order

 private:
  void note() {
    if (++calls_ == fail_at_) throw std::runtime_error("rank 1 (host b) left");
  }
  int fail_at_ = 0, calls_ = 0;
};

// How many all-reduce sums of `bytes` the stand-in saw.
int64_t sumsOf(const LinkEchoComm& c, int64_t bytes) {
  int64_t n = 0;
  for (int64_t b : c.sums) n += b == bytes;
  return n;
}

TEST(LinkProbe, TimesEachSizeAndReportsTheLargest) {
  LinkEchoComm comm;
  const LinkFigure f = probeLink(comm, "stand-in", 1, 0);
  ASSERT_TRUE(f.measured);
  EXPECT_EQ(f.bytes, kLinkProbeLargeBytes);
  EXPECT_GT(f.seconds, 0);
  EXPECT_DOUBLE_EQ(f.algbw, double(f.bytes) / f.seconds);
  EXPECT_DOUBLE_EQ(f.busbw, f.algbw);  // 2 ranks: 2(n-1)/n = 1
  EXPECT_GE(f.cost_s, f.seconds);
  EXPECT_EQ(f.source, "stand-in, 2 ranks, 1 node");
  for (int64_t bytes : {kLinkProbeSmallBytes, kLinkProbeLargeBytes}) {  // warm-up + reps
    EXPECT_GE(sumsOf(comm, bytes), 2) << bytes;
    EXPECT_LE(sumsOf(comm, bytes), 1 + kLinkProbeMaxReps) << bytes;
  }
  // Each timed all-reduce is lined up by a one-element one before it.
  EXPECT_EQ(sumsOf(comm, 4),
            sumsOf(comm, kLinkProbeSmallBytes) + sumsOf(comm, kLinkProbeLargeBytes));
}

TEST(LinkProbe, SmallGradientsCapTheSize) {
  LinkEchoComm comm;
  const LinkFigure f = probeLink(comm, "stand-in", 1, 100000);
  EXPECT_EQ(f.bytes, 100000);
  EXPECT_EQ(sumsOf(comm, kLinkProbeSmallBytes) + sumsOf(comm, kLinkProbeLargeBytes), 0);
}

TEST(LinkProbe, AFailureNamesRankProbeCollectiveBytesAndRep) {
  LinkEchoComm comm(2);  // the line-up, then the 1 MiB warm-up fails
  try {
    probeLink(comm, "stand-in", 1, 0);
    FAIL() << "the failed all-reduce must throw";
  } catch (const DistError& e) {
    const std::string w = e.what();
    EXPECT_EQ(w.rfind(logPrefix() + ": link probe: all-reduce of 1048576 bytes (warm-up) over "
                                    "stand-in failed: rank 1 (host b) left",
                      0),
              0u)
        << w;
  }
}

TEST(LinkProbe, OneRankMeasuresNothing) {
  std::unique_ptr<Comm> self = makeSelfComm();
  const LinkFigure f = probeLink(*self, "", 1, 0);
  EXPECT_FALSE(f.measured);
  EXPECT_EQ(f.source, kNoLinkSource);
  EXPECT_TRUE(std::isnan(f.busbw));
}

}  // namespace
}  // namespace ftb
