// SHA-256 known-answer tests (FIPS 180-4 examples / NIST CAVP short messages).
#include "common/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace ftb {
namespace {

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
                      "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Padding boundaries: 55/56/63/64/65 bytes, fed whole or byte by byte.
TEST(Sha256, StreamingMatchesOneShot) {
  for (size_t n : {0, 1, 55, 56, 57, 63, 64, 65, 127, 128, 129, 1000}) {
    std::string msg(n, '\0');
    for (size_t i = 0; i < n; ++i) msg[i] = static_cast<char>(i * 131 + 7);
    Sha256 s;
    for (char c : msg) s.update(&c, 1);
    auto d = s.finish();
    std::string hex;
    for (uint8_t b : d) {
      char buf[3];
      snprintf(buf, sizeof buf, "%02x", b);
      hex += buf;
    }
    EXPECT_EQ(hex, sha256Hex(msg)) << n;
  }
  // Known value at the 56-byte boundary ("a" * 56), from Python hashlib.
  EXPECT_EQ(sha256Hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256HexPrefix("abc", 8), "ba7816bf8f01cfea");
}

}  // namespace
}  // namespace ftb
