// SHA-256 (FIPS 180-4), in-tree so that sweep tags are identical on every machine
// and compiler. Not constant-time; not for secrets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ftb {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // REQUIRES: called once; the object must not be updated afterwards.
  std::array<uint8_t, 32> finish();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_;
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
};

// Lower-case hex of the whole digest (64 chars).
std::string sha256Hex(std::string_view data);
// Lower-case hex of the first `bytes` digest bytes (2*bytes chars). REQUIRES: bytes <= 32.
std::string sha256HexPrefix(std::string_view data, size_t bytes);

}  // namespace ftb
