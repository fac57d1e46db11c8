#include "trainer/data/tokenizer_json_parts.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace ftb {

[[noreturn]] void tokenizerJsonError(const std::string& where, const std::string& what) {
  throw std::invalid_argument(where + ": " + what);
}

namespace {

using nlohmann::json;

std::string typeOf(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    tokenizerJsonError(where, "expected an object with a string \"type\"");
  return j["type"].get<std::string>();
}

// j[key] as T, `fallback` when absent or null.
template <typename T>
T get(const json& j, const char* key, T fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    tokenizerJsonError(where + "." + key, std::string("unexpected ") + it->type_name() + " value");
  }
}

// A {"String": s} or {"Regex": r} pattern as a compiled regex.
std::shared_ptr<const Pcre2Regex> pattern(const json& j, const std::string& where) {
  const bool literal = j.is_object() && j.contains("String") && j["String"].is_string();
  if (!literal && !(j.is_object() && j.contains("Regex") && j["Regex"].is_string()))
    tokenizerJsonError(where, "expected {\"String\": \"...\"} or {\"Regex\": \"...\"}");
  const std::string p = j[literal ? "String" : "Regex"].get<std::string>();
  if (literal && p.empty()) return nullptr;  // an empty string matches nothing (HF)
  try {
    return std::make_shared<const Pcre2Regex>(p, literal);
  } catch (const std::invalid_argument& e) {
    tokenizerJsonError(where, e.what());
  }
}

// Rust's char::is_whitespace (the Unicode White_Space property).
bool isWhiteSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Start of the character that ends at s[i - 1]. REQUIRES: 0 < i <= s.size().
size_t charBefore(std::string_view s, size_t i) {
  do --i;
  while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80);
  return i;
}

// Bytes of leading (front) or trailing whitespace of s.
size_t whitespaceRun(std::string_view s, bool front) {
  if (front) {
    size_t i = 0;
    while (i < s.size() && isWhiteSpace(utf8At(s, i))) i += utf8Len(uint8_t(s[i]));
    return i;
  }
  size_t end = s.size();
  while (end > 0 && isWhiteSpace(utf8At(s, charBefore(s, end)))) end = charBefore(s, end);
  return s.size() - end;
}

// Whether the character at s[i] is a word character as the Rust regex crate's Unicode \w
// (HF's single_word check is `\w$` / `^\w`): Alphabetic, a mark, a decimal digit, a
// connector punctuation or Join_Control.
bool wordCharAt(std::string_view s, size_t i) {
  static const Pcre2Regex re("^[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]", false);
  size_t n = utf8Len(uint8_t(s[i]));
  return re.fullMatch(s.substr(i, n));
}

}  // namespace

// ---- normalizers --------------------------------------------------------------------

struct TextNormalizer::Step {
  enum Kind { kUnicode, kPrepend, kReplace, kStrip } kind = kUnicode;
  int utf8proc_options = 0;  // kUnicode
  std::string text;          // kPrepend: the prefix; kReplace: the replacement
  std::shared_ptr<const Pcre2Regex> re;
  bool left = false, right = false;  // kStrip
};

namespace {

void parseNormalizer(const json& j, const std::string& where,
                     std::vector<std::shared_ptr<const TextNormalizer::Step>>& steps) {
  using Step = TextNormalizer::Step;
  if (j.is_null()) return;
  const std::string type = typeOf(j, where);
  auto step = std::make_shared<Step>();
  const int stable = UTF8PROC_STABLE;
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      tokenizerJsonError(where, "a Sequence needs a \"normalizers\" array");
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      parseNormalizer(j["normalizers"][i], where + ".normalizers[" + std::to_string(i) + "]",
                      steps);
    return;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step->utf8proc_options =
        stable | (type[type.size() - 1] == 'C' ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
        (type.size() == 4 ? UTF8PROC_COMPAT : 0);
  } else if (type == "Prepend") {
    step->kind = Step::kPrepend;
    step->text = get<std::string>(j, "prepend", "", where);
  } else if (type == "Replace") {
    step->kind = Step::kReplace;
    step->re = pattern(j.value("pattern", json()), where + ".pattern");
    step->text = get<std::string>(j, "content", "", where);
  } else if (type == "Strip") {
    step->kind = Step::kStrip;
    step->left = get<bool>(j, "strip_left", false, where);
    step->right = get<bool>(j, "strip_right", false, where);
  } else {
    tokenizerJsonError(where, "normalizer \"" + type +
                   "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, "
                   "Strip, Sequence)");
  }
  steps.push_back(step);
}

void unicodeNormalize(std::string& s, int options) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return uint8_t(c) < 0x80; })) return;
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                   &out, utf8proc_option_t(options));
  if (n < 0) throw std::runtime_error(std::string("utf8proc: ") + utf8proc_errmsg(n));
  s.assign(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
}

}  // namespace

TextNormalizer TextNormalizer::parse(const json& j, const std::string& where) {
  TextNormalizer n;
  parseNormalizer(j, where, n.steps_);
  return n;
}

void TextNormalizer::apply(std::string& s) const {
  for (const auto& st : steps_) {
    switch (st->kind) {
      case Step::kUnicode:
        unicodeNormalize(s, st->utf8proc_options);
        break;
      case Step::kPrepend:
        if (!s.empty()) s.insert(0, st->text);
        break;
      case Step::kReplace: {
        if (!st->re) break;
        std::string out;
        size_t prev = 0;
        st->re->forEachMatch(s, [&](size_t b, size_t e) {
          out.append(s, prev, b - prev).append(st->text);
          prev = e;
        });
        s = out.append(s, prev, std::string::npos);
        break;
      }
      case Step::kStrip: {
        const size_t lead = st->left ? whitespaceRun(s, true) : 0;
        const size_t trail = st->right && lead < s.size() ? whitespaceRun(s, false) : 0;
        s = s.substr(lead, s.size() - lead - trail);
        break;
      }
    }
  }
}

// ---- pre-tokenizers -----------------------------------------------------------------

struct PreTokenizer::Step {
  enum Kind { kSplit, kByteLevel, kMetaspace } kind = kSplit;
  enum Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  std::shared_ptr<const Pcre2Regex> re;  // kSplit; kByteLevel with use_regex
  Behavior behavior = kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement;        // kMetaspace
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;  // kMetaspace
};

namespace {

using PreStep = PreTokenizer::Step;

// GPT-2's pre-tokenizer regex (ByteLevel with use_regex).
const char* const kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

PreStep::Behavior behaviorOf(const json& j, const std::string& where) {
  const std::string b = get<std::string>(j, "behavior", "", where);
  static const std::pair<const char*, PreStep::Behavior> kNames[] = {
      {"Removed", PreStep::kRemoved},
      {"Isolated", PreStep::kIsolated},
      {"MergedWithPrevious", PreStep::kMergedWithPrevious},
      {"MergedWithNext", PreStep::kMergedWithNext},
      {"Contiguous", PreStep::kContiguous}};
  for (const auto& [name, v] : kNames)
    if (b == name) return v;
  tokenizerJsonError(where + ".behavior",
      "expected Removed, Isolated, MergedWithPrevious, MergedWithNext or "
      "Contiguous, got \"" +
          b + "\"");
}

std::shared_ptr<PreStep> metaspaceStep(const json& j, const std::string& where) {
  auto st = std::make_shared<PreStep>();
  st->kind = PreStep::kMetaspace;
  st->replacement = get<std::string>(j, "replacement", "\xE2\x96\x81", where);
  if (st->replacement.empty() || utf8Len(uint8_t(st->replacement[0])) != st->replacement.size())
    tokenizerJsonError(where + ".replacement", "expected one character");
  st->split = get<bool>(j, "split", true, where);
  const std::string scheme =
      get<std::string>(j, "prepend_scheme",
                       get<bool>(j, "add_prefix_space", true, where) ? "always" : "never", where);
  if (scheme == "always")
    st->prepend = PreStep::kAlways;
  else if (scheme == "first")
    st->prepend = PreStep::kFirst;
  else if (scheme == "never")
    st->prepend = PreStep::kNever;
  else
    tokenizerJsonError(where + ".prepend_scheme", "expected always, first or never, got \"" + scheme + "\"");
  st->re = std::make_shared<const Pcre2Regex>(st->replacement, true);
  st->behavior = PreStep::kMergedWithNext;
  return st;
}

void parsePreTokenizer(const json& j, const std::string& where,
                       std::vector<std::shared_ptr<const PreStep>>& steps) {
  if (j.is_null()) return;
  const std::string type = typeOf(j, where);
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      tokenizerJsonError(where, "a Sequence needs a \"pretokenizers\" array");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      parsePreTokenizer(j["pretokenizers"][i], where + ".pretokenizers[" + std::to_string(i) + "]",
                        steps);
    return;
  }
  auto st = std::make_shared<PreStep>();
  if (type == "Split") {
    st->re = pattern(j.value("pattern", json()), where + ".pattern");
    st->behavior = behaviorOf(j, where);
    st->invert = get<bool>(j, "invert", false, where);
  } else if (type == "ByteLevel") {
    st->kind = PreStep::kByteLevel;
    st->add_prefix_space = get<bool>(j, "add_prefix_space", true, where);
    if (get<bool>(j, "use_regex", true, where))
      st->re = std::make_shared<const Pcre2Regex>(kGpt2Regex, false);
  } else if (type == "Digits") {
    const bool single = get<bool>(j, "individual_digits", false, where);
    st->re = std::make_shared<const Pcre2Regex>(single ? "\\p{N}" : "\\p{N}+", false);
  } else if (type == "Metaspace") {
    st = metaspaceStep(j, where);
  } else {
    tokenizerJsonError(where, "pre-tokenizer \"" + type +
                   "\" is not supported (supported: Split, ByteLevel, Digits, Metaspace, "
                   "Sequence)");
  }
  steps.push_back(st);
}

// HF's NormalizedString::split: the pieces of `p` around the matches of `re`, by behavior.
void splitPiece(const PreStep& st, const TextPiece& p, std::vector<TextPiece>& out) {
  const std::string& s = p.text;
  struct Part {
    size_t b, e;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  if (st.re)
    st.re->forEachMatch(s, [&](size_t b, size_t e) {
      if (prev != b) parts.push_back({prev, b, false});
      parts.push_back({b, e, true});
      prev = e;
    });
  if (prev != s.size()) parts.push_back({prev, s.size(), false});
  if (st.invert)
    for (Part& x : parts) x.match = !x.match;
  std::vector<Part> keep;  // match = "remove" from here on
  bool previous = false;
  if (st.behavior == PreStep::kMergedWithNext) {
    for (size_t k = parts.size(); k-- > 0;) {
      if (parts[k].match && !previous && !keep.empty())
        keep.back().b = parts[k].b;
      else
        keep.push_back({parts[k].b, parts[k].e, false});
      previous = parts[k].match;
    }
    std::reverse(keep.begin(), keep.end());
  } else {
    for (const Part& x : parts) {
      const bool merge = st.behavior == PreStep::kMergedWithPrevious
                             ? x.match && !previous
                             : st.behavior == PreStep::kContiguous && x.match == previous;
      if (merge && !keep.empty())
        keep.back().e = x.e;
      else
        keep.push_back({x.b, x.e, st.behavior == PreStep::kRemoved && x.match});
      previous = x.match;
    }
  }
  for (const Part& x : keep)
    if (!x.match && x.e > x.b) out.push_back({s.substr(x.b, x.e - x.b), p.at_start && x.b == 0});
}

std::string byteLevelMapped(const std::string& s) {
  static const auto table = [] {
    std::vector<std::string> t(256);
    for (int b = 0; b < 256; ++b) appendUtf8(byteLevelChar(uint8_t(b)), t[size_t(b)]);
    return t;
  }();
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) out += table[c];
  return out;
}

void metaspace(const PreStep& st, TextPiece p, std::vector<TextPiece>& out) {
  std::string s;
  s.reserve(p.text.size() + 3);
  for (char c : p.text) {
    if (c == ' ')
      s += st.replacement;
    else
      s += c;
  }
  const bool starts = s.compare(0, st.replacement.size(), st.replacement) == 0;
  if (!starts && (st.prepend == PreStep::kAlways || (st.prepend == PreStep::kFirst && p.at_start)))
    s.insert(0, st.replacement);
  p.text = std::move(s);
  if (st.split)
    splitPiece(st, p, out);
  else
    out.push_back(std::move(p));
}

void applyStep(const PreStep& st, TextPiece p, std::vector<TextPiece>& out) {
  switch (st.kind) {
    case PreStep::kSplit:
      splitPiece(st, p, out);
      return;
    case PreStep::kMetaspace:
      metaspace(st, std::move(p), out);
      return;
    case PreStep::kByteLevel: {
      if (st.add_prefix_space && p.text[0] != ' ') p.text.insert(0, " ");
      const size_t first = out.size();
      if (st.re)
        splitPiece(st, p, out);
      else
        out.push_back(std::move(p));
      for (size_t i = first; i < out.size(); ++i) out[i].text = byteLevelMapped(out[i].text);
      return;
    }
  }
}

}  // namespace

PreTokenizer PreTokenizer::parse(const json& j, const std::string& where) {
  PreTokenizer p;
  parsePreTokenizer(j, where, p.steps_);
  return p;
}

bool PreTokenizer::byteLevelCover() const {
  bool byte_level = false;
  for (const auto& st : steps_) {
    if (st->kind == PreStep::kMetaspace || st->add_prefix_space) return false;
    if (st->kind == PreStep::kSplit && st->behavior == PreStep::kRemoved) return false;
    byte_level = byte_level || st->kind == PreStep::kByteLevel;
  }
  return byte_level;
}

void PreTokenizer::apply(TextPiece piece, std::vector<TextPiece>& out) const {
  if (piece.text.empty()) return;
  if (steps_.empty()) {
    out.push_back(std::move(piece));
    return;
  }
  std::vector<TextPiece> cur{std::move(piece)}, next;
  for (size_t k = 0; k < steps_.size(); ++k) {
    std::vector<TextPiece>& dst = k + 1 == steps_.size() ? out : next;
    for (TextPiece& p : cur)
      if (!p.text.empty()) applyStep(*steps_[k], std::move(p), dst);
    if (&dst == &next) {
      cur.swap(next);
      next.clear();
    }
  }
}

// ---- added tokens -------------------------------------------------------------------

void AddedTokenSet::add(Token t) {
  if (t.content.empty()) return;
  tokens_.push_back(std::move(t));
  auto& bucket = by_first_byte_[uint8_t(tokens_.back().content[0])];
  bucket.push_back(int32_t(tokens_.size() - 1));
  // Longest first, so the first hit at a position is the longest token there.
  std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
    return tokens_[size_t(a)].content.size() > tokens_[size_t(b)].content.size();
  });
}

int32_t AddedTokenSet::longestAt(std::string_view text, size_t at) const {
  for (int32_t k : by_first_byte_[uint8_t(text[at])]) {
    const std::string& c = tokens_[size_t(k)].content;
    if (text.size() - at >= c.size() && text.compare(at, c.size(), c) == 0) return k;
  }
  return -1;
}

void AddedTokenSet::split(std::string_view text,
                          const std::function<void(std::string_view, int32_t, size_t)>& f) const {
  if (tokens_.empty()) {
    if (!text.empty()) f(text, -1, 0);
    return;
  }
  size_t done = 0;  // HF's start_offset: the end of the last piece given out
  for (size_t at = 0; at < text.size();) {
    const int32_t k = longestAt(text, at);
    if (k < 0) {
      ++at;
      continue;
    }
    const Token& t = tokens_[size_t(k)];
    size_t start = at, stop = at + t.content.size();
    at = stop;  // the next match starts after this one, whether it is kept or not
    if (t.single_word && ((start > 0 && wordCharAt(text, charBefore(text, start))) ||
                          (stop < text.size() && wordCharAt(text, stop))))
      continue;  // inside a word
    if (t.lstrip) start = std::max(start - whitespaceRun(text.substr(0, start), false), done);
    if (t.rstrip) stop += whitespaceRun(text.substr(stop), true);
    if (done < start) f(text.substr(done, start - done), -1, done);
    f(text.substr(start, stop - start), t.id, start);
    done = stop;
  }
  if (done < text.size()) f(text.substr(done), -1, done);
}

char32_t byteLevelChar(uint8_t b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
  // The other 68 bytes take 256, 257, ... in byte order.
  int n = 0;
  for (int x = 0; x < b; ++x)
    if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++n;
  return char32_t(256 + n);
}

}  // namespace ftb
