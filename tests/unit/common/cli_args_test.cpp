// Tests for override arguments: torchtitan spellings and values with commas.
#include "common/cli_args.h"

#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>

#include "common/error.h"

namespace ftb {
namespace {

using Args = std::vector<std::string>;

TEST(TorchtitanOverrides, BothSpellingsBecomeKeyValue) {
  EXPECT_EQ(torchtitanOverrides({"--config", "c.toml", "--training.lr", "1e-3",
                                 "--training.max_steps=7", "data.seq_len=64"}),
            (Args{"--config", "c.toml", "training.lr=1e-3", "training.max_steps=7",
                  "data.seq_len=64"}));
  // A negative number is a value, not a flag.
  EXPECT_EQ(torchtitanOverrides({"--training.lr", "-1"}), (Args{"training.lr=-1"}));
}

TEST(TorchtitanOverrides, BoolKeyAloneMeansTrue) {
  EXPECT_EQ(torchtitanOverrides({"--output.no_sweep_dir", "--print-config"}),
            (Args{"output.no_sweep_dir=true", "--print-config"}));
  EXPECT_EQ(torchtitanOverrides({"--output.no_sweep_dir", "false"}),
            (Args{"output.no_sweep_dir=false"}));
  EXPECT_EQ(torchtitanOverrides({"--output.no_sweep_dir", "training.lr=1"}),
            (Args{"output.no_sweep_dir=true", "training.lr=1"}));
}

TEST(TorchtitanOverrides, MissingValueNamesTheKey) {
  try {
    torchtitanOverrides({"--training.lr"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "config error: command line: key 'training.lr': '--training.lr' has no value\n"
              "  hint: write --training.lr VALUE, --training.lr=VALUE or training.lr=VALUE");
    EXPECT_EQ(e.exitCode(), 2);
  }
}

// cxxopts' vector options split on ',' unless CXXOPTS_VECTOR_DELIMITER is changed
// (cli_args.h): positional overrides must arrive whole.
TEST(CxxoptsPositionals, CommasAreKeptWhole) {
  cxxopts::Options o("t", "");
  o.add_options()("overrides", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"overrides"});
  std::vector<std::string> words = {"t", "output.dir=/tmp/x,y", "model.x=[1,2]",
                                    "output.sweep_fmt=\"{model.name},{hash}\""};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  auto r = o.parse(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(r["overrides"].as<std::vector<std::string>>(),
            (Args{"output.dir=/tmp/x,y", "model.x=[1,2]",
                  "output.sweep_fmt=\"{model.name},{hash}\""}));
}

}  // namespace
}  // namespace ftb

namespace ftb {
namespace {

// The one catch block of trainer and trainer export: message format and exit code per
// kind of exception; a normal return passes through.
TEST(GuardedCli, MapsEachExceptionToItsMessageAndExitCode) {
  cxxopts::Options cli("prog", "test program");
  cli.add_options()("n", "a number", cxxopts::value<int>());
  auto run = [&](const std::function<std::optional<int>()>& body, std::string& text) {
    std::ostringstream err;
    std::optional<int> code = guardedCli(cli, body, err);
    text = err.str();
    return code;
  };
  std::string text;
  EXPECT_EQ(run([] { return std::nullopt; }, text), std::nullopt);
  EXPECT_EQ(text, "");
  EXPECT_EQ(run([] { return 0; }, text), 0);
  std::vector<std::string> words{"prog", "--bogus"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  EXPECT_EQ(run(
                [&]() -> std::optional<int> {
                  cli.parse(int(argv.size()), argv.data());
                  return 0;
                },
                text),
            kExitBadInput);
  EXPECT_EQ(text.rfind("prog: ", 0), 0u) << text;
  EXPECT_NE(text.find("bogus"), std::string::npos) << text;
  EXPECT_NE(text.find("Usage:"), std::string::npos) << "help follows: " << text;
  EXPECT_EQ(run([]() -> std::optional<int> { throw IoError("disk gone"); }, text), 4);
  EXPECT_EQ(text, "disk gone\n");
  EXPECT_EQ(run([]() -> std::optional<int> { throw std::runtime_error("stoi"); }, text), 1);
  EXPECT_EQ(text, "prog: failed: stoi\n");
}

}  // namespace
}  // namespace ftb
