// The sweep axes that tell runs apart, shared by the charts (plot.h) and the names of the
// configurations a ranking lists (compare.h).
//
// Contract:
// - varyingAxes(t, runs): in this order, the table's varying config keys (t.varying),
//   world_size and nodes, kept when they take more than one value across `runs` (a missing
//   value counts as the value "-"). With sweep.layout variants (two or more values across
//   `runs`), `layout` comes first and an axis whose value is the same in every run of each
//   variant (a key the variant sets: parallel.tp, ...) is dropped: the layout names it.
// - axesName(): "name=value" of every axis but `skip`, joined by `sep`; "" when none.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sweep_tagger/aggregate.h"

namespace ftb {

struct Axis {
  std::string name;  // a config key, "world_size", "nodes" or "layout"
  std::function<Cell(const RunRow&)> get;
};

// A cell as an axis value or legend label: "-" when missing.
std::string axisText(const Cell& c);

std::vector<Axis> varyingAxes(const AggregateTable& t, const std::vector<const RunRow*>& runs);

std::string axesName(const std::vector<Axis>& axes, const RunRow& r, const std::string& skip,
                     const std::string& sep);

}  // namespace ftb
