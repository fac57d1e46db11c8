// libFuzzer target: safetensors headers (common/safetensors_header.h) as untrusted input.
//
// Input: the bytes of a whole .safetensors file (8-byte length, JSON header, data).
// Contract checked: parseSafetensorsHeader either returns or throws ConfigError (anything
// else escapes and libFuzzer reports it; signed overflow in the shape and offset arithmetic
// is caught by UBSan); a header it accepts describes byte ranges that lie inside the input,
// match their dtype and shape, and do not overlap; a refusal's message stays under 2 KB
// whatever the input quotes (common/json_input.h: bounded nesting, values cut short).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ftb;
  try {
    const StHeader h = parseSafetensorsHeader(data, int64_t(size), "fuzz", "fuzz.safetensors");
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const auto& [name, t] : h.tensors) {
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;  // checked by the parser: no overflow here
      if (t.begin < 0 || t.end < t.begin || h.data_start + t.end > int64_t(size)) std::abort();
      if (t.end - t.begin != numel * stElementSize(t.dtype)) std::abort();
      if (t.end > t.begin) ranges.emplace_back(t.begin, t.end);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second) std::abort();  // overlap accepted
  } catch (const ConfigError& e) {
    if (std::strlen(e.what()) > 2048) std::abort();  // a quoted value echoed whole
  }
  return 0;
}
