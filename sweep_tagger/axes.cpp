#include "sweep_tagger/axes.h"

#include <algorithm>
#include <map>
#include <set>

namespace ftb {
namespace {

Axis configAxis(const std::string& name, const std::string& key) {
  return {name, [key](const RunRow& r) {
            auto it = r.config.find(key);
            return it == r.config.end() ? Cell() : it->second;
          }};
}

// With layout variants (sweep.layout), the layout is one axis and the keys a variant sets
// (an axis whose value is the same in every run of each variant) are no axes of their own.
std::vector<Axis> withLayout(std::vector<Axis> varying, const std::vector<const RunRow*>& runs) {
  const Axis layout = configAxis("layout", "sweep.layout");
  std::set<std::string> variants;
  for (const RunRow* r : runs) variants.insert(axisText(layout.get(*r)));
  if (variants.size() < 2) return varying;
  std::vector<Axis> kept = {layout};
  for (const Axis& a : varying) {
    std::map<std::string, std::set<std::string>> per_variant;
    for (const RunRow* r : runs) per_variant[axisText(layout.get(*r))].insert(axisText(a.get(*r)));
    const bool implied = std::all_of(per_variant.begin(), per_variant.end(),
                                     [](const auto& v) { return v.second.size() == 1; });
    if (!implied) kept.push_back(a);
  }
  return kept;
}

}  // namespace

std::string axisText(const Cell& c) {
  std::string t = cellText(c);
  return t.empty() ? "-" : t;
}

std::vector<Axis> varyingAxes(const AggregateTable& t, const std::vector<const RunRow*>& runs) {
  std::vector<Axis> axes;
  for (const std::string& k : t.varying) axes.push_back(configAxis(k, k));
  axes.push_back(
      {"world_size", [](const RunRow& r) { return r.world_size ? Cell(*r.world_size) : Cell(); }});
  axes.push_back({"nodes", [](const RunRow& r) { return r.nodes ? Cell(*r.nodes) : Cell(); }});
  std::vector<Axis> varying;
  for (const Axis& a : axes) {
    std::set<std::string> values;
    for (const RunRow* r : runs) values.insert(axisText(a.get(*r)));
    if (values.size() > 1) varying.push_back(a);
  }
  return withLayout(std::move(varying), runs);
}

std::string axesName(const std::vector<Axis>& axes, const RunRow& r, const std::string& skip,
                     const std::string& sep) {
  std::string s;
  for (const Axis& a : axes)
    if (a.name != skip) s += (s.empty() ? "" : sep) + a.name + "=" + axisText(a.get(r));
  return s;
}

}  // namespace ftb
