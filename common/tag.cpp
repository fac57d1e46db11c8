#include "common/tag.h"

#include <algorithm>
#include <map>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/sha256.h"

namespace ftb {
namespace {

constexpr const char* kStreamHeader = "ftbench-sweep-tag-v1\n";

void putLength(std::string& out, uint64_t n) {
  for (int i = 7; i >= 0; --i) out += static_cast<char>((n >> (8 * i)) & 0xff);
}
void putBytes(std::string& out, const std::string& s) {
  putLength(out, s.size());
  out += s;
}

// The value as the schema declares it: an int stored for a float key hashes as
// the float it stands for, so `lr = 1` and `lr = 1.0` agree.
Value declared(const Config& cfg, const std::string& key, const Value& v) {
  const KeySpec* spec = cfg.schema().find(key);
  if (spec && spec->type == ValueType::kFloat && std::holds_alternative<int64_t>(v))
    return static_cast<double>(std::get<int64_t>(v));
  return v;
}

void putRecord(std::string& out, const std::string& key, const Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out += 'i';
          putBytes(out, key);
          putBytes(out, std::to_string(x));
        } else if constexpr (std::is_same_v<T, double>) {
          out += 'f';
          putBytes(out, key);
          putBytes(out, formatDouble(x));
        } else if constexpr (std::is_same_v<T, bool>) {
          out += 'b';
          putBytes(out, key);
          putBytes(out, x ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          out += 's';
          putBytes(out, key);
          putBytes(out, x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          out += 'I';
          putBytes(out, key);
          putLength(out, x.size());
          for (int64_t e : x) putBytes(out, std::to_string(e));
        } else {
          out += 'S';
          putBytes(out, key);
          putLength(out, x.size());
          for (const std::string& e : x) putBytes(out, e);
        }
      },
      v);
}

// ---- fmt parsing ------------------------------------------------------------

struct Token {
  bool placeholder;
  std::string text;  // literal text, or the placeholder name
  size_t pos;        // offset in fmt of the token's first char ('{' for placeholders)
};

// Quotes fmt in messages; a fmt over 80 bytes is shown as its first 77 + "...".
[[noreturn]] void fmtError(const std::string& fmt, const std::string& what) {
  std::string shown = fmt.size() <= 80 ? fmt : fmt.substr(0, 77) + "...";
  throw ConfigError("bad tag fmt \"" + shown + "\": " + what);
}

std::vector<Token> tokenize(const std::string& fmt) {
  std::vector<Token> tokens;
  std::string lit;
  size_t lit_pos = 0;
  auto flush = [&](size_t next) {
    if (!lit.empty()) tokens.push_back({false, lit, lit_pos});
    lit.clear();
    lit_pos = next;
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      if (lit.empty()) lit_pos = i;
      lit += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      if (lit.empty()) lit_pos = i;
      lit += '}';
      ++i;
    } else if (c == '}') {
      fmtError(fmt, "unmatched '}' at position " + std::to_string(i) +
                        " (write '}}' for a literal '}')");
    } else if (c == '{') {
      flush(i);
      size_t j = i + 1;
      for (; j < fmt.size() && fmt[j] != '}'; ++j) {
        if (fmt[j] == '{')
          fmtError(fmt, "unexpected '{' at position " + std::to_string(j) +
                            " inside the placeholder opened at position " + std::to_string(i));
      }
      if (j == fmt.size())
        fmtError(fmt, "unclosed '{' at position " + std::to_string(i) +
                          " (write '{{' for a literal '{')");
      if (j == i + 1) fmtError(fmt, "empty placeholder {} at position " + std::to_string(i));
      tokens.push_back({true, fmt.substr(i + 1, j - i - 1), i});
      i = j;
      lit_pos = j + 1;
    } else {
      if (lit.empty()) lit_pos = i;
      lit += c;
    }
  }
  flush(fmt.size());
  return tokens;
}

std::string placeholderValue(const Config& cfg, int world_size, const std::string& hash,
                             const Token& t, const std::string& fmt) {
  if (t.text == "world_size") return std::to_string(world_size);
  if (t.text == "hash") return hash;
  std::string key = t.text;
  long index = -1;
  size_t lb = key.find('[');
  if (lb != std::string::npos && key.back() == ']' && lb + 2 < key.size()) {
    std::string digits = key.substr(lb + 1, key.size() - lb - 2);
    if (digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 9) {
      index = std::stol(digits);
      key = key.substr(0, lb);
    }
  }
  const auto& entries = cfg.entries();
  auto it = entries.find(key);
  if (it == entries.end()) {
    if (cfg.schema().find(key) && index < 0) return "none";  // declared, no value
    std::vector<std::string> names = {"world_size", "hash"};
    for (const KeySpec& s : cfg.schema().keys()) names.push_back(s.key);
    for (const auto& [k, e] : entries)
      if (!cfg.schema().find(k)) names.push_back(k);
    std::string near = closestName(t.text, names);
    fmtError(fmt, "unknown placeholder {" + t.text + "} at position " + std::to_string(t.pos) +
                      (near.empty() ? "; use a config key, {world_size} or {hash}"
                                    : "; did you mean {" + near + "}?"));
  }
  const Value v = declared(cfg, key, it->second.value);
  if (index < 0) return tagValueString(v);
  auto element = [&](const auto& list) -> std::string {
    if (static_cast<size_t>(index) >= list.size())
      fmtError(fmt, "placeholder {" + t.text + "} at position " + std::to_string(t.pos) +
                        ": index " + std::to_string(index) + " is out of range (" + key + " has " +
                        std::to_string(list.size()) + " elements)");
    return tagValueString(Value(list[index]));
  };
  if (auto* l = std::get_if<std::vector<int64_t>>(&v)) return element(*l);
  if (auto* l = std::get_if<std::vector<std::string>>(&v)) return element(*l);
  fmtError(fmt, "placeholder {" + t.text + "} at position " + std::to_string(t.pos) + ": " + key +
                    " is not a list");
}

std::string describeComponent(const std::string& c) {
  return c.size() <= 40 ? c : c.substr(0, 40) + "...";
}

}  // namespace

std::string tagValueString(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
        if constexpr (std::is_same_v<T, double>) return formatDouble(x);
        if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        if constexpr (std::is_same_v<T, std::string>) return x;
        if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                      std::is_same_v<T, std::vector<std::string>>) {
          std::string out;
          for (size_t i = 0; i < x.size(); ++i) {
            if (i) out += '-';
            if constexpr (std::is_same_v<T, std::vector<int64_t>>)
              out += std::to_string(x[i]);
            else
              out += x[i];
          }
          return out;
        }
      },
      v);
}

std::string pathSafe(const std::string& value) {
  if (value.empty()) return "_";
  std::string out = value;
  for (char& c : out) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (out[0] == '.') out[0] = '_';
  if (out.size() > kMaxTagValueLen)
    out = out.substr(0, kMaxTagValueLen - 9) + "_" + sha256HexPrefix(value, 4);
  return out;
}

std::string canonicalStream(const Config& cfg, int world_size, int nodes) {
  std::string out = kStreamHeader;
  // A renamed key hashes under its old name, in the old name's place in the byte order, so
  // run directories written before the rename keep their tags (renamedKeys()).
  std::map<std::string, Value> records;  // sorted by bytes
  for (const auto& [key, entry] : cfg.entries()) {
    const KeySpec* spec = cfg.schema().find(key);
    if (spec && !spec->affects_experiment) continue;
    if (spec && !spec->hash_default && spec->default_value &&
        declared(cfg, key, entry.value) == *spec->default_value)
      continue;
    const RenamedKey* r = renamedTo(key);
    records.emplace(r != nullptr ? r->old_key : key, declared(cfg, key, entry.value));
  }
  for (const auto& [key, value] : records) putRecord(out, key, value);
  out += 'W';
  putBytes(out, "world_size");
  putBytes(out, std::to_string(world_size));
  if (nodes > 1) {  // absent for one node: single-node hashes did not change
    out += 'N';
    putBytes(out, "nodes");
    putBytes(out, std::to_string(nodes));
  }
  return out;
}

std::string configHash(const Config& cfg, int world_size, int nodes) {
  return sha256HexPrefix(canonicalStream(cfg, world_size, nodes), 8);
}

std::string formatTag(const Config& cfg, int world_size, const std::string& fmt, int nodes) {
  if (fmt.empty()) fmtError(fmt, "it is empty");
  std::vector<Token> tokens = tokenize(fmt);
  if (fmt[0] == '/')
    fmtError(fmt, "absolute path (the tag must be a path relative to the output dir)");

  // Split into '/'-separated segments on literal text; check structure first so
  // that errors do not depend on the config.
  struct Piece {
    const Token* token;
    std::string literal;  // for literal pieces
  };
  std::vector<std::vector<Piece>> segments(1);
  std::vector<size_t> seg_pos = {0};
  for (const Token& t : tokens) {
    if (t.placeholder) {
      segments.back().push_back({&t, ""});
      continue;
    }
    size_t start = 0;
    for (size_t slash; (slash = t.text.find('/', start)) != std::string::npos; start = slash + 1) {
      if (slash > start) segments.back().push_back({nullptr, t.text.substr(start, slash - start)});
      segments.emplace_back();
      seg_pos.push_back(t.pos + slash + 1);
    }
    if (start < t.text.size()) segments.back().push_back({nullptr, t.text.substr(start)});
  }
  for (size_t s = 0; s < segments.size(); ++s) {
    if (segments[s].empty())
      fmtError(fmt, "empty path segment at position " + std::to_string(seg_pos[s]));
    if (segments[s].size() == 1 && !segments[s][0].token &&
        (segments[s][0].literal == "." || segments[s][0].literal == ".."))
      fmtError(fmt, "path component \"" + segments[s][0].literal + "\" at position " +
                        std::to_string(seg_pos[s]) + " is not allowed");
  }

  bool needs_hash = false;
  for (const Token& t : tokens) needs_hash |= t.placeholder && t.text == "hash";
  const std::string hash = needs_hash ? configHash(cfg, world_size, nodes) : "";
  std::string tag;
  for (size_t s = 0; s < segments.size(); ++s) {
    std::string comp;
    for (const Piece& p : segments[s])
      comp +=
          p.token ? pathSafe(placeholderValue(cfg, world_size, hash, *p.token, fmt)) : p.literal;
    if (comp.size() > kMaxPathComponent)
      fmtError(fmt, "path component \"" + describeComponent(comp) + "\" is " +
                        std::to_string(comp.size()) + " bytes long (max " +
                        std::to_string(kMaxPathComponent) + ")");
    if (comp == "." || comp == "..")  // unreachable: pathSafe never yields a leading '.'
      fmtError(fmt, "path component \"" + comp + "\" is not allowed");
    tag += (s ? "/" : "") + comp;
  }
  // ---- Sweep repeats: repeat N > 0 of a point runs in <tag>.rN, under the same hash ----
  if (cfg.has("sweep.repeat") && cfg.getInt("sweep.repeat") > 0)
    tag += ".r" + std::to_string(cfg.getInt("sweep.repeat"));
  return tag;
}

}  // namespace ftb
