#include "common/link_bandwidth.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace ftb {

double allReduceAlgbw(int64_t bytes, double seconds) {
  if (!(seconds > 0) || bytes < 0) return std::numeric_limits<double>::quiet_NaN();
  return double(bytes) / seconds;
}

double allReduceBusbw(double algbw, int ranks) {
  if (ranks < 1)
    throw std::invalid_argument("allReduceBusbw: ranks must be >= 1, got " + std::to_string(ranks));
  return algbw * 2.0 * double(ranks - 1) / double(ranks);
}

std::vector<int64_t> linkProbeSizes(int64_t grad_bytes) {
  const int64_t cap =
      grad_bytes > 0 ? std::max(grad_bytes, kLinkProbeMinBytes) : kLinkProbeLargeBytes;
  std::vector<int64_t> out;
  for (int64_t s : {kLinkProbeSmallBytes, kLinkProbeLargeBytes}) {
    const int64_t b = std::min(s, cap) / 4 * 4;
    if (out.empty() || out.back() != b) out.push_back(b);
  }
  return out;
}

int linkProbeReps(double warmup_s) {
  if (std::isnan(warmup_s)) return 1;
  if (!(warmup_s > 0)) return kLinkProbeMaxReps;
  const double n = std::floor(kLinkProbeBudgetS / warmup_s);
  return static_cast<int>(std::clamp(n, 1.0, double(kLinkProbeMaxReps)));
}

std::string linkSource(const std::string& transport, int ranks, int nodes) {
  return transport + ", " + std::to_string(ranks) + (ranks == 1 ? " rank, " : " ranks, ") +
         std::to_string(nodes) + (nodes == 1 ? " node" : " nodes");
}

LinkFigure unmeasuredLink(const std::string& why) {
  LinkFigure f;
  f.source = why;
  return f;
}

std::vector<std::pair<std::string, AttrValue>> linkAttrs(const LinkFigure& f) {
  return {{"link_busbw_Bps", f.busbw},     {"link_algbw_Bps", f.algbw},
          {"link_probe_bytes", f.bytes},   {"link_probe_s", f.seconds},
          {"link_probe_cost_s", f.cost_s}, {"link_source", f.source}};
}

std::string probeJsonLine(const ProbeReport& r) {
  nlohmann::ordered_json j;
  j["probe"] = 1;
  j["world"] = r.world;
  j["nodes"] = r.nodes;
  j["dtype"] = r.dtype;
  j["threads"] = r.threads;
  j["gemm_flops"] = r.gemm_flops;
  j["gemm_flops_min"] = r.gemm_flops_min;
  j["gemm_n"] = r.gemm_n;
  const bool link = r.link.measured && std::isfinite(r.link.busbw);
  j["link_busbw_Bps"] = link ? nlohmann::ordered_json(r.link.busbw) : nullptr;
  j["link_algbw_Bps"] = link ? nlohmann::ordered_json(r.link.algbw) : nullptr;
  j["link_probe_bytes"] = link ? nlohmann::ordered_json(r.link.bytes) : nullptr;
  j["link_source"] = link ? nlohmann::ordered_json(r.link.source) : nullptr;
  return j.dump();
}

}  // namespace ftb
