// The one TOML reader (see toml.h for the toml++ 3.3.0 workaround).
#include "common/toml.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "common/error.h"

namespace ftb {

toml::table parseToml(const std::string& text, const std::string& source_name) {
  try {
    return toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    throw ConfigError("", source_name + ":" + std::to_string(e.source().begin.line),
                      "TOML syntax error: " + std::string(e.description()),
                      "check that line: key = value, strings in quotes (name = \"tiny\"), "
                      "[section] headers");
  }
}

namespace {
void collectLeaves(const toml::table& table, const std::string& prefix,
                   std::vector<std::pair<std::string, const toml::node*>>& out) {
  for (const auto& [k, node] : table) {
    std::string key = prefix + std::string(k.str());
    if (const toml::table* sub = node.as_table())
      collectLeaves(*sub, key + ".", out);
    else
      out.emplace_back(std::move(key), &node);
  }
}
}  // namespace

std::vector<std::pair<std::string, const toml::node*>> tomlLeaves(const toml::table& table) {
  std::vector<std::pair<std::string, const toml::node*>> out;
  collectLeaves(table, "", out);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto &x = a.second->source().begin, &y = b.second->source().begin;
    return std::tie(x.line, x.column) < std::tie(y.line, y.column);
  });
  return out;
}

std::string tomlLineOf(const std::string& file, const toml::node& node) {
  return file + ":" + std::to_string(node.source().begin.line);
}

// Arrays and tables are spelled here, not by toml++'s formatter: toml++ 3.3.0 weighs
// them for inline printing with static_cast<size_t>(log10(v)), undefined behaviour for
// a float in (0, 1) (fuzz_config: `[[training]]\nlr = 1e-3`). Scalars are printed by
// toml++ (no weighing there).
std::string tomlText(const toml::node& node) {
  if (const toml::array* a = node.as_array()) {
    std::string s = "[";  // toml++'s spelling: "[ 1, 2.5 ]", "[]"
    for (size_t i = 0; i < a->size(); ++i) s += (i ? ", " : " ") + tomlText(*a->get(i));
    return s + (a->empty() ? "]" : " ]");
  }
  if (const toml::table* t = node.as_table()) {
    std::string s = "{";
    for (const auto& [k, v] : *t)
      s += (s.size() > 1 ? ", " : " ") + std::string(k.str()) + " = " + tomlText(v);
    return s + (s.size() > 1 ? " }" : "}");
  }
  std::ostringstream os;
  node.visit([&os](const auto& x) { os << x; });
  return os.str();
}

std::optional<Value> tomlValue(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::integer:
      return Value(n.as_integer()->get());
    case toml::node_type::floating_point:
      return Value(n.as_floating_point()->get());
    case toml::node_type::boolean:
      return Value(n.as_boolean()->get());
    case toml::node_type::string:
      return Value(n.as_string()->get());
    case toml::node_type::array: {
      const toml::array& arr = *n.as_array();
      if (arr.empty() || arr.is_homogeneous(toml::node_type::integer)) {
        std::vector<int64_t> v;
        for (const toml::node& e : arr) v.push_back(e.as_integer()->get());
        return Value(std::move(v));
      }
      if (arr.is_homogeneous(toml::node_type::string)) {
        std::vector<std::string> v;
        for (const toml::node& e : arr) v.push_back(e.as_string()->get());
        return Value(std::move(v));
      }
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace ftb
