// torchtitanOverrides(): see the contract in cli_args.h.
#include "common/cli_args.h"

#include <new>

#include "common/error.h"
#include "common/out_of_memory.h"

namespace ftb {
namespace {

// "--a.b" or "--a.b=..." with a dot in the name before any '='.
bool isDottedFlag(const std::string& a) {
  if (a.size() < 4 || a.compare(0, 2, "--") != 0) return false;
  size_t eq = a.find('=');
  size_t dot = a.find('.');
  return dot != std::string::npos && dot > 2 && (eq == std::string::npos || dot < eq);
}

// The text between cxxopts' quotes in its message ("Option ‘x’ does not exist").
std::string quoted(const std::string& what) {
  size_t b = what.find(cxxopts::LQUOTE);
  if (b == std::string::npos) return "";
  b += cxxopts::LQUOTE.size();
  size_t e = what.find(cxxopts::RQUOTE, b);
  return e == std::string::npos ? "" : what.substr(b, e - b);
}

// Every long option of `cli` ("--name") with its help line and whether it is a flag.
struct CliOption {
  std::string flag, help;
  bool is_boolean;
};
std::vector<CliOption> cliOptions(const cxxopts::Options& cli) {
  std::vector<CliOption> out;
  for (const std::string& group : cli.groups())
    for (const cxxopts::HelpOptionDetails& o : cli.group_help(group).options)
      for (const std::string& name : o.l) out.push_back({"--" + name, o.desc, o.is_boolean});
  return out;
}

// The option of `words` that took `value`: "--k VALUE" or "--k=VALUE"; "" if none.
std::string optionOfValue(const std::vector<std::string>& words, const std::string& value) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == value && i > 0 && words[i - 1].rfind("-", 0) == 0) return words[i - 1];
    size_t eq = w.find('=');
    if (w.rfind("--", 0) == 0 && eq != std::string::npos && w.substr(eq + 1) == value)
      return w.substr(0, eq);
  }
  return "";
}

}  // namespace

ConfigError cliError(const cxxopts::Options& cli, const cxxopts::exceptions::exception& e,
                     const std::vector<std::string>& words) {
  const std::string help = "see " + cli.program() + " --help";
  const std::string q = quoted(e.what());
  const std::vector<CliOption> options = cliOptions(cli);
  auto find = [&options](const std::string& flag) -> const CliOption* {
    for (const CliOption& o : options)
      if (o.flag == flag) return &o;
    return nullptr;
  };
  if (dynamic_cast<const cxxopts::exceptions::no_such_option*>(&e) != nullptr) {
    std::vector<std::string> flags;
    for (const CliOption& o : options) flags.push_back(o.flag);
    const std::string near = closestName("--" + q, flags);
    return ConfigError("--" + q, "command line", "unknown option",
                       near.empty() ? help : "did you mean '" + near + "'? (" + help + ")");
  }
  if (dynamic_cast<const cxxopts::exceptions::incorrect_argument_type*>(&e) != nullptr) {
    const std::string flag = optionOfValue(words, q);
    const CliOption* o = find(flag);
    const std::string expected = o != nullptr && o->is_boolean ? "true or false" : "a number";
    return ConfigError(flag, "command line", "expected " + expected + ", got '" + q + "'",
                       optionHint(cli, flag));
  }
  if (dynamic_cast<const cxxopts::exceptions::missing_argument*>(&e) != nullptr ||
      dynamic_cast<const cxxopts::exceptions::option_requires_argument*>(&e) != nullptr) {
    const CliOption* o = find("--" + q);
    return ConfigError("--" + q, "command line", "expected a value after it",
                       "write --" + q + " VALUE" + (o != nullptr ? " (" + o->help + ")" : ""));
  }
  return ConfigError("", "command line", e.what(), help);
}

std::optional<cxxopts::ParseResult> parseSubcommand(cxxopts::Options& cli,
                                                    const std::string& command,
                                                    const std::vector<std::string>& args,
                                                    std::ostream& out) {
  std::vector<std::string> words{command};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  cxxopts::ParseResult r;
  try {
    r = cli.parse(int(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw cliError(cli, e, words);
  }
  if (r.count("help")) {
    out << cli.help();
    return std::nullopt;
  }
  return r;
}

std::string optionHint(const cxxopts::Options& cli, const std::string& flag) {
  const std::string help = "see " + cli.program() + " --help";
  for (const CliOption& o : cliOptions(cli))
    if (o.flag == flag) return flag + ": " + o.help + " (" + help + ")";
  return help;
}

std::vector<std::string> torchtitanOverrides(const std::vector<std::string>& args,
                                             const Schema& schema) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!isDottedFlag(a)) {
      out.push_back(a);
      continue;
    }
    std::string body = a.substr(2);
    if (body.find('=') != std::string::npos) {
      out.push_back(body);
      continue;
    }
    const KeySpec* spec = schema.find(body);
    const bool has_next = i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0;
    if (spec != nullptr && spec->type == ValueType::kBool &&
        (!has_next || (args[i + 1] != "true" && args[i + 1] != "false"))) {
      out.push_back(body + "=true");
      continue;
    }
    if (!has_next)
      throw ConfigError(body, "command line", "'" + a + "' has no value",
                        "write " + a + " VALUE, " + a + "=VALUE or " + body + "=VALUE");
    out.push_back(body + "=" + args[++i]);
  }
  return out;
}

std::optional<int> guardedCli(const cxxopts::Options& cli,
                              const std::function<std::optional<int>()>& body, std::ostream& err) {
  try {
    return body();
  } catch (const cxxopts::exceptions::exception& e) {
    err << cli.program() << ": " << e.what() << "\n" << cli.help() << "\n";
    return kExitBadInput;
  } catch (const FtbError& e) {
    err << e.what() << "\n";
    return e.exitCode();
  } catch (const std::bad_alloc& e) {
    return exitOutOfMemory(cli.program().c_str(), e);
  } catch (const std::exception& e) {
    err << cli.program() << ": failed: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace ftb
