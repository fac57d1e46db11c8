// Command-line helpers shared by trainer and sweep_tagger (override arguments, the
// catch block of a main).
//
// Contract:
// - Include this header instead of <cxxopts.hpp>: it sets cxxopts' vector delimiter
//   to '\0', which no argv string contains, so each positional `key=value` argument
//   reaches the program whole ('output.dir=/tmp/x,y', 'model.x=[1,2]'). Every
//   translation unit of a program must include cxxopts the same way (ODR).
// - torchtitanOverrides() rewrites torchtitan's override spellings `--a.b VALUE` and
//   `--a.b=VALUE` (a dotted key after "--") into `a.b=VALUE`. A bool key given alone
//   (`--output.no_sweep_dir`, next argument not true/false) means `=true`. A dotted
//   key with no value (last argument, or followed by "--flag") is a ConfigError
//   naming the key. Arguments without a dot after "--" are left for cxxopts.
#pragma once

#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"

namespace ftb {

std::vector<std::string> torchtitanOverrides(const std::vector<std::string>& args,
                                             const Schema& schema = trainerSchema());

// A cxxopts parse error of `cli` as the ConfigError of every other bad input: it names
// the option (for a value that does not parse, the option in `words` that took it),
// says what was expected and gives a hint: the closest known option for an unknown one,
// else the option's own help line and "<program> --help". `words` are the words parsed.
ConfigError cliError(const cxxopts::Options& cli, const cxxopts::exceptions::exception& e,
                     const std::vector<std::string>& words);

// The arguments of a subcommand (`command`: "trainer export") parsed by `cli`, whose
// options include "help": nullopt once --help has printed cli.help() to `out` (exit 0);
// a parse error throws cliError's ConfigError. The result owns its values.
std::optional<cxxopts::ParseResult> parseSubcommand(cxxopts::Options& cli,
                                                    const std::string& command,
                                                    const std::vector<std::string>& args,
                                                    std::ostream& out = std::cout);

// The hint for a bad value of `flag` ("--x") that has none of its own: "--x: <its help
// line> (see <program> --help)"; "see <program> --help" for a flag `cli` does not know.
std::string optionHint(const cxxopts::Options& cli, const std::string& flag);

// The one catch block of a program's command-line handling (trainer, trainer export):
// returns what body() returns (nullopt: carry on; a code: exit with it). An exception
// from body is printed to `err` and becomes the exit code (<program> = cli.program()):
//   a cxxopts parse error    "<program>: <what>\n<help>\n"   kExitBadInput (2)
//   an FtbError              "<what>\n"                       its exitCode()
//   any other std::exception "<program>: failed: <what>\n"    1
std::optional<int> guardedCli(const cxxopts::Options& cli,
                              const std::function<std::optional<int>()>& body,
                              std::ostream& err = std::cerr);

}  // namespace ftb
