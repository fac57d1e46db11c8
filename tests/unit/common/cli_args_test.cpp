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
  EXPECT_EQ(
      torchtitanOverrides({"--config", "c.toml", "--training.lr", "1e-3", "--training.max_steps=7",
                           "data.seq_len=64"}),
      (Args{"--config", "c.toml", "training.lr=1e-3", "training.max_steps=7", "data.seq_len=64"}));
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
  EXPECT_EQ(
      r["overrides"].as<std::vector<std::string>>(),
      (Args{"output.dir=/tmp/x,y", "model.x=[1,2]", "output.sweep_fmt=\"{model.name},{hash}\""}));
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

namespace ftb {
namespace {

// What cliError makes of `words` parsed by a small program: the message of the
// ConfigError (exit 2) a user sees for a bad command line.
std::string cliErrorOf(std::vector<std::string> words) {
  cxxopts::Options cli("prog", "test program");
  cli.add_options()("world-size", "world size to plan for", cxxopts::value<int>())(
      "config", "run config (TOML)", cxxopts::value<std::string>())("hash", "print the hash")(
      "h,help", "show help");
  words.insert(words.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  try {
    cli.parse(int(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    ConfigError err = cliError(cli, e, words);
    EXPECT_EQ(err.exitCode(), kExitBadInput);
    return err.what();
  }
  return "(parsed)";
}

// Every bad command line names the option, says what was expected and gives a hint
// (before: "key 'arguments': Argument ‘x’ failed to parse", the usage dumped for a typo).
TEST(CliError, NamesTheOptionTheExpectationAndAHint) {
  EXPECT_EQ(cliErrorOf({"--confg", "x.toml"}),
            "config error: command line: key '--confg': unknown option\n"
            "  hint: did you mean '--config'? (see prog --help)");
  EXPECT_EQ(cliErrorOf({"--zzzzzzzzzz"}),
            "config error: command line: key '--zzzzzzzzzz': unknown option\n"
            "  hint: see prog --help");
  EXPECT_EQ(cliErrorOf({"--world-size", "x"}),
            "config error: command line: key '--world-size': expected a number, got 'x'\n"
            "  hint: --world-size: world size to plan for (see prog --help)");
  EXPECT_EQ(cliErrorOf({"--world-size=2x"}),
            "config error: command line: key '--world-size': expected a number, got '2x'\n"
            "  hint: --world-size: world size to plan for (see prog --help)");
  EXPECT_EQ(cliErrorOf({"--hash=maybe"}),
            "config error: command line: key '--hash': expected true or false, got 'maybe'\n"
            "  hint: --hash: print the hash (see prog --help)");
  EXPECT_EQ(cliErrorOf({"--config"}),
            "config error: command line: key '--config': expected a value after it\n"
            "  hint: write --config VALUE (run config (TOML))");
  EXPECT_EQ(cliErrorOf({"--world-size", "2"}), "(parsed)");
}

}  // namespace
}  // namespace ftb
