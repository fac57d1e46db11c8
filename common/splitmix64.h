// SplitMix64 (Steele, Lea and Flood, 2014): a 64-bit mixing function with full avalanche.
// The synthetic dataset seeds a sample's generator with it and the stochastic rounding of
// bf16 weights draws its bits from it: both rely on these exact constants (changing them
// changes every synthetic sample and every rounded bit).
#pragma once

#include <cstdint>

namespace ftb {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace ftb
