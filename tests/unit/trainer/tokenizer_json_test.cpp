// The pieces of the tokenizer.json encoder on inputs small enough to work out by hand:
// Oniguruma's match iteration and \s, BPE merge order, byte fallback and <unk>, added-token
// matching, the ByteLevel alphabet. The whole encoder is checked against HF tokenizers in
// tests/e2e/trainer/test_tokenizer_json.py.
#include <gtest/gtest.h>

#include <stdexcept>
#include <utility>
#include <vector>

#include "trainer/data/bpe_model.h"
#include "trainer/data/pcre2_regex.h"
#include "trainer/data/tokenizer_json_parts.h"
#include "trainer/data/unigram_model.h"

namespace ftb {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

Spans matches(const Pcre2Regex& re, std::string_view s) {
  Spans out;
  re.forEachMatch(s, [&](size_t b, size_t e) { out.emplace_back(b, e); });
  return out;
}

TEST(Pcre2Regex, SkipsAnEmptyMatchRightAfterThePreviousMatchAsOniguruma) {
  // Python's re would also give (3, 3); Oniguruma's find_iter does not.
  EXPECT_EQ(matches(Pcre2Regex("a*", false), "baab"), (Spans{{0, 0}, {1, 3}, {4, 4}}));
  EXPECT_EQ(matches(Pcre2Regex("\\p{N}{1,3}", false), "12345x6"), (Spans{{0, 3}, {3, 5}, {6, 7}}));
}

TEST(Pcre2Regex, BackslashSIsTheWhiteSpacePropertyAsInOniguruma) {
  EXPECT_EQ(onigToPcre2("\\s+(?!\\S)|[^\\s\\p{L}]|\\\\s"),
            "\\p{White_Space}+(?!\\P{White_Space})|[^\\p{White_Space}\\p{L}]|\\\\s");
  const Pcre2Regex space("\\s", false);
  EXPECT_TRUE(space.fullMatch("\u3000"));
  EXPECT_TRUE(space.fullMatch("\u0085"));
  EXPECT_FALSE(space.fullMatch("\u180e"));  // PCRE2's own \s matches it
  EXPECT_FALSE(space.fullMatch("\u200b"));
}

TEST(Pcre2Regex, LiteralPatternsAndCompileErrors) {
  EXPECT_EQ(matches(Pcre2Regex("a.b", true), "a.b axb"), (Spans{{0, 3}}));
  EXPECT_THROW(Pcre2Regex("(?<x", false), std::invalid_argument);
}

TEST(Utf8, ValidityAndCodePoints) {
  EXPECT_TRUE(validUtf8("a\u00e9\u65e5\U0001F600"));
  EXPECT_FALSE(validUtf8("\xc3"));          // truncated
  EXPECT_FALSE(validUtf8("\xc0\xaf"));      // overlong
  EXPECT_FALSE(validUtf8("\xed\xa0\x80"));  // a surrogate
  EXPECT_EQ(utf8At("x\u65e5", 1), char32_t(0x65e5));
  std::string s;
  appendUtf8(0x1F600, s);
  EXPECT_EQ(s, "\U0001F600");
}

std::vector<int32_t> bpe(const BpeModel& m, std::string_view word) {
  std::vector<int32_t> out;
  m.tokenize(word, out);
  return out;
}

TEST(BpeModel, LowestRankFirstThenLeftmost) {
  // a b c ab bc abc; "b c" outranks "a b", so "abc" goes a + bc -> abc, not ab + c.
  BpeModel m({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}},
             {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}}, {});
  EXPECT_EQ(bpe(m, "abc"), (std::vector<int32_t>{5}));
  EXPECT_EQ(bpe(m, "ab"), (std::vector<int32_t>{3}));
  EXPECT_EQ(bpe(m, "aaa"), (std::vector<int32_t>{6, 0}));  // leftmost pair merges first
  EXPECT_EQ(bpe(m, "abc"), (std::vector<int32_t>{5}));     // again, from the cache
  EXPECT_TRUE(bpe(m, "").empty());
}

TEST(BpeModel, IgnoreMergesTakesAWholeWordFromTheVocabulary) {
  BpeOptions o;
  o.ignore_merges = true;
  // No merge gives "xy", yet the vocabulary has it.
  BpeModel m({{"x", 0}, {"y", 1}, {"xy", 2}}, {}, o);
  EXPECT_EQ(bpe(m, "xy"), (std::vector<int32_t>{2}));
  EXPECT_EQ(bpe(m, "yx"), (std::vector<int32_t>{1, 0}));
}

TEST(BpeModel, ByteFallbackThenFusedUnkThenDropped) {
  BpeOptions o;
  o.byte_fallback = true;
  o.unk_token = "<unk>";
  o.fuse_unk = true;
  // é is C3 A9: both byte tokens exist. 日 is E6 97 A5: E6 does not, so it is <unk>.
  BpeModel m({{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}, {"<0x97>", 4}, {"<0xA5>", 5}},
             {}, o);
  EXPECT_EQ(bpe(m, "a\u00e9"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(bpe(m, "\u65e5\u65e5a\u65e5"), (std::vector<int32_t>{0, 1, 0}));
  o.fuse_unk = false;
  BpeModel unfused({{"<unk>", 0}, {"a", 1}}, {}, o);
  EXPECT_EQ(bpe(unfused, "\u65e5\u65e5a"), (std::vector<int32_t>{0, 0, 1}));
  BpeModel no_unk({{"a", 0}}, {}, {});
  EXPECT_EQ(bpe(no_unk, "\u65e5a"), (std::vector<int32_t>{0}));
}

TEST(BpeModel, AMergeOfAnUnknownTokenIsRefusedNamingIt) {
  try {
    BpeModel m({{"a", 0}}, {{"a", "zz"}}, {});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.merges[0]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"zz\""), std::string::npos) << e.what();
  }
}

std::vector<int32_t> unigram(const UnigramModel& m, std::string_view word) {
  std::vector<int32_t> out;
  m.tokenize(word, out);
  return out;
}

TEST(UnigramModel, BestScoringSegmentationAndFusedUnk) {
  // "ab" as one piece scores -1.5 against -2 for a + b; at -3 the two pieces win.
  UnigramModel one({{"<unk>", 0}, {"a", -1}, {"b", -1}, {"ab", -1.5}}, 0, false);
  EXPECT_EQ(unigram(one, "abab"), (std::vector<int32_t>{3, 3}));
  UnigramModel two({{"<unk>", 0}, {"a", -1}, {"b", -1}, {"ab", -3}}, 0, false);
  EXPECT_EQ(unigram(two, "ab"), (std::vector<int32_t>{1, 2}));
  // Unknown characters next to each other are one <unk>.
  EXPECT_EQ(unigram(two, "a\u65e5\u65e5b"), (std::vector<int32_t>{1, 0, 2}));
  // With byte_fallback the unknown stretch is its bytes, when they all exist.
  std::vector<std::pair<std::string, double>> v{{"<unk>", 0}, {"a", -1}};
  for (const char* b : {"<0xE6>", "<0x97>", "<0xA5>"}) v.emplace_back(b, -5);
  UnigramModel bytes(v, 0, true);
  EXPECT_EQ(unigram(bytes, "\u65e5a"), (std::vector<int32_t>{2, 3, 4, 1}));
  EXPECT_THROW(UnigramModel({{"a", -1}}, 3, false), std::invalid_argument);
}

TEST(AddedTokenSet, LeftmostLongestAndTheTextBetween) {
  AddedTokenSet s;
  s.add({"<a>", 7});
  s.add({"<a><b>", 8});
  std::vector<std::pair<std::string, int32_t>> got;
  s.split("x<a><b>y<a>", [&](std::string_view p, int32_t id, size_t) { got.emplace_back(p, id); });
  EXPECT_EQ(got, (std::vector<std::pair<std::string, int32_t>>{
                     {"x", -1}, {"<a><b>", 8}, {"y", -1}, {"<a>", 7}}));
}

TEST(AddedTokenSet, StripAndSingleWord) {
  AddedTokenSet s;
  AddedTokenSet::Token mask{"<m>", 1};
  mask.lstrip = mask.rstrip = true;
  s.add(mask);
  AddedTokenSet::Token word{"Zeb", 2};
  word.single_word = true;
  s.add(word);
  std::vector<std::pair<std::string, int32_t>> got;
  s.split("a  <m> b aZeb Zeb.",
          [&](std::string_view p, int32_t id, size_t) { got.emplace_back(p, id); });
  EXPECT_EQ(got, (std::vector<std::pair<std::string, int32_t>>{
                     {"a", -1}, {"  <m> ", 1}, {"b aZeb ", -1}, {"Zeb", 2}, {".", -1}}));
}

TEST(ByteLevel, TheGpt2Alphabet) {
  EXPECT_EQ(byteLevelChar('A'), char32_t('A'));
  EXPECT_EQ(byteLevelChar(' '), char32_t(0x120));   // Ġ
  EXPECT_EQ(byteLevelChar('\n'), char32_t(0x10A));  // Ċ
  EXPECT_EQ(byteLevelChar(0xAD), char32_t(0x143));  // the last of the 68 moved bytes
  EXPECT_EQ(byteLevelChar(0xFF), char32_t(0xFF));
}

}  // namespace
}  // namespace ftb
