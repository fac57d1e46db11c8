// sweep_tagger subcommands. Each returns the process exit code and throws FtbError
// for bad input (main maps it to exitCode()). Output goes to `out`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace ftb {

// `args` excludes the program name and the subcommand.
int tagCommand(const std::vector<std::string>& args, std::ostream& out);
int expandCommand(const std::vector<std::string>& args, std::ostream& out);
int aggregateCommand(const std::vector<std::string>& args, std::ostream& out);
int tuneCommand(const std::vector<std::string>& args, std::ostream& out);

// Dispatches argv[1]; prints usage for no/unknown subcommand (exit 2). Output that cannot
// be written to `out` (stdout on a full disk) is an error: exit 4, saying so on `err`.
int runSweepTagger(int argc, char** argv, std::ostream& out, std::ostream& err);

// A POSIX-shell word for `s`: unchanged when it has only safe characters, else
// single-quoted.
std::string shellQuote(const std::string& s);

}  // namespace ftb
