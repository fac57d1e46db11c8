#include "trainer/parallel/hier_comm.h"

#include <map>

#include "common/error.h"
#include "common/log.h"

namespace ftb {

HostPlan planHosts(const std::vector<std::string>& keys, int me) {
  HostPlan p;
  std::map<std::string, int> index;  // host key -> host index, in order of first member
  std::vector<int> count, host_of(keys.size());
  for (size_t g = 0; g < keys.size(); ++g) {
    auto [it, fresh] = index.emplace(keys[g], static_cast<int>(count.size()));
    if (fresh) count.push_back(0);
    host_of[g] = it->second;
    if (static_cast<int>(g) == me) p.local = count[it->second];
    ++count[it->second];
  }
  p.hosts = static_cast<int>(count.size());
  p.host = host_of[me];
  bool equal = true;
  for (int c : count) equal = equal && c == count[0];
  p.per_host = equal ? count[0] : 0;
  if (p.hosts < 2) {
    p.why_not = "one host";
  } else if (!equal) {
    p.why_not = "hosts hold different numbers of its ranks";
  } else if (p.per_host < 2) {
    p.why_not = "one rank per host";
  } else {
    for (size_t g = 0; g < keys.size() && p.why_not.empty(); ++g)
      if (host_of[g] != static_cast<int>(g) / p.per_host)
        p.why_not = "its ranks are not host-major (rank order interleaves hosts)";
  }
  return p;
}

namespace {

// A contiguous 1-D tensor with t's values in fp32 (low precision) or t's dtype; it
// aliases t when no conversion or copy is needed.
torch::Tensor flatWide(const torch::Tensor& t) {
  torch::Tensor w = isReducedPrecision(t) ? t.to(torch::kFloat32) : t;
  return w.contiguous().view({-1});
}

// The cross-host all-reduce of a shard in flight; wait() finishes it and all-gathers
// the shards within the host into `padded`, then copies them to `t` (flat) if they differ.
class HierPending final : public PendingWork {
 public:
  HierPending(Comm& intra, std::unique_ptr<PendingWork> cross, torch::Tensor t,
              torch::Tensor padded, torch::Tensor shard)
      : intra_(intra),
        cross_(std::move(cross)),
        t_(std::move(t)),
        padded_(std::move(padded)),
        shard_(std::move(shard)) {}
  void wait() override {
    cross_->wait();
    CollectiveTimer timer;
    intra_.allGather(padded_, shard_);
    if (!padded_.is_same(t_)) t_.copy_(padded_.narrow(0, 0, t_.numel()));
  }

 private:
  Comm& intra_;
  std::unique_ptr<PendingWork> cross_;
  torch::Tensor t_, padded_, shard_;
};

class HierComm final : public Comm {
 public:
  HierComm(std::unique_ptr<Comm> flat, std::unique_ptr<Comm> intra, std::unique_ptr<Comm> cross)
      : flat_(std::move(flat)), intra_(std::move(intra)), cross_(std::move(cross)) {
    if (flat_->size() != intra_->size() * cross_->size() ||
        flat_->rank() != cross_->rank() * intra_->size() + intra_->rank())
      throw DistError(logPrefix() + " hierarchical group: rank " + std::to_string(flat_->rank()) +
                      " of " + std::to_string(flat_->size()) + " is not rank " +
                      std::to_string(intra_->rank()) + " of its host's " +
                      std::to_string(intra_->size()) + " on host " +
                      std::to_string(cross_->rank()) + " of " + std::to_string(cross_->size()) +
                      " (the ranks must be host-major)");
  }

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  void broadcast(torch::Tensor& t, int root) override { flat_->broadcast(t, root); }
  void barrier() override { flat_->barrier(); }

  void allReduceSum(torch::Tensor& t) override;
  std::unique_ptr<PendingWork> allReduceSumAsync(torch::Tensor& t) override;
  void allReduceMax(torch::Tensor& t) override {
    if (!t.device().is_cpu()) return flat_->allReduceMax(t);
    CollectiveTimer timer;
    intra_->allReduceMax(t);
    cross_->allReduceMax(t);
  }
  void allGather(torch::Tensor& out, const torch::Tensor& in) override;
  void reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) override;

 private:
  // Below this many elements per host rank an all-reduce runs whole at both levels
  // (two latency-bound steps instead of three).
  static constexpr int64_t kSplitMin = 16384;

  // The split all-reduce of w (flat, fp32/fp64, contiguous, at least kSplitMin per host
  // rank): the host-level reduce-scatter here, the cross-host all-reduce of this rank's
  // shard left in flight; wait() all-gathers within the host into w.
  std::unique_ptr<PendingWork> startSplit(const torch::Tensor& w);

  std::unique_ptr<Comm> flat_, intra_, cross_;
};

void HierComm::allReduceSum(torch::Tensor& t) {
  if (!t.device().is_cpu()) return flat_->allReduceSum(t);
  CollectiveTimer timer;
  torch::Tensor w = flatWide(t);
  if (w.numel() < intra_->size() * kSplitMin) {
    intra_->allReduceSum(w);
    cross_->allReduceSum(w);
  } else {
    startSplit(w)->wait();
  }
  if (w.data_ptr() != t.data_ptr() || w.scalar_type() != t.scalar_type())
    t.copy_(w.view(t.sizes()));
}

// The cross-host part stays in flight on the backend, so backward overlaps the network
// part, as with the flat backend.
std::unique_ptr<PendingWork> HierComm::allReduceSumAsync(torch::Tensor& t) {
  if (!t.device().is_cpu() || !t.is_contiguous() || isReducedPrecision(t) ||
      t.numel() < intra_->size() * kSplitMin)
    return Comm::allReduceSumAsync(t);  // runs to completion here
  CollectiveTimer timer;
  return startSplit(t.view({-1}));
}

std::unique_ptr<PendingWork> HierComm::startSplit(const torch::Tensor& w) {
  const int64_t n = w.numel(), L = intra_->size(), chunk = (n + L - 1) / L;
  torch::Tensor padded =
      n == chunk * L ? w : torch::cat({w, torch::zeros({chunk * L - n}, w.options())});
  torch::Tensor shard = torch::empty({chunk}, w.options());
  intra_->reduceScatterSum(shard, padded);
  std::unique_ptr<PendingWork> cross = cross_->allReduceSumAsync(shard);
  return std::make_unique<HierPending>(*intra_, std::move(cross), w, padded, shard);
}

void HierComm::allGather(torch::Tensor& out, const torch::Tensor& in) {
  TORCH_CHECK(out.numel() == in.numel() * size(), "allGather: out/in size mismatch");
  if (!in.device().is_cpu() || !out.device().is_cpu() || !out.is_contiguous())
    return flat_->allGather(out, in);
  CollectiveTimer timer;
  const int64_t c = in.numel(), N = cross_->size(), L = intra_->size();
  // Across hosts first, so each shard crosses the network once (not once per local
  // rank, as gathering host blocks across hosts would): [host][c] for this local index,
  // then within the host [local][host][c], reordered into out's [host][local][c].
  torch::Tensor across = torch::empty({N * c}, in.options());
  cross_->allGather(across, in.contiguous());
  torch::Tensor all = torch::empty({L * N * c}, in.options());
  intra_->allGather(all, across);
  out.view({N, L, c}).copy_(all.view({L, N, c}).transpose(0, 1));
}

void HierComm::reduceScatterSum(torch::Tensor& out, const torch::Tensor& in) {
  TORCH_CHECK(in.numel() == out.numel() * size(), "reduceScatter: out/in size mismatch");
  if (!in.device().is_cpu() || !out.device().is_cpu()) return flat_->reduceScatterSum(out, in);
  CollectiveTimer timer;
  const int64_t c = out.numel(), N = cross_->size(), L = intra_->size();
  // Member g = host * L + local owns chunk g. Reorder to [local][host][chunk], so the
  // host-level reduce-scatter gives local rank l the N chunks {h * L + l}, and the
  // cross-host one gives host h its chunk h * L + l.
  torch::Tensor w = flatWide(in).view({N, L, c}).transpose(0, 1).contiguous().view({-1});
  torch::Tensor mid = torch::empty({N * c}, w.options());
  intra_->reduceScatterSum(mid, w);
  torch::Tensor mine = torch::empty({c}, w.options());
  cross_->reduceScatterSum(mine, mid);
  out.view({-1}).copy_(mine);
}

}  // namespace

std::unique_ptr<Comm> makeHierarchicalComm(std::unique_ptr<Comm> flat, std::unique_ptr<Comm> intra,
                                           std::unique_ptr<Comm> cross) {
  return std::make_unique<HierComm>(std::move(flat), std::move(intra), std::move(cross));
}

}  // namespace ftb
