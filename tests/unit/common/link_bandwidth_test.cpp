// Tests for the link figure's arithmetic (common/link_bandwidth.h): nccl-tests' algbw and
// busbw, the probe's sizes and repetitions, the root attributes and the --probe line.
#include "common/link_bandwidth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace ftb {
namespace {

TEST(LinkBandwidth, AlgbwIsBytesOverSeconds) {
  EXPECT_DOUBLE_EQ(allReduceAlgbw(16 << 20, 0.004), double(16 << 20) / 0.004);
  EXPECT_TRUE(std::isnan(allReduceAlgbw(1024, 0)));
  EXPECT_TRUE(std::isnan(allReduceAlgbw(1024, -1)));
  EXPECT_TRUE(std::isnan(allReduceAlgbw(1024, std::nan(""))));
}

TEST(LinkBandwidth, BusbwIsAlgbwTimesTwoNMinusOneOverN) {
  // nccl-tests' PERFORMANCE.md: busbw = algbw * 2(n-1)/n.
  EXPECT_DOUBLE_EQ(allReduceBusbw(10e9, 2), 10e9);    // 2 ranks: factor 1
  EXPECT_DOUBLE_EQ(allReduceBusbw(10e9, 4), 15e9);    // 4 ranks: 1.5
  EXPECT_DOUBLE_EQ(allReduceBusbw(10e9, 8), 17.5e9);  // 8 ranks: 1.75
  EXPECT_DOUBLE_EQ(allReduceBusbw(3e9, 3), 4e9);      // 3 ranks: 4/3
  EXPECT_DOUBLE_EQ(allReduceBusbw(10e9, 1), 0);       // one rank moves nothing
  EXPECT_TRUE(std::isnan(allReduceBusbw(std::nan(""), 2)));
  EXPECT_THROW(allReduceBusbw(1e9, 0), std::invalid_argument);
  // A 16 MiB all-reduce in 5 ms over 2 ranks.
  const double algbw = allReduceAlgbw(16 << 20, 0.005);
  EXPECT_NEAR(allReduceBusbw(algbw, 2) / 1e9, 3.3554432, 1e-9);
}

TEST(LinkBandwidth, SizesAreCappedByTheGradients) {
  EXPECT_EQ(linkProbeSizes(0), (std::vector<int64_t>{1 << 20, 16 << 20}));
  EXPECT_EQ(linkProbeSizes(int64_t{1} << 30), (std::vector<int64_t>{1 << 20, 16 << 20}));
  EXPECT_EQ(linkProbeSizes(4000002), (std::vector<int64_t>{1 << 20, 4000000}));  // fp32 elements
  EXPECT_EQ(linkProbeSizes(500000), (std::vector<int64_t>{500000}));             // one size
  EXPECT_EQ(linkProbeSizes(100), (std::vector<int64_t>{kLinkProbeMinBytes}));    // floor
}

TEST(LinkBandwidth, RepsFitTheBudget) {
  EXPECT_EQ(linkProbeReps(0.001), kLinkProbeMaxReps);
  EXPECT_EQ(linkProbeReps(0), kLinkProbeMaxReps);
  EXPECT_EQ(linkProbeReps(kLinkProbeBudgetS / 2.5), 2);
  EXPECT_EQ(linkProbeReps(10), 1);  // a slow link: one timed repetition
  EXPECT_EQ(linkProbeReps(std::nan("")), 1);
}

TEST(LinkBandwidth, Median) {
  EXPECT_DOUBLE_EQ(medianOf({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(medianOf({4, 1, 2, 3}), 2.5);
  EXPECT_TRUE(std::isnan(medianOf({})));
}

TEST(LinkBandwidth, SourceAndAttributes) {
  EXPECT_EQ(linkSource("local memory (process_vm_readv)", 2, 1),
            "local memory (process_vm_readv), 2 ranks, 1 node");
  EXPECT_EQ(linkSource("Gloo", 8, 4), "Gloo, 8 ranks, 4 nodes");
  const auto none = linkAttrs(unmeasuredLink(kNoLinkSource));
  ASSERT_EQ(none.size(), 6u);
  EXPECT_EQ(none[0].first, "link_busbw_Bps");
  EXPECT_TRUE(std::isnan(std::get<double>(none[0].second)));
  EXPECT_TRUE(std::isnan(std::get<double>(none[1].second)));
  EXPECT_EQ(std::get<int64_t>(none[2].second), 0);
  EXPECT_EQ(none[5].first, "link_source");
  EXPECT_EQ(std::get<std::string>(none[5].second), "world 1: no link");
}

TEST(LinkBandwidth, ProbeLineHasTheDocumentedFieldsInOrder) {
  ProbeReport r;
  r.world = 2;
  r.nodes = 1;
  r.threads = 1;
  r.dtype = "fp32";
  r.gemm_flops = 5e10;
  r.gemm_flops_min = 4e10;
  r.gemm_n = 2048;
  r.link.measured = true;
  r.link.bytes = 16 << 20;
  r.link.algbw = 3e9;
  r.link.busbw = 3e9;
  r.link.source = "local memory (process_vm_readv), 2 ranks, 1 node";
  const std::string line = probeJsonLine(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::ordered_json::parse(line);
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"probe", "world", "nodes", "dtype", "threads", "gemm_flops",
                                      "gemm_flops_min", "gemm_n", "link_busbw_Bps",
                                      "link_algbw_Bps", "link_probe_bytes", "link_source"}));
  EXPECT_EQ(j["probe"], 1);
  EXPECT_EQ(j["link_probe_bytes"], 16 << 20);
  EXPECT_EQ(j["link_busbw_Bps"], 3e9);
  r.world = 1;
  r.link = unmeasuredLink(kNoLinkSource);
  const auto one = nlohmann::json::parse(probeJsonLine(r));
  for (const char* k : {"link_busbw_Bps", "link_algbw_Bps", "link_probe_bytes", "link_source"})
    EXPECT_TRUE(one[k].is_null()) << k;
  EXPECT_EQ(one["gemm_n"], 2048);
}

}  // namespace
}  // namespace ftb
