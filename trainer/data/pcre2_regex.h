// Regular expressions of tokenizer.json files (HF `tokenizers` compiles them with Oniguruma),
// run by PCRE2 in UTF mode with Unicode properties (PCRE2_UTF | PCRE2_UCP), JIT-compiled.
//
// Contracts:
// - Oniguruma's `\s` is the Unicode White_Space property; PCRE2's also matches U+180E. A
//   pattern's `\s` and `\S` (inside and outside classes) are therefore rewritten to
//   `\p{White_Space}` and `\P{White_Space}`. Other escapes keep PCRE2's meaning, which equals
//   Oniguruma's for what the causal-LM pre-tokenizers use (\p{L}, \p{N}, (?i:...), (?!...));
//   `\w`, `\d` and `\h` are not rewritten (\h is a hex digit in Oniguruma).
// - forEachMatch() visits the non-overlapping matches left to right, as Oniguruma's find_iter:
//   an empty match right where the previous match ended is skipped by one character.
// - Subjects must be valid UTF-8 (callers check once with validUtf8(); matching does not
//   check again, which keeps a scan linear).
// - A Pcre2Regex may be used from several threads at once (each thread has its own match
//   data and JIT stack).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ftb {

class Pcre2Regex {
 public:
  // Throws std::invalid_argument with PCRE2's message and offset when `pattern` does not
  // compile. `literal`: match `pattern` as a plain string.
  Pcre2Regex(const std::string& pattern, bool literal);
  ~Pcre2Regex();
  Pcre2Regex(const Pcre2Regex&) = delete;
  Pcre2Regex& operator=(const Pcre2Regex&) = delete;

  // Calls f(start, end) (byte offsets into s) for each match. Throws std::runtime_error if
  // PCRE2 fails on the subject (e.g. its JIT stack limit).
  void forEachMatch(std::string_view s, const std::function<void(size_t, size_t)>& f) const;
  // True when the whole of s matches.
  bool fullMatch(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

 private:
  // Start of the first match at or after `from`, its end in *end; npos when none.
  size_t find(std::string_view s, size_t from, size_t* end) const;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Oniguruma's \s and \S spelt as PCRE2's White_Space property (see the contract above).
std::string onigToPcre2(const std::string& pattern);

// True when s is well-formed UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
bool validUtf8(std::string_view s);

// Bytes of the UTF-8 character whose lead byte is `lead` (1 for a stray continuation byte).
inline size_t utf8Len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? (lead < 0xC0 ? 1 : 2) : lead < 0xF0 ? 3 : 4;
}

// The code point at s[i]. REQUIRES: s valid UTF-8, i < s.size() at a character start.
char32_t utf8At(std::string_view s, size_t i);
// Appends the UTF-8 form of cp to out.
void appendUtf8(char32_t cp, std::string& out);

}  // namespace ftb
