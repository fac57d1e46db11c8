#include "common/json_input.h"

#include "common/error.h"

namespace ftb {
namespace {

using nlohmann::json;

// The parser's message with the token it quotes cut by shortText: the token of a 20 MB
// string ("last read: '...'") or of a 2 MB number ("number overflow parsing '...'") is all
// of it. The token runs from the first quote to the quote before "; expected " or the last.
std::string withShortToken(const std::string& msg) {
  const size_t b = msg.find('\'');
  if (b == std::string::npos) return msg;
  size_t e = msg.rfind("'; expected ");
  if (e == std::string::npos || e <= b) e = msg.rfind('\'');
  if (e <= b) return msg;
  return msg.substr(0, b + 1) + shortText(msg.substr(b + 1, e - b - 1)) + msg.substr(e);
}

std::string quoted(const std::string& s) {
  // shortText never splits a UTF-8 sequence; `replace` keeps dump() from throwing anyway.
  return json(shortText(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

void printShort(const json& v, std::string& out, int depth) {
  if (out.size() > kMaxShortJsonBytes || depth > kMaxJsonDepth) {
    out += "...";
    return;
  }
  if (v.is_string()) {
    out += quoted(v.get_ref<const std::string&>());
  } else if (v.is_object() || v.is_array()) {
    out += v.is_object() ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ',';  // nlohmann's compact dump(): no spaces
      first = false;
      if (out.size() > kMaxShortJsonBytes) {
        out += "...";
        break;
      }
      if (v.is_object()) out += quoted(it.key()) + ":";
      printShort(*it, out, depth + 1);
    }
    out += v.is_object() ? '}' : ']';
  } else {
    out += v.dump();  // a number, a boolean or null: short
  }
}

}  // namespace

size_t jsonTooDeepAt(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return i;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

json parseJsonInput(std::string_view text, const std::string& key, const std::string& path,
                    const std::string& hint) {
  if (const size_t at = jsonTooDeepAt(text, kMaxJsonDepth); at != std::string_view::npos)
    throw ConfigError(key, path,
                      "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                          " levels (byte " + std::to_string(at) + " opens level " +
                          std::to_string(kMaxJsonDepth + 1) + ")",
                      "not a file of this kind: its JSON nests a few levels deep");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError(key, path, "invalid JSON: " + withShortToken(e.what()), hint);
  }
}

std::string shortText(const std::string& s) {
  if (s.size() <= kShortTextBytes) return s;
  size_t n = kShortPrefixBytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // a continuation
  return s.substr(0, n) + "... (" + std::to_string(s.size()) + " bytes)";
}

std::string shortJson(const json& v) {
  std::string out;
  printShort(v, out, 0);
  return out;
}

}  // namespace ftb
