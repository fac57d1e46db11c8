// trainer: one process per rank. parse -> init dist -> build -> train -> close.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>

#include "common/cli_args.h"
#include "common/config.h"
#include "common/crash_report.h"
#include "common/error.h"
#include "common/log.h"
#include "common/out_of_memory.h"
#include "common/step_columns.h"
#include "trainer/data/tokenize_cli.h"
#include "trainer/hf/export.h"
#include "trainer/hf/logits.h"
#include "trainer/session.h"

namespace {

// --max-micro-batch and its --safety-margin (a fraction in [0, 1), only with it).
void readMaxMicroBatchOptions(const cxxopts::ParseResult& args, ftb::SessionOptions& opts) {
  opts.max_micro_batch = args.count("max-micro-batch") > 0;
  if (!args.count("safety-margin")) return;
  opts.safety_margin = args["safety-margin"].as<double>();
  if (!(opts.safety_margin >= 0 && opts.safety_margin < 1) || !opts.max_micro_batch)
    throw ftb::ConfigError("--safety-margin", "command line",
                           "expected a fraction in [0, 1) with --max-micro-batch",
                           "e.g. --max-micro-batch --safety-margin 0.1");
}

// --probe measures and exits: a flag that asks for another answer (or plans another world
// size) cannot go with it.
void readProbeOption(const cxxopts::ParseResult& args, ftb::SessionOptions& opts) {
  opts.probe = args.count("probe") > 0;
  if (!opts.probe) return;
  for (const char* flag : {"print-config", "estimate-memory", "fit", "max-micro-batch",
                           "safety-margin", "world-size", "generate-data"})
    if (args.count(flag))
      throw ftb::ConfigError("--probe", "command line",
                             std::string("cannot be combined with --") + flag +
                                 ": --probe measures the GEMM and the link of this config's "
                                 "run, prints one JSON line and exits",
                             "run them one at a time, e.g. launcher --nproc-per-node 2 -- trainer "
                             "--config X.toml --probe");
}

// The trainer's command line: its flags, and key=value overrides as positional words.
cxxopts::Options trainerCli() {
  cxxopts::Options cli(
      "trainer",
      "ftbench trainer: one process per rank.\n"
      "  trainer --config configs/runs/tiny.toml [key=value ...]\n"
      "  trainer export --checkpoint STEP_DIR --out HF_DIR (trainer export --help)\n"
      "  trainer tokenize --tokenizer PATH IN.jsonl OUT.jsonl (trainer tokenize --help)\n"
      "  trainer logits --model HF_DIR --ids 1,2,3 --out F.safetensors (trainer logits --help)\n"
      "  overrides also as --key VALUE or --key=VALUE (torchtitan style),\n"
      "  e.g. --training.lr 1e-3");
  cli.add_options()("config", "run config (TOML)", cxxopts::value<std::string>())(
      "output-dir", "same as output.dir=DIR", cxxopts::value<std::string>())(
      "no-sweep-dir", "write into the output dir itself (output.no_sweep_dir=true)")(
      "print-config", "print the resolved config and exit")(
      "generate-data",
      "write the synthetic dataset of this config to PATH (.jsonl or .bin) and exit",
      cxxopts::value<std::string>())(
      "estimate-memory", "print the per-rank memory estimate for this config and layout and exit")(
      "fit",
      "with --estimate-memory: which combinations of bf16 weights, optimizer, the step inside "
      "backward and activation checkpointing fit the budget, and at which largest micro-batch")(
      "world-size",
      "world size to plan for with --estimate-memory or --max-micro-batch "
      "(default: the environment's)",
      cxxopts::value<int>())("max-micro-batch",
                             "find the largest training.micro_batch_size whose real run fits the "
                             "per-rank memory budget (parallel.memory_limit_gb, else node memory / "
                             "ranks): estimator, then short measured runs; print it and exit")(
      "safety-margin",
      "with --max-micro-batch: fraction of the budget a run must leave free "
      "(default 0.10)",
      cxxopts::value<double>())(
      "probe",
      "measure the GEMM and the all-reduce bus bandwidth this config's run would get (under "
      "the launcher like a run), print one JSON line on rank 0 and exit; writes no run "
      "directory")("overrides", "key=value overrides", cxxopts::value<std::vector<std::string>>())(
      "help-config", "print every config key (type, default, meaning) as a markdown table")(
      "help-metrics",
      "print every per-step column of the metrics file (/steps: units, type, meaning) as a "
      "markdown table")("h,help", "show help");
  cli.parse_positional({"overrides"});
  cli.positional_help("[key=value ...]");
  return cli;
}

int trainerMain(int argc, char** argv) {
  using namespace ftb;
  if (argc > 1 && std::string(argv[1]) == "export")  // trainer export --checkpoint C --out D
    return hf::exportMain(std::vector<std::string>(argv + 2, argv + argc));
  if (argc > 1 && std::string(argv[1]) == "tokenize")  // trainer tokenize --tokenizer T IN OUT
    return tokenizeMain(std::vector<std::string>(argv + 2, argv + argc));
  if (argc > 1 && std::string(argv[1]) == "logits")  // trainer logits --model D --ids ... --out F
    return hf::logitsMain(std::vector<std::string>(argv + 2, argv + argc));
  cxxopts::Options cli = trainerCli();
  SessionOptions opts;
  opts.argv.assign(argv, argv + argc);
  const std::optional<int> exit_code = guardedCli(cli, [&]() -> std::optional<int> {
    // Owned copies: torchtitanOverrides() rewrites --a.b VALUE into a.b=VALUE.
    std::vector<std::string> words =
        torchtitanOverrides(std::vector<std::string>(argv + 1, argv + argc));
    words.insert(words.begin(), argv[0]);
    std::vector<char*> cargv;
    for (std::string& w : words) cargv.push_back(w.data());
    cxxopts::ParseResult args;
    try {
      args = cli.parse(static_cast<int>(cargv.size()), cargv.data());
    } catch (const cxxopts::exceptions::exception& e) {
      throw cliError(cli, e, words);
    }
    if (args.count("help")) {
      std::cout << cli.help()
                << "\nConfig keys: trainer --help-config\nMetrics columns: trainer "
                   "--help-metrics\n";
      return 0;
    }
    if (args.count("help-config")) {
      std::cout << schemaMarkdown(trainerSchema());
      return 0;
    }
    if (args.count("help-metrics")) {
      std::cout << stepColumnsMarkdown();
      return 0;
    }
    if (!args.count("config"))
      throw ConfigError("--config", "command line", "missing",
                        "trainer --config configs/runs/tiny.toml");
    opts.config_path = args["config"].as<std::string>();
    if (args.count("overrides")) opts.overrides = args["overrides"].as<std::vector<std::string>>();
    if (args.count("output-dir"))
      opts.overrides.push_back("output.dir=" + args["output-dir"].as<std::string>());
    if (args.count("no-sweep-dir")) opts.overrides.push_back("output.no_sweep_dir=true");
    opts.print_config = args.count("print-config") > 0;
    opts.estimate_memory = args.count("estimate-memory") > 0;
    opts.fit = args.count("fit") > 0;
    if (opts.fit && !opts.estimate_memory)
      throw ConfigError("--fit", "command line", "lists what fits with --estimate-memory only",
                        "trainer --config RUN.toml --estimate-memory --fit");
    if (args.count("world-size")) {
      opts.world_size = args["world-size"].as<int>();
      if (opts.world_size < 1)  // 0 would mean "not given" below: plan for the environment's
        throw ConfigError("--world-size", "command line",
                          "must be >= 1, got " + std::to_string(opts.world_size),
                          "the number of ranks to plan for, e.g. --world-size 8");
    }
    readMaxMicroBatchOptions(args, opts);
    readProbeOption(args, opts);
    if (args.count("generate-data")) opts.generate_data = args["generate-data"].as<std::string>();
    return std::nullopt;
  });
  if (exit_code) return *exit_code;
  return runSession(opts);
}

// Ends the process with `code` without running static destructors. REQUIRES: every file
// this process writes is closed (the session, the exporters and the CLI close theirs before
// they return; HDF5 flushes nothing at exit: common/hdf5.h). libtorch's destructors
// deregister its ~2,000 operators one by one: about 0.07 CPU-s, a fifth of a
// `--print-config`, and nothing of this process's output depends on them.
[[noreturn]] void exitWithoutTeardown(int code) {
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  ftb::installCrashReport("trainer");
  int code = 0;
  try {
    code = trainerMain(argc, argv);
  } catch (const std::bad_alloc& e) {  // the session's and the CLI's own catches report most
    code = ftb::exitOutOfMemory("trainer", e);
  }
  exitWithoutTeardown(code);
}
