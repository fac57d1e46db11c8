// Overflow-checked integer arithmetic for sizes computed from user input.
//
// Contract: checkedProduct() returns the exact product of its factors, or nullopt
// when any partial product overflows int64 (never wraps, never UB). Used wherever a
// size (batch, tokens, parameters) is a product of config values.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace ftb {

inline std::optional<int64_t> checkedProduct(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p)) return std::nullopt;
  return p;
}

inline std::optional<int64_t> checkedSum(std::initializer_list<int64_t> terms) {
  int64_t s = 0;
  for (int64_t t : terms)
    if (__builtin_add_overflow(s, t, &s)) return std::nullopt;
  return s;
}

}  // namespace ftb
