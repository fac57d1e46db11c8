#include "trainer/data/pcre2_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

namespace ftb {
namespace {

// One thread's match data (one pair: the whole match) and JIT stack, shared by every
// pattern: a match needs them only while it runs.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, 8 << 20, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  if (s.data == nullptr || s.stack == nullptr || s.context == nullptr)
    throw std::runtime_error("PCRE2: out of memory for match data");
  return s;
}

std::string pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string onigToPcre2(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];
    if (next == 's')
      out += "\\p{White_Space}";
    else if (next == 'S')
      out += "\\P{White_Space}";
    else
      (out += '\\') += next;  // any other escape, "\\\\" included, stays as it is
  }
  return out;
}

Pcre2Regex::Pcre2Regex(const std::string& pattern, bool literal) : pattern_(pattern) {
  const std::string source = literal ? pattern : onigToPcre2(pattern);
  int err = 0;
  PCRE2_SIZE at = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                   options, &err, &at, nullptr);
  if (code == nullptr)
    throw std::invalid_argument("regex \"" + pattern + "\" does not compile: " + pcre2Message(err) +
                                " at offset " + std::to_string(at));
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT (unsupported CPU) it interprets
  code_ = code;
}

Pcre2Regex::~Pcre2Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

size_t Pcre2Regex::find(std::string_view s, size_t from, size_t* end) const {
  MatchScratch& m = scratch();
  const int rc =
      pcre2_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(),
                  from, PCRE2_NO_UTF_CHECK, m.data, m.context);
  if (rc == PCRE2_ERROR_NOMATCH) return std::string_view::npos;
  if (rc < 0)
    throw std::runtime_error("regex \"" + pattern_ + "\" failed on a text of " +
                             std::to_string(s.size()) + " bytes: " + pcre2Message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.data);
  *end = ov[1];
  return ov[0];
}

void Pcre2Regex::forEachMatch(std::string_view s,
                              const std::function<void(size_t, size_t)>& f) const {
  size_t last_end = 0, last_match_end = 0;
  bool matched = false;
  while (last_end <= s.size()) {
    size_t end = 0;
    const size_t start = find(s, last_end, &end);
    if (start == std::string_view::npos) return;
    if (start == end && matched && last_match_end == end) {
      // Oniguruma's find_iter: no empty match right after the previous one; step one char.
      last_end += last_end < s.size() ? utf8Len(static_cast<unsigned char>(s[last_end])) : 1;
      continue;
    }
    last_end = last_match_end = end;
    matched = true;
    f(start, end);
  }
}

bool Pcre2Regex::fullMatch(std::string_view s) const {
  size_t end = 0;
  return find(s, 0, &end) == 0 && end == s.size();
}

bool validUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    char32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07, min = 0x10000;
    else
      return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

char32_t utf8At(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  switch (utf8Len(p[0])) {
    case 1:
      return p[0];
    case 2:
      return char32_t(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    case 3:
      return char32_t(p[0] & 0x0F) << 12 | char32_t(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    default:
      return char32_t(p[0] & 0x07) << 18 | char32_t(p[1] & 0x3F) << 12 |
             char32_t(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
  }
}

void appendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace ftb
