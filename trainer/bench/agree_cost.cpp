// ftb_agree_bench: what the per-step stop agreement costs (scripts/bench.sh ckpt;
// report: scripts/bench_ckpt_report.py).
//
// The trainer's step agreement (agree() in trainer/loop/train.cpp) is one world all-reduce of
// 8 doubles: loss sum, padded and dataset tokens, stop flag, grad norm², memory flag,
// control command and request id. The stop flag rides in it; the collective runs every
// step anyway for the loss and the clipping norm. Started by the launcher (world >= 2),
// this program forms the world group through initDistributed, as the trainer does (so
// with the trainer's default transport: local memory for ranks of one host, see
// trainer/parallel/local_comm.h), and times the same operation as agree() (a float64
// tensor from N doubles, allReduceSum, read back) for N = 5 (no stop, memory or control
// doubles), 7 (no stop flag) and 8 (as trained), interleaved: every round runs the three,
// in an order that cycles through all six permutations, back to back so the peers stay
// aligned (no compute between collectives, unlike a training step, where the all-reduce
// also absorbs peer skew). Each round also times the 8-double all-reduce on a Gloo group
// of the same ranks (parallel.local_collectives = "off"), for comparison.
//
// Output: each rank writes OUT/agree_rank_R.csv, one row per measured round:
//   round,us_5,us_7,us_8,gloo_8   (microseconds, steady clock, this rank's view)
// and rank 0 writes OUT/transport.txt: the world group's transport (Distributed::transports).
// Warm-up rounds (--warmup) are run and not written.
#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/cli_args.h"
#include "common/dist_env.h"
#include "common/error.h"
#include "common/log.h"
#include "trainer/parallel/dist.h"

namespace {

constexpr std::array<int, 3> kSizes{5, 7, 8};

// One agree()-shaped collective of n doubles; returns its wall time in microseconds.
double timedAgree(ftb::Comm& world, int n) {
  std::vector<double> v(size_t(n), 1.0);
  const auto t0 = std::chrono::steady_clock::now();
  torch::Tensor red = torch::tensor(v, torch::kFloat64);
  world.allReduceSum(red);
  auto a = red.accessor<double, 1>();
  volatile double sink = a[n - 1];  // read back, as agree() does
  (void)sink;
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

void run(const std::string& out_dir, int rounds, int warmup, double timeout_s) {
  ftb::DistEnv env = ftb::discoverDistEnv();
  ftb::setLogIdentity(env.rank, env.world_size, ftb::hostName());
  if (env.world_size < 2)
    throw ftb::ConfigError("ftb_agree_bench: WORLD_SIZE is " + std::to_string(env.world_size) +
                           ", expected >= 2; hint: start it with `launcher --nproc-per-node 2 -- "
                           "ftb_agree_bench OUT_DIR`");
  ftb::Distributed dist =
      ftb::initDistributed(env, std::chrono::milliseconds(int64_t(timeout_s * 1000)), "gloo");
  std::vector<int> all(size_t(env.world_size));
  for (int r = 0; r < env.world_size; ++r) all[size_t(r)] = r;
  dist.local_collectives = "off";
  std::unique_ptr<ftb::Comm> gloo = dist.newGroup("agree_bench_gloo", all);
  std::filesystem::create_directories(out_dir);
  if (env.rank == 0) {
    std::ofstream t(out_dir + "/transport.txt");
    t << (dist.transports.empty() ? std::string("world: Gloo") : dist.transports[0]) << "\n";
  }
  const std::string path = out_dir + "/agree_rank_" + std::to_string(env.rank) + ".csv";
  std::ofstream csv(path);
  if (!csv) throw ftb::IoError("cannot write " + path);
  csv << "round,us_5,us_7,us_8,gloo_8\n";
  std::array<int, 3> order = kSizes;
  for (int i = 0; i < warmup + rounds; ++i) {
    std::next_permutation(order.begin(), order.end());  // cycles through all 6 orders
    std::array<double, 3> us{};
    for (int n : order) {
      const size_t slot = size_t(std::find(kSizes.begin(), kSizes.end(), n) - kSizes.begin());
      us[slot] = timedAgree(*dist.world, n);
    }
    const double g8 = timedAgree(*gloo, 8);
    if (i >= warmup)
      csv << i - warmup << "," << us[0] << "," << us[1] << "," << us[2] << "," << g8 << "\n";
  }
  dist.world->barrier();
  if (!csv.flush()) throw ftb::IoError("writing " + path + " failed");
  FTB_INFO("agree bench: " << rounds << " rounds of 5/7/8-double all-reduces written to " << path);
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options cli("ftb_agree_bench",
                       "Times the trainer's step-agreement all-reduce with 5, 7 and 8 doubles, "
                       "interleaved (world >= 2, started by the launcher).");
  cli.add_options()("out", "output directory for agree_rank_R.csv", cxxopts::value<std::string>())(
      "rounds", "measured rounds", cxxopts::value<int>()->default_value("20000"))(
      "warmup", "unrecorded rounds first", cxxopts::value<int>()->default_value("500"))(
      "timeout", "collective timeout, seconds", cxxopts::value<double>()->default_value("60"));
  cli.parse_positional({"out"});
  std::optional<int> rc = ftb::guardedCli(cli, [&]() -> std::optional<int> {
    auto r = cli.parse(argc, argv);
    if (!r.count("out") || r["rounds"].as<int>() <= 0 || r["warmup"].as<int>() < 0)
      throw cxxopts::exceptions::exception("expected OUT_DIR, --rounds > 0 and --warmup >= 0");
    run(r["out"].as<std::string>(), r["rounds"].as<int>(), r["warmup"].as<int>(),
        r["timeout"].as<double>());
    return 0;
  });
  return rc.value_or(0);
}
