// ftb_synth_runs: writes synthetic run directories shaped exactly like the
// trainer's (run.toml via prepareRunDir, one MetricsFile per rank with the trainer's
// metric names), for the aggregation benchmark and end-to-end tests.
//
// Usage: ftb_synth_runs OUT_DIR [--runs N] [--ranks-per-node R] [--nodes K]
//                       [--steps S] [--states completed,failed,oom,running,...]
// Run i has seq_len 256|512|1024|2048 (i % 4), micro batch 1|2|4|8 (i/4 % 4),
// training.seed i/16 and state states[i % |states|]. failed/oom/running runs stop
// at S/2 steps; oom: the last rank says oom, the others failed; running: no final
// status (a run killed with SIGKILL, or still running). Values are deterministic.
#include <cmath>
#include <iostream>
#include <random>
#include <sstream>

#include "common/cli_args.h"  // cxxopts, as in every ftbench program
#include "common/config.h"
#include "common/error.h"
#include "common/h5_metrics.h"
#include "common/tag.h"

namespace ftb {
namespace {

const char* kModel = R"([model]
name = "synth"
dim = 256
n_layers = 4
n_heads = 4
n_kv_heads = 4
ffn_dim = 688
vocab_size = 32000
max_seq_len = 2048
[metrics]
skip_first_steps = 2
price_per_hour = 0.5
[output]
sweep_fmt = "{model.name}.sl{data.seq_len}.mb{training.micro_batch_size}.ws{world_size}.{hash}"
)";

const char* kMetrics[] = {"step",
                          "time_s",
                          "step_time_s",
                          "data_s",
                          "forward_s",
                          "backward_s",
                          "optimizer_s",
                          "comm_s",
                          "loss",
                          "grad_norm",
                          "lr",
                          "tokens_padded",
                          "tokens_dataset",
                          "tokens_per_s_padded",
                          "tokens_per_s_dataset",
                          "tokens_per_s_per_device",
                          "mfu",
                          "gemm_efficiency",
                          "rss_bytes",
                          "peak_rss_bytes"};
bool isInt(const std::string& m) {
  return m == "step" || m == "tokens_padded" || m == "tokens_dataset" || m == "rss_bytes" ||
         m == "peak_rss_bytes";
}

void writeRun(const std::string& out, int i, int nodes, int per_node, int steps, RunState state) {
  const int64_t seq = 256 << (i % 4), mbs = 1 << ((i / 4) % 4);
  const int world = nodes * per_node;
  Config cfg = Config::fromString(
      kModel, "synth",
      {"data.seq_len=" + std::to_string(seq), "training.micro_batch_size=" + std::to_string(mbs),
       "training.seed=" + std::to_string(i / 16)});
  RunDir rd = prepareRunDir(cfg, world, out, false);
  const int done = state == RunState::Completed ? steps : steps / 2;
  const double peak = 2e13, gemm = 1e13,
               flops_per_token = 6.0 * 4 * (4 * 256 * 256 + 3 * 256 * 688);
  for (int rank = 0; rank < world; ++rank) {
    RunInfo info;
    info.tag = rd.tag;
    info.config_hash = configHash(cfg, world);
    info.hostname = "synth" + std::to_string(rank / per_node);
    info.start_utc = "2026-01-01T00:00:00Z";
    info.ftbench_version = "synthetic";
    info.device = "cpu";
    info.peak_source = "synthetic";
    info.config_toml = cfg.toToml();
    info.world_size = world;
    info.rank = rank;
    info.local_rank = rank % per_node;
    info.node_rank = rank / per_node;
    info.peak_flops = peak;
    info.extra_attrs = {{"gemm_flops", gemm}, {"gemm_source", std::string("synthetic")}};
    MetricsFile f = MetricsFile::create(metricsFilePath(rd.path, rank), info);
    for (const char* m : kMetrics) f.declareMetric(m, isInt(m));
    std::mt19937_64 rng(static_cast<uint64_t>(i) * 1000 + rank);
    std::uniform_real_distribution<double> noise(0.9, 1.1);
    const double padded = double(mbs * seq * world), base = 1e-5 * padded / world + 0.01;
    double t = 0;
    for (int s = 0; s < done; ++s) {
      double fwd = base * 0.3 * noise(rng), bwd = base * 0.55 * noise(rng);
      double opt = base * 0.1 * noise(rng), comm = base * 0.04 * noise(rng), data = 0.001;
      double total = data + fwd + bwd + opt + comm;
      t += total;
      double dataset = std::floor(padded * 0.8 * noise(rng));
      double tps = padded / total;
      f.appendStep({{"step", s},
                    {"time_s", t},
                    {"step_time_s", total},
                    {"data_s", data},
                    {"forward_s", fwd},
                    {"backward_s", bwd},
                    {"optimizer_s", opt},
                    {"comm_s", comm},
                    {"loss", 10.0 * std::exp(-0.01 * s) + 0.1 * noise(rng)},
                    {"grad_norm", noise(rng)},
                    {"lr", 1e-3},
                    {"tokens_padded", padded},
                    {"tokens_dataset", dataset},
                    {"tokens_per_s_padded", tps},
                    {"tokens_per_s_dataset", dataset / total},
                    {"tokens_per_s_per_device", tps / world},
                    {"mfu", flops_per_token * tps / world / peak},
                    {"gemm_efficiency", flops_per_token * tps / world / gemm},
                    {"rss_bytes", 1e8 + 1e5 * s + 1e6 * rank},
                    {"peak_rss_bytes", 1e8 + 1e5 * s + 1e6 * rank}});
    }
    if (state == RunState::Completed) {
      f.setStatus(state, 0, "completed " + std::to_string(done) + " steps");
    } else if (state == RunState::Oom) {
      bool culprit = rank == world - 1;
      f.setStatus(culprit ? RunState::Oom : RunState::Failed, culprit ? 5 : 3,
                  culprit ? "out of memory: synthetic" : "peer rank died");
    } else if (state != RunState::Running) {
      f.setStatus(state, 1, "synthetic " + toString(state));
    }
    f.close();
  }
}

}  // namespace
}  // namespace ftb

int main(int argc, char** argv) {
  cxxopts::Options opts("ftb_synth_runs", "Write synthetic ftbench run directories.");
  opts.add_options()("out", "output dir", cxxopts::value<std::string>())(
      "runs", "runs", cxxopts::value<int>()->default_value("4"))(
      "nodes", "nodes per run", cxxopts::value<int>()->default_value("1"))(
      "ranks-per-node", "ranks per node", cxxopts::value<int>()->default_value("2"))(
      "steps", "steps per completed run", cxxopts::value<int>()->default_value("100"))(
      "states", "comma-separated states, cycled over runs",
      cxxopts::value<std::string>()->default_value("completed"));
  opts.parse_positional({"out"});
  try {
    auto r = opts.parse(argc, argv);
    if (!r.count("out")) {
      std::cerr << opts.help();
      return 2;
    }
    std::vector<ftb::RunState> states;
    std::stringstream ss(r["states"].as<std::string>());
    for (std::string s; std::getline(ss, s, ',');) states.push_back(ftb::parseRunState(s));
    for (int i = 0; i < r["runs"].as<int>(); ++i)
      ftb::writeRun(r["out"].as<std::string>(), i, r["nodes"].as<int>(),
                    r["ranks-per-node"].as<int>(), r["steps"].as<int>(), states[i % states.size()]);
  } catch (const std::exception& e) {
    std::cerr << "ftb_synth_runs: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
