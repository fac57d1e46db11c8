// torchtitanOverrides(): see the contract in cli_args.h.
#include "common/cli_args.h"

#include "common/error.h"

namespace ftb {
namespace {

// "--a.b" or "--a.b=..." with a dot in the name before any '='.
bool isDottedFlag(const std::string& a) {
  if (a.size() < 4 || a.compare(0, 2, "--") != 0) return false;
  size_t eq = a.find('=');
  size_t dot = a.find('.');
  return dot != std::string::npos && dot > 2 && (eq == std::string::npos || dot < eq);
}

}  // namespace

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
  } catch (const std::exception& e) {
    err << cli.program() << ": failed: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace ftb
