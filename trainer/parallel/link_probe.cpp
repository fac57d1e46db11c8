#include "trainer/parallel/link_probe.h"

#include <torch/torch.h>

#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "trainer/metrics/device.h"
#include "trainer/metrics/perf.h"
#include "trainer/parallel/backend.h"
#include "trainer/parallel/local_comm.h"

namespace ftb {
namespace {

// What a failed collective of the probe was doing, for its DistError.
struct ProbeStep {
  std::string collective;  // "all-reduce", "all-reduce max"
  int64_t bytes = 0;
  std::string rep;  // "warm-up", "rep 2 of 5", "the ranks' times"
};

// Runs `f` (one collective); a failure becomes a DistError naming rank, host, the probe
// step, its bytes and the transport, then the Comm's own first line.
template <class F>
void probeGuarded(const ProbeStep& s, const std::string& transport, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    throw DistError(logPrefix() + ": link probe: " + s.collective + " of " +
                    std::to_string(s.bytes) + " bytes (" + s.rep + ") over " + transport +
                    " failed: " + firstLine(e.what()));
  }
}

// Every rank's `v` replaced by the largest over the ranks (the slowest rank's times).
std::vector<double> probeSlowest(Comm& comm, const std::vector<double>& v,
                                 const std::string& transport) {
  torch::Tensor t = torch::tensor(v, torch::kFloat64);
  probeGuarded({"all-reduce max", int64_t(v.size() * sizeof(double)), "the ranks' times"},
               transport, [&] { comm.allReduceMax(t); });
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

// One all-reduce of `buf` after the ranks are lined up by one of `line_up`: this rank's
// seconds, to the end of the device's work.
double probeTimedAllReduce(Comm& comm, torch::Tensor& buf, torch::Tensor& line_up,
                           const ProbeStep& s, const std::string& transport) {
  probeGuarded({"all-reduce", int64_t(line_up.nbytes()), s.rep + ", lining up"}, transport,
               [&] { comm.allReduceSum(line_up); });
  syncComputeDevice();
  const double t0 = nowSeconds();
  probeGuarded(s, transport, [&] { comm.allReduceSum(buf); });
  return phaseEnd() - t0;
}

// The median over the agreed repetitions of the slowest rank's time for `bytes`.
double probeTimeSize(Comm& comm, int64_t bytes, const std::string& transport) {
  const int64_t numel = bytes / 4;
  torch::Tensor buf =
      computeOnCuda() ? torch::zeros({numel}, torch::dtype(torch::kFloat32).device(computeDevice()))
                      : zerosForPeers(numel);
  torch::Tensor line_up = torch::zeros({1}, torch::dtype(torch::kFloat32).device(buf.device()));
  const double warm =
      probeTimedAllReduce(comm, buf, line_up, {"all-reduce", bytes, "warm-up"}, transport);
  const int reps = linkProbeReps(probeSlowest(comm, {warm}, transport)[0]);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const ProbeStep s{"all-reduce", bytes,
                      "rep " + std::to_string(r + 1) + " of " + std::to_string(reps)};
    times.push_back(probeTimedAllReduce(comm, buf, line_up, s, transport));
  }
  return medianOf(probeSlowest(comm, times, transport));
}

}  // namespace

LinkFigure probeLink(Comm& comm, const std::string& transport, int nodes, int64_t grad_bytes) {
  if (comm.size() == 1) return unmeasuredLink(kNoLinkSource);
  const double t0 = nowSeconds();
  LinkFigure f;
  f.source = linkSource(transport, comm.size(), nodes);
  std::string each;  // "1 MiB 3.1 GB/s, 16 MiB 5.2 GB/s" (busbw)
  for (int64_t bytes : linkProbeSizes(grad_bytes)) {
    f.bytes = bytes;
    f.seconds = probeTimeSize(comm, bytes, transport);
    f.algbw = allReduceAlgbw(f.bytes, f.seconds);
    f.busbw = allReduceBusbw(f.algbw, comm.size());
    each += (each.empty() ? "" : ", ") + formatMib(double(bytes)) + " " +
            formatFixed(f.busbw / 1e9, 2) + " GB/s";
  }
  f.measured = true;
  f.cost_s = nowSeconds() - t0;
  if (comm.rank() == 0)
    FTB_INFO("link: all-reduce busbw " << each << " (" << f.source << "; the probe took "
                                       << formatFixed(f.cost_s, 3) << " s)");
  return f;
}

std::string worldTransport(const Distributed& dist) {
  if (dist.env.world_size == 1) return "";
  const std::string backend =
      resolveBackend(dist.backend, computeOnCuda()) == BackendKind::kNccl ? "NCCL" : "Gloo";
  const std::string prefix = "world: ";
  for (const std::string& t : dist.transports) {
    if (t.rfind(prefix, 0) != 0) continue;
    const std::string how = t.substr(prefix.size());
    return how.rfind("backend", 0) == 0 ? backend + how.substr(7) : how;
  }
  return backend;
}

}  // namespace ftb
