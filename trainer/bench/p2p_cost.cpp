// ftb_p2p_bench: what one pipeline transfer costs on each link transport (comm/p2p.h).
//
// Started by the launcher with 2 ranks on one host. Forms two links between the ranks as
// the trainer does (Distributed::newLink): one through local memory (parallel/local_link.h,
// parallel.pp_local_p2p = true) and one on the backend (Gloo send/recv, false), and times a
// ping-pong of one fp32 tensor of --bytes (default 1 MiB: the activations of one micro-batch
// of D512 x T512): rank 0 posts its receive, sends, and waits for the echo; rank 1 receives
// and sends it back. Rounds alternate the transports, so a change of machine load falls on
// both. Rank 0 prints, per transport, the round trip's median and best in microseconds and
// the bytes moved per second at the median (2 x bytes per round trip), and checks the echo.
//
//   launcher --nproc-per-node 2 -- ftb_p2p_bench [--bytes N] [--rounds N] [--warmup N]
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <optional>
#include <vector>

#include "common/cli_args.h"
#include "common/dist_env.h"
#include "common/error.h"
#include "common/log.h"
#include "trainer/parallel/dist.h"

namespace {

// One round trip on `link`; returns its wall time in microseconds (rank 0's view).
double roundTrip(ftb::P2PLink& link, int rank, torch::Tensor& buf, torch::Tensor& back, int tag) {
  const auto t0 = std::chrono::steady_clock::now();
  if (rank == 0) {
    auto r = link.recvAsync(back, 2 * tag + 1, "echo");
    link.sendAsync(buf, 2 * tag, "ping")->wait();
    r->wait();
  } else {
    link.recvAsync(back, 2 * tag, "ping")->wait();
    link.sendAsync(back, 2 * tag + 1, "echo")->wait();
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

void run(int64_t bytes, int rounds, int warmup) {
  ftb::DistEnv env = ftb::discoverDistEnv();
  ftb::setLogIdentity(env.rank, env.world_size, ftb::hostName());
  if (env.world_size != 2)
    throw ftb::ConfigError("ftb_p2p_bench: WORLD_SIZE is " + std::to_string(env.world_size) +
                           ", expected 2; hint: start it with `launcher --nproc-per-node 2 -- "
                           "ftb_p2p_bench`");
  ftb::Distributed dist = ftb::initDistributed(env, std::chrono::seconds(60), "gloo");
  const int peer = 1 - env.rank;
  const ftb::PeerInfo who{peer, peer, dist.members.at(size_t(peer)).host};
  std::map<std::string, std::unique_ptr<ftb::P2PLink>> links;
  dist.pp_local_p2p = true;
  links["local memory"] = dist.newLink("bench_local", who);
  dist.pp_local_p2p = false;
  links["Gloo"] = dist.newLink("bench_gloo", who);
  torch::Tensor buf = torch::arange(bytes / 4, torch::kFloat32), back = torch::empty_like(buf);
  std::map<std::string, std::vector<double>> us;
  for (int i = 0; i < warmup + rounds; ++i)
    for (auto& [name, link] : links) {
      const double t = roundTrip(*link, env.rank, buf, back, i % 1000);
      if (i >= warmup) us[name].push_back(t);
    }
  if (env.rank == 0) {
    if (!torch::equal(back, buf)) throw ftb::DistError("the echo differs from what was sent");
    for (const std::string& t : dist.transports) std::cout << "link " << t << "\n";
    for (auto& [name, v] : us) {
      std::sort(v.begin(), v.end());
      const double med = v[v.size() / 2];
      std::cout << name << ": " << buf.numel() * 4 << " B round trip median " << med << " us, best "
                << v.front() << " us, " << 2.0 * double(buf.numel() * 4) / med / 1e3
                << " GB/s at the median (" << v.size() << " rounds)\n";
    }
  }
  dist.world->barrier();
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("ftb_p2p_bench",
                       "Times a pipeline transfer's round trip on a local-memory and a Gloo link "
                       "(2 ranks on one host, started by the launcher).");
  cli.add_options()("bytes", "tensor bytes", cxxopts::value<int64_t>()->default_value("1048576"))(
      "rounds", "measured rounds per transport", cxxopts::value<int>()->default_value("200"))(
      "warmup", "unrecorded rounds first", cxxopts::value<int>()->default_value("20"));
  std::optional<int> rc = ftb::guardedCli(cli, [&]() -> std::optional<int> {
    auto r = cli.parse(argc, argv);
    if (r["bytes"].as<int64_t>() < 4 || r["rounds"].as<int>() <= 0 || r["warmup"].as<int>() < 0)
      throw cxxopts::exceptions::exception("expected --bytes >= 4, --rounds > 0, --warmup >= 0");
    run(r["bytes"].as<int64_t>(), r["rounds"].as<int>(), r["warmup"].as<int>());
    return 0;
  });
  return rc.value_or(0);
}
