// This process's memory as Linux reports it under /proc/self. The readers allocate nothing
// (a stack buffer and read(2)), so they serve where an allocation may fail: the address-space
// checks before a start-up GEMM. Each returns 0 when its file cannot be read.
#pragma once

#include <cstdint>

namespace ftb {

int64_t peakRssBytes();     // VmHWM: the largest resident set so far
int64_t currentRssBytes();  // VmRSS: the resident set now
int64_t mappedBytes();      // VmSize: every mapped byte (/proc/self/statm's first field)

}  // namespace ftb
