#include "trainer/data/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/json_input.h"
#include "trainer/data/pcre2_regex.h"
#include "trainer/data/tokenizer.h"
#include "trainer/data/tokenizer_json.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The templates recognised, as their model directories ship them ("\x01" stands for the
// default system text of the Qwen form). Matching canonicalises both (canonicalTemplate).
const char* const kLlama3Template =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";
const char* const kChatmlTemplate =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
const char* const kQwenTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\n\x01<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + "
    "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
    "%}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// One lexical token of a tag's body: a string literal (its raw text between the quotes,
// escapes as written) or a run of other non-blank characters.
struct TagToken {
  bool literal = false;
  char quote = '\'';
  std::string text;
};

// Tokens of the body of a tag opened at s[i] (after "{{" or "{%" and a trim marker) up to its
// closer; i ends past the closer, `trim` holds a trim marker before it ("" or "-").
std::vector<TagToken> tagTokens(const std::string& s, size_t& i, const char* closer,
                                std::string& trim) {
  std::vector<TagToken> out;
  bool run = false;  // the last token is a run still growing
  while (i < s.size()) {
    const char c = s[i];
    if (s.compare(i, 2, closer) == 0 || (c == '-' && s.compare(i + 1, 2, closer) == 0)) {
      trim = c == '-' ? "-" : "";
      i += c == '-' ? 3 : 2;
      return out;
    }
    if (c == '\'' || c == '"') {
      TagToken t{true, c, ""};
      for (++i; i < s.size() && s[i] != c; ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) t.text += s[i++];
        t.text += s[i];
      }
      ++i;
      out.push_back(std::move(t));
      run = false;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      run = false, ++i;
    } else {
      if (!run) out.push_back(TagToken{});
      out.back().text += c;
      run = true, ++i;
    }
  }
  return out;
}

// The body's tokens joined without blanks: 'a' + 'b' becomes 'ab', a literal takes single
// quotes when it holds none.
std::string joinTag(std::vector<TagToken> t) {
  std::vector<TagToken> merged;
  for (size_t k = 0; k < t.size(); ++k) {
    if (t[k].literal && merged.size() >= 2 && merged.back().text == "+" && !merged.back().literal &&
        merged[merged.size() - 2].literal) {
      merged.pop_back();
      merged.back().text += t[k].text;
      continue;
    }
    merged.push_back(t[k]);
  }
  std::string out;
  for (const TagToken& x : merged) {
    if (!x.literal) {
      out += x.text;
      continue;
    }
    const char q = x.text.find('\'') == std::string::npos ? '\'' : x.quote;
    out += q + x.text + q;
  }
  return out;
}

// The template with blanks inside tags dropped, literals joined, {% generation %} tags and the
// parts that do not change a training text (add_generation_prompt) removed.
std::string canonicalTemplate(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const bool expr = s.compare(i, 2, "{{") == 0, stmt = s.compare(i, 2, "{%") == 0;
    if (!expr && !stmt) {
      out += s[i++];
      continue;
    }
    i += 2;
    std::string open_trim;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) open_trim = s[i++];
    std::string close_trim;
    const std::string body = joinTag(tagTokens(s, i, expr ? "}}" : "%}", close_trim));
    if (stmt && (body == "generation" || body == "endgeneration")) continue;
    out += (expr ? "{{" : "{%") + open_trim + body + close_trim + (expr ? "}}" : "%}");
  }
  const std::string noop =
      "{%ifnotadd_generation_promptisdefined%}{%setadd_generation_prompt=false%}{%endif%}";
  if (out.compare(0, noop.size(), noop) == 0) out.erase(0, noop.size());
  const std::string gen = "{%ifadd_generation_prompt%}", endif = "{%endif%}";
  const size_t g = out.rfind(gen);
  if (g != std::string::npos && out.size() >= endif.size() &&
      out.compare(out.size() - endif.size(), endif.size(), endif) == 0 &&
      out.find("{%", g + gen.size()) == out.size() - endif.size())
    out.erase(g);
  return out;
}

// A Jinja string literal's escapes (\n \t \r \\ \' \"); false for any other escape or a quote.
bool unescapeLiteral(const std::string& raw, std::string& out) {
  out.clear();
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\'' || raw[i] == '"') return false;
    if (raw[i] != '\\') {
      out += raw[i];
      continue;
    }
    if (++i == raw.size()) return false;
    const char c = raw[i];
    if (c == 'n' || c == 't' || c == 'r')
      out += c == 'n' ? '\n' : c == 't' ? '\t' : '\r';
    else if (c == '\\' || c == '\'' || c == '"')
      out += c;
    else
      return false;
  }
  return true;
}

// Python's str.isspace() for one code point (what Jinja's trim filter strips).
bool pythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Jinja's `trim` (Python's str.strip()). REQUIRES: s valid UTF-8.
std::string pythonStrip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && pythonSpace(utf8At(s, b))) b += utf8Len(uint8_t(s[b]));
  while (e > b) {
    size_t k = e - 1;
    while (k > b && (uint8_t(s[k]) & 0xC0) == 0x80) --k;
    if (!pythonSpace(utf8At(s, k))) break;
    e = k;
  }
  return s.substr(b, e - b);
}

std::string readTemplateFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw ConfigError("data.chat_template", p.string(), "cannot read the chat template");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The chat_template of tokenizer_config.json `cfg`: a string, or the "default" of a list of
// {"name", "template"}; "" when it has none.
std::string configTemplate(const json& cfg) {
  if (!cfg.is_object() || !cfg.contains("chat_template")) return "";
  const json& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const json& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  return "";
}

const char* const kTemplateHint =
    "set data.chat_template (trainer tokenize: --chat-template) to \"llama3\" or \"chatml\" "
    "when the model was trained on one of these formats; the trainer renders no other template "
    "(trainer/docs/data.md § Chat data)";

// The chat template of the model directory `dir` and where it was found.
ChatTemplate autoTemplate(const fs::path& dir) {
  const fs::path jinja = dir / "chat_template.jinja", cfg = dir / "tokenizer_config.json";
  std::string text, source;
  if (fs::is_regular_file(jinja)) {
    text = readTemplateFile(jinja), source = jinja.string();
  } else {
    text = configTemplate(readJsonFileOrDiscarded(cfg.string())), source = cfg.string();
  }
  if (text.empty())
    throw ConfigError("data.chat_template", dir.string(),
                      "no chat template: neither " + jinja.filename().string() +
                          " nor a \"chat_template\" in " + cfg.filename().string(),
                      kTemplateHint);
  ChatTemplate t;
  if (!chatTemplateFromText(text, t))
    throw ConfigError(
        "data.chat_template", source,
        "its chat template is neither Llama 3's nor ChatML: \"" + shortText(text) + "\"",
        kTemplateHint);
  t.source = source;
  return t;
}

}  // namespace

bool chatTemplateFromText(const std::string& text, ChatTemplate& out) {
  static const std::string llama3 = canonicalTemplate(kLlama3Template);
  static const std::string chatml = canonicalTemplate(kChatmlTemplate);
  static const std::string qwen = canonicalTemplate(kQwenTemplate);
  const std::string c = canonicalTemplate(text);
  if (c == llama3 || c == chatml) {
    out = ChatTemplate{};
    out.format = c == llama3 ? ChatTemplate::Format::kLlama3 : ChatTemplate::Format::kChatml;
    return true;
  }
  const size_t mark = qwen.find('\x01');
  const std::string pre = qwen.substr(0, mark), post = qwen.substr(mark + 1);
  if (c.size() < pre.size() + post.size() || c.compare(0, pre.size(), pre) != 0 ||
      c.compare(c.size() - post.size(), post.size(), post) != 0)
    return false;
  ChatTemplate t;
  if (!unescapeLiteral(c.substr(pre.size(), c.size() - pre.size() - post.size()), t.system_text))
    return false;
  t.default_system = true;
  out = t;
  return true;
}

ChatTemplate resolveChatTemplate(const std::string& setting, const std::string& tokenizer_path) {
  const fs::path dir = fs::path(tokenizer_path).parent_path();
  ChatTemplate t;
  if (setting == "auto") {
    t = autoTemplate(dir);
  } else if (setting == "llama3" || setting == "chatml") {
    t.format = setting == "llama3" ? ChatTemplate::Format::kLlama3 : ChatTemplate::Format::kChatml;
    t.source = "data.chat_template = \"" + setting + "\"";
  } else {
    throw ConfigError("data.chat_template", "config", "unknown value \"" + setting + "\"",
                      "expected \"auto\", \"llama3\" or \"chatml\"");
  }
  if (t.format == ChatTemplate::Format::kLlama3)
    t.bos_token = tokenizerConfigToken(
        readJsonFileOrDiscarded((dir / "tokenizer_config.json").string()), "bos_token");
  return t;
}

std::vector<ChatMessage> parseMessages(const json& j, const std::string& where) {
  const char* shape =
      "one JSON object per line: {\"messages\": [{\"role\": \"user\", "
      "\"content\": \"...\"}, {\"role\": \"assistant\", \"content\": \"...\"}]}";
  const json& list = j.at("messages");
  if (!list.is_array() || list.empty())
    throw ConfigError(
        "data.source", where,
        std::string("\"messages\" is ") +
            (list.is_array() ? "an empty list" : std::string("a JSON ") + list.type_name()) +
            ", expected a list of {\"role\", \"content\"} objects",
        shape);
  std::vector<ChatMessage> out;
  for (size_t k = 0; k < list.size(); ++k) {
    const json& m = list[k];
    const std::string at = "messages[" + std::to_string(k) + "]";
    if (!m.is_object())
      throw ConfigError("data.source", where,
                        at + " is a JSON " + std::string(m.type_name()) + ", expected an object",
                        shape);
    auto role = m.find("role"), content = m.find("content");
    if (role == m.end() || !role->is_string())
      throw ConfigError("data.source", where, at + " has no \"role\" string", shape);
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant")
      throw ConfigError(
          "data.source", where,
          at + " has role \"" + shortText(r) + "\", expected \"system\", \"user\" or \"assistant\"",
          "the chat templates the trainer renders take these three roles (tool "
          "calls are not supported): rename or drop the message");
    if (content == m.end() || !content->is_string())
      throw ConfigError(
          "data.source", where,
          at + " (role \"" + r + "\") has no \"content\" string" +
              (content == m.end() ? "" : std::string(" (a JSON ") + content->type_name() + ")"),
          "every message needs its text in \"content\"");
    out.push_back({r, content->get<std::string>()});
  }
  return out;
}

RenderedChat renderChat(const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  RenderedChat r;
  const bool llama3 = t.format == ChatTemplate::Format::kLlama3;
  if (!llama3 && t.default_system && !messages.empty() && messages[0].role != "system")
    r.text += "<|im_start|>system\n" + t.system_text + "<|im_end|>\n";
  for (size_t k = 0; k < messages.size(); ++k) {
    const ChatMessage& m = messages[k];
    if (llama3)
      r.text +=
          (k == 0 ? t.bos_token : "") + "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    else
      r.text += "<|im_start|>" + m.role + "\n";
    const size_t begin = r.text.size();
    r.text += llama3 ? pythonStrip(m.content) + "<|eot_id|>" : m.content + "<|im_end|>";
    if (m.role == "assistant") r.loss_spans.emplace_back(begin, r.text.size());
    if (!llama3) r.text += "\n";
  }
  return r;
}

std::vector<uint8_t> spanTargets(const std::vector<size_t>& ends,
                                 const std::vector<std::pair<size_t, size_t>>& spans) {
  std::vector<uint8_t> flags(ends.size(), 0);
  size_t s = 0;
  for (size_t k = 0; k < ends.size(); ++k) {
    const size_t start = k == 0 ? 0 : ends[k - 1];
    while (s < spans.size() && start >= spans[s].second) ++s;
    if (s == spans.size()) break;
    flags[k] = ends[k] > spans[s].first;
  }
  return flags;
}

ChatDoc encodeChat(const TextTokenizer& tok, const std::string& tokenizer_path,
                   const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  const RenderedChat r = renderChat(t, messages);
  ChatDoc d;
  std::vector<size_t> ends;
  if (!tok.encodeWithEnds(r.text, d.ids, ends))
    throw ConfigError("data.tokenizer", tokenizer_path,
                      "chat records need a tokenizer.json with a byte-level pre-tokenizer (as "
                      "Llama 3's, Qwen's, SmolLM2's): with this one the trainer cannot tell which "
                      "text each token stands for, which the assistant-only loss needs",
                      "use the model's tokenizer.json; sentencepiece models and Metaspace "
                      "tokenizer.json files are not supported for chat data");
  d.targets = spanTargets(ends, r.loss_spans);
  return d;
}

}  // namespace ftb
