// ftb_synth_runs: writes synthetic run directories shaped exactly like the
// trainer's (run.toml via prepareRunDir, one MetricsFile per rank with a value for every
// step column of common/step_columns.h), for the aggregation benchmark and tests.
//
// Usage: ftb_synth_runs OUT_DIR [--runs N] [--ranks-per-node R] [--nodes K]
//                       [--steps S] [--states completed,failed,oom,running,...]
//                       [--repeats N] [--noisy] [--price-per-hour P]
//                       [--speed F] [--set key=value ...]
// Run i has seq_len 256|512|1024|2048 (i % 4), micro batch 1|2|4|8 (i/4 % 4),
// training.seed i/16 and state states[i % |states|]. failed/oom/running runs stop
// at S/2 steps; oom: the last rank says oom, the others failed; running: no final
// status (a run killed with SIGKILL, or still running). Values are deterministic.
// --repeats N writes each run N times (sweep.repeat 0..N-1: the same config hash, tags
// .r1, .r2, ...; repeat r > 0 draws other step times); --noisy marks every run noisy as
// the trainer does (root attributes interference and noisy); --price-per-hour sets
// metrics.price_per_hour (default 0.5; 0: none recorded); --speed F divides every step
// time by F (0.8: tokens/s 20 % lower, the same draws); --set adds config overrides (a
// key of the experiment changes the config hash and the tag).
#include <cmath>
#include <iostream>
#include <random>
#include <sstream>
#include <vector>

#include "common/cli_args.h"  // cxxopts, as in every ftbench program
#include "common/config.h"
#include "common/error.h"
#include "common/h5_metrics.h"
#include "common/step_columns.h"
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
[output]
sweep_fmt = "{model.name}.sl{data.seq_len}.mb{training.micro_batch_size}.ws{world_size}.{hash}"
)";

// One step's row of every column (common/step_columns.h): deterministic noise around a
// step time that grows with the tokens per rank; no pipeline (parallel.pp = 1), so the pp_*
// columns are 0 as in the trainer's files.
struct SynthStep {
  int64_t step = 0;
  double t = 0, padded = 0, peak = 0, gemm = 0, flops_per_token = 0;
  int world = 1, rank = 0;
  double speed = 1;  // step times divided by it
};
StepRow synthRow(SynthStep& st, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> noise(0.9, 1.1);
  const double base = (1e-5 * st.padded / st.world + 0.01) / st.speed;
  const double fwd = base * 0.3 * noise(rng), bwd = base * 0.55 * noise(rng);
  const double opt = base * 0.1 * noise(rng), comm = base * 0.04 * noise(rng);
  const double data = 0.001 / st.speed;
  const double total = data + fwd + bwd + opt + comm;
  st.t += total;
  const double dataset = std::floor(st.padded * 0.8 * noise(rng)), tps = st.padded / total;
  const double s = double(st.step), rss = 1e8 + 1e5 * s + 1e6 * st.rank;
  const double mfu = st.flops_per_token * tps / st.world / st.peak;
  // The draws above, then loss and grad_norm, in the order of the files before the other
  // columns came: the same seed gives those files' values.
  const double loss = 10.0 * std::exp(-0.01 * s) + 0.1 * noise(rng), grad_norm = noise(rng);
  const double wait = 0.01 * noise(rng), steal = 0.001 * noise(rng);
  const double other_load = 0.05 * noise(rng), switches = std::round(10 * noise(rng));
  using C = StepCol;
  StepRow row;
  row.set(C::kStep, s)
      .set(C::kTimeS, st.t)
      .set(C::kStepTimeS, total)
      .set(C::kDataS, data)
      .set(C::kForwardS, fwd)
      .set(C::kBackwardS, bwd)
      .set(C::kOptimizerS, opt)
      .set(C::kCommS, comm)
      .set(C::kAgreeS, 0.2 * comm)
      .set(C::kLoss, loss)
      .set(C::kGradNorm, grad_norm)
      .set(C::kLr, 1e-3)
      .set(C::kTokensPadded, st.padded)
      .set(C::kTokensDataset, dataset)
      .set(C::kTokensPerSPadded, tps)
      .set(C::kTokensPerSDataset, dataset / total)
      .set(C::kTokensPerSPerDevice, tps / st.world)
      .set(C::kMfu, mfu)
      .set(C::kMfuCausal, mfu)  // the synthetic count has no attention term and
      .set(C::kHfu, mfu)        // recomputes nothing: all three agree
      .set(C::kGemmEfficiency, st.flops_per_token * tps / st.world / st.gemm)
      .set(C::kFlopsPerToken, st.flops_per_token)
      .set(C::kRssBytes, rss)
      .set(C::kPeakRssBytes, rss)
      .set(C::kAllocatorKeptBytes, std::nan(""))  // not measured: no allocator here
      .set(C::kPpBubbleS, 0)
      .set(C::kPpBubbleFraction, 0)
      .set(C::kPpMakespanS, 0)
      .set(C::kPpP2pBytes, 0)
      .set(C::kInterference, wait + steal)
      .set(C::kRunqueueWaitFrac, wait)
      .set(C::kCpuStealFrac, steal)
      .set(C::kOtherLoadCpus, other_load)
      .set(C::kInvoluntarySwitches, switches)
      .set(C::kCpuThreadS, total - comm)  // one compute thread, asleep while it waits
      .set(C::kTokensPerCpuS, st.padded / st.world / (total - comm));
  ++st.step;
  return row;
}

struct SynthOptions {
  int nodes = 1, per_node = 2, steps = 100, repeat = 0;
  bool noisy = false;
  double price_per_hour = 0.5, speed = 1;
  std::vector<std::string> sets;  // --set key=value
};

// The trainer's end-of-run marks of a noisy run (trainer/loop/step_log.cpp).
void markNoisy(MetricsFile& f) {
  f.setRootAttr("interference", 0.31);
  f.setRootAttr("noisy", std::string("interference 31.0 % on rank 0 > 5.0 % (synthetic)"));
}

void writeRun(const std::string& out, int i, const SynthOptions& o, RunState state) {
  const int64_t seq = 256 << (i % 4), mbs = 1 << ((i / 4) % 4);
  const int nodes = o.nodes, per_node = o.per_node, steps = o.steps;
  const int world = nodes * per_node;
  std::vector<std::string> overrides = {
      "data.seq_len=" + std::to_string(seq), "training.micro_batch_size=" + std::to_string(mbs),
      "training.seed=" + std::to_string(i / 16), "sweep.repeat=" + std::to_string(o.repeat),
      "metrics.price_per_hour=" + formatDouble(o.price_per_hour)};
  overrides.insert(overrides.end(), o.sets.begin(), o.sets.end());
  Config cfg = Config::fromString(kModel, "synth", overrides);
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
    f.declareStepColumns();
    std::mt19937_64 rng(static_cast<uint64_t>(i) * 1000 + rank +
                        static_cast<uint64_t>(o.repeat) * 1000003);
    SynthStep st;
    st.padded = double(mbs * seq * world);
    st.peak = peak, st.gemm = gemm, st.flops_per_token = flops_per_token;
    st.world = world, st.rank = rank;
    st.speed = o.speed;
    for (int s = 0; s < done; ++s) f.appendStep(synthRow(st, rng));
    if (o.noisy && rank == 0) markNoisy(f);
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
      cxxopts::value<std::string>()->default_value("completed"))(
      "repeats", "runs of each configuration (sweep.repeat)",
      cxxopts::value<int>()->default_value("1"))("noisy", "mark every run noisy")(
      "price-per-hour", "metrics.price_per_hour (0: none)",
      cxxopts::value<double>()->default_value("0.5"))(
      "speed", "step times divided by F (0.8: tokens/s 20 % lower)",
      cxxopts::value<double>()->default_value("1"))(
      "set", "config override key=value (repeatable)",
      cxxopts::value<std::vector<std::string>>());
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
    ftb::SynthOptions o;
    o.nodes = r["nodes"].as<int>();
    o.per_node = r["ranks-per-node"].as<int>();
    o.steps = r["steps"].as<int>();
    o.noisy = r.count("noisy") > 0;
    o.price_per_hour = r["price-per-hour"].as<double>();
    o.speed = r["speed"].as<double>();
    if (!(o.speed > 0)) throw std::invalid_argument("--speed must be > 0");
    if (r.count("set")) o.sets = r["set"].as<std::vector<std::string>>();
    for (o.repeat = 0; o.repeat < r["repeats"].as<int>(); ++o.repeat)  // round robin
      for (int i = 0; i < r["runs"].as<int>(); ++i)
        ftb::writeRun(r["out"].as<std::string>(), i, o, states[i % states.size()]);
  } catch (const std::exception& e) {
    std::cerr << "ftb_synth_runs: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
