// Untrusted JSON (common/json_input.h) and the safetensors header reader built on it
// (common/safetensors_header.h): nesting bounded before parsing, quoted values cut short.
// A safetensors header nested 100,000 levels deep crashed the trainer (stack overflow while
// printing the error); 60,000 levels gave a 120 KB message; a 20 MB string was echoed whole.
#include "common/json_input.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/checkpoint_manifest.h"
#include "common/error.h"
#include "common/safetensors_header.h"

namespace ftb {
namespace {

using nlohmann::json;

std::string nested(int levels, const std::string& inner = "1") {
  return std::string(size_t(levels), '[') + inner + std::string(size_t(levels), ']');
}

// The message of the ConfigError f() throws ("" and a test failure if it throws none).
template <class F>
std::string errorOf(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

std::vector<uint8_t> safetensors(const std::string& header) {
  std::vector<uint8_t> f(8 + header.size());
  const uint64_t n = header.size();
  std::memcpy(f.data(), &n, 8);
  std::memcpy(f.data() + 8, header.data(), header.size());
  return f;
}

std::string headerErrorOf(const std::string& header) {
  const std::vector<uint8_t> f = safetensors(header);
  return errorOf([&] { parseSafetensorsHeader(f.data(), int64_t(f.size()), "k", "x.st"); });
}

TEST(JsonInput, DepthCountsBracketsOutsideStringsOnly) {
  EXPECT_EQ(jsonTooDeepAt(nested(3), 3), std::string::npos);
  EXPECT_EQ(jsonTooDeepAt(nested(4), 3), 3u);  // the fourth '[' opens level 4
  EXPECT_EQ(jsonTooDeepAt(R"({"a": "[[[[{{{{", "b": [1]})", 2), std::string::npos);
  EXPECT_EQ(jsonTooDeepAt(R"({"a\"[[[": [[1]]})", 2), 12u);    // an escaped quote stays inside
  EXPECT_EQ(jsonTooDeepAt(R"(["\\", [[1]]])", 2), 8u);         // an escaped backslash ends
  EXPECT_EQ(jsonTooDeepAt("[][][][]", 1), std::string::npos);  // siblings, not levels
}

TEST(JsonInput, NestingAtTheLimitParsesOneLevelMoreIsRefused) {
  EXPECT_EQ(parseJsonInput(nested(kMaxJsonDepth), "k", "f.json").dump().size(),
            size_t(2 * kMaxJsonDepth + 1));
  const std::string e = errorOf([] { parseJsonInput(nested(kMaxJsonDepth + 1), "k", "f.json"); });
  EXPECT_NE(e.find("f.json: key 'k': JSON nested deeper than 64 levels (byte 64 opens level 65)"),
            std::string::npos)
      << e;
}

TEST(JsonInput, HundredThousandLevelsAreRefusedWithAShortMessage) {
  for (int levels : {60000, 100000}) {
    const std::string e = errorOf([&] { parseJsonInput(nested(levels), "k", "f.json"); });
    EXPECT_NE(e.find("nested deeper than 64 levels"), std::string::npos) << e;
    EXPECT_LT(e.size(), 400u) << e.substr(0, 400);
  }
}

TEST(JsonInput, ParseErrorCutsTheLastReadToken) {
  const std::string big(20'000'000, 'a');
  const std::string e = errorOf([&] { parseJsonInput("{\"a\": \"" + big + "\n\"}", "k", "f"); });
  EXPECT_LT(e.size(), 600u) << e.substr(0, 600);
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
  // The token is the string read so far, its quote first.
  EXPECT_NE(e.find("last read: '\"" + std::string(63, 'a') + "... (200000"), std::string::npos)
      << e;
}

TEST(JsonInput, ShortTextKeepsShortTextsAndCutsLongOnesAtACharacter) {
  EXPECT_EQ(shortText("F32"), "F32");
  EXPECT_EQ(shortText(std::string(kShortTextBytes, 'x')), std::string(kShortTextBytes, 'x'));
  const std::string cut = shortText(std::string(200, 'x'));
  EXPECT_EQ(cut, std::string(kShortPrefixBytes, 'x') + "... (200 bytes)");
  // 63 ASCII bytes then 2-byte characters: the prefix stops before the split one.
  std::string utf8 = std::string(63, 'x');
  for (int i = 0; i < 60; ++i) utf8 += "\xc3\xa9";  // é
  EXPECT_EQ(shortText(utf8), std::string(63, 'x') + "... (183 bytes)");
}

TEST(JsonInput, ShortJsonIsShortForAnyValue) {
  json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = json::array({deep});  // deeper than any parse returns
  EXPECT_LT(shortJson(deep).size(), 600u);
  EXPECT_NE(shortJson(deep).find("..."), std::string::npos);
  json wide = json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  EXPECT_LT(shortJson(wide).size(), 300u);
  json big = {{"dtype", std::string(20'000'000, 'F')}};
  EXPECT_EQ(shortJson(big), "{\"dtype\":\"" + std::string(64, 'F') + "... (20000000 bytes)\"}");
  const json small = json::parse(R"({"a": [1, 2.5, true, null, "s", {"b": []}]})");
  EXPECT_EQ(shortJson(small), small.dump());  // what nlohmann prints, when short
}

TEST(SafetensorsHeader, DeepNestingIsRefusedBeforeParsing) {
  for (int levels : {60000, 100000}) {
    const std::string e = headerErrorOf("{\"t\": " + nested(levels) + "}");
    EXPECT_NE(e.find("x.st: key 'k': JSON nested deeper than 64 levels"), std::string::npos)
        << e.substr(0, 300);
    EXPECT_LT(e.size(), 400u);
  }
}

TEST(SafetensorsHeader, NestingAtTheLimitIsReportedShort) {
  const std::string e = headerErrorOf("{\"t\": " + nested(kMaxJsonDepth - 1) + "}");
  EXPECT_NE(e.find("tensor 't': expected {\"dtype\", \"shape\", \"data_offsets\"}, found [[["),
            std::string::npos)
      << e;
  EXPECT_LT(e.size(), 800u) << e;
}

TEST(SafetensorsHeader, HugeStringsAreQuotedByAPrefixAndTheirLength) {
  const std::string big(20'000'000, 'B');
  std::string e =
      headerErrorOf(R"({"t": {"dtype": ")" + big + R"(", "shape": [1], "data_offsets": [0, 4]}})");
  EXPECT_NE(e.find("tensor 't': dtype " + std::string(64, 'B') +
                   "... (20000000 bytes), expected "
                   "F32, F16 or BF16"),
            std::string::npos)
      << e.substr(0, 400);
  EXPECT_LT(e.size(), 400u);
  e = headerErrorOf("{\"" + big + "\": {\"dtype\": \"F32\"}}");  // a huge tensor name
  EXPECT_NE(e.find("tensor '" + std::string(64, 'B') + "... (20000000 bytes)': expected"),
            std::string::npos)
      << e.substr(0, 400);
  EXPECT_LT(e.size(), 600u);
  e = headerErrorOf(R"({"t": {"dtype": "F32", "shape": [")" + big +
                    R"("], "data_offsets": [0, 4]}})");
  EXPECT_NE(e.find("... (20000000 bytes)"), std::string::npos) << e.substr(0, 400);
  EXPECT_LT(e.size(), 800u);
}

// A checkpoint manifest is read back from disk: its nested values were checked by recursion.
TEST(JsonInput, DeepManifestIsADamagedCheckpointNotACrash) {
  const std::string deep = "{\"format\": \"ftbench-checkpoint\", \"x\": " + nested(100000) + "}";
  try {
    parseManifest(deep, "step_1/manifest.json");
    ADD_FAILURE() << "accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("manifest nests deeper than 64 levels"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ftb
