// The median of a list of figures: one definition for the link probe (common/link_bandwidth.h),
// the rankings (sweep_tagger/compare.h) and tune's model error (sweep_tagger/tune.h).
#pragma once

#include <algorithm>
#include <limits>
#include <vector>

namespace ftb {

// The median of `v` (the mean of the middle two for an even count); NaN when empty.
inline double medianOf(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace ftb
