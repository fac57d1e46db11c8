// The stages of a tokenizer.json before its model: the normalizer, the pre-tokenizer and the
// added tokens, each as HF `tokenizers` applies it (normalizers/, pre_tokenizers/,
// tokenizer/added_vocabulary.rs), for ids only (no offsets are kept).
//
// Supported (anything else is refused at load with the JSON path of the part):
// - normalizers: NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace (String or Regex pattern),
//   Strip, Sequence, null;
// - pre-tokenizers: Split (Regex or String pattern, every behavior, invert), ByteLevel
//   (add_prefix_space, use_regex with GPT-2's regex), Digits, Metaspace (prepend_scheme
//   always/first/never or the older add_prefix_space, split), Sequence, null.
//
// Contracts: every parse() throws std::invalid_argument naming the JSON path (`where`) and
// what was expected. apply() functions take valid UTF-8 and keep it valid.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/data/pcre2_regex.h"

namespace ftb {

// A piece of text on its way to the model; `at_start` when it begins at offset 0 of the
// text given to encode() (Metaspace's prepend_scheme "first" asks this).
struct TextPiece {
  std::string text;
  bool at_start = false;
};

class TextNormalizer {
 public:
  // REQUIRES: j is the "normalizer" value (an object or null).
  static TextNormalizer parse(const nlohmann::json& j, const std::string& where);
  void apply(std::string& s) const;
  bool empty() const { return steps_.empty(); }

  struct Step;

 private:
  std::vector<std::shared_ptr<const Step>> steps_;
};

class PreTokenizer {
 public:
  // REQUIRES: j is the "pre_tokenizer" value (an object or null).
  static PreTokenizer parse(const nlohmann::json& j, const std::string& where);
  // Appends the pre-tokens of `piece` to out (none is empty).
  void apply(TextPiece piece, std::vector<TextPiece>& out) const;
  // True when the pre-tokens of any text are the ByteLevel form of consecutive stretches
  // that cover it (one character per byte): a ByteLevel step without add_prefix_space, and
  // no Metaspace step or Split that removes text. Then a token of the model stands for as
  // many bytes of the text as its vocabulary string has characters.
  bool byteLevelCover() const;

  struct Step;

 private:
  std::vector<std::shared_ptr<const Step>> steps_;
};

// The added tokens of one kind (matched in the raw text, or in the normalized text).
class AddedTokenSet {
 public:
  struct Token {
    std::string content;
    int32_t id = -1;
    bool lstrip = false, rstrip = false, single_word = false;
  };
  void add(Token t);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into added tokens and the text between them, left to right: f(piece, id,
  // offset) with id -1 for text (never empty). Matches are leftmost-longest and do not
  // overlap (HF's Aho-Corasick); then single_word drops a match with a word character
  // (Unicode \w of Rust's regex crate: letters, marks, digits, connectors) right before or
  // after it, lstrip and rstrip widen a match over the whitespace beside it.
  void split(std::string_view text,
             const std::function<void(std::string_view, int32_t, size_t)>& f) const;

 private:
  // The longest token starting at text[at]: its index in tokens_, -1 if none.
  int32_t longestAt(std::string_view text, size_t at) const;
  std::vector<Token> tokens_;
  std::vector<std::vector<int32_t>> by_first_byte_ = std::vector<std::vector<int32_t>>(256);
};

// Throws std::invalid_argument("<where>: <what>"): a tokenizer.json that cannot be read
// (the caller adds the file's path).
[[noreturn]] void tokenizerJsonError(const std::string& where, const std::string& what);

// HF's ByteLevel alphabet: the character each byte becomes (bytes_to_unicode()).
char32_t byteLevelChar(uint8_t b);

}  // namespace ftb
