#include "trainer/data/tokenizer_json.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/error.h"
#include "trainer/data/unigram_model.h"

namespace ftb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// j[key] as a string; "" when absent or null.
std::string optString(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_string())
    tokenizerJsonError(where + "." + key, std::string("expected a string, got ") + it->type_name());
  return it->get<std::string>();
}

bool optBool(const json& j, const char* key, bool fallback, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    tokenizerJsonError(where + "." + key, std::string("expected a boolean, got ") + it->type_name());
  return it->get<bool>();
}

// "a b" (split at the first space) or ["a", "b"].
std::pair<std::string, std::string> mergePair(const json& m, const std::string& where) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos)
      tokenizerJsonError(where, "expected \"a b\" (two tokens and a space), got \"" + s + "\"");
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  tokenizerJsonError(where, "expected \"a b\" or [\"a\", \"b\"]");
}

std::unique_ptr<TokenModel> parseUnigram(const json& m) {
  if (!m.contains("vocab") || !m["vocab"].is_array()) tokenizerJsonError("model.vocab", "expected an array");
  std::vector<std::pair<std::string, double>> vocab;
  vocab.reserve(m["vocab"].size());
  for (size_t i = 0; i < m["vocab"].size(); ++i) {
    const json& v = m["vocab"][i];
    if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number())
      tokenizerJsonError("model.vocab[" + std::to_string(i) + "]", "expected [\"piece\", score]");
    vocab.emplace_back(v[0].get<std::string>(), v[1].get<double>());
  }
  auto unk = m.find("unk_id");
  if (unk != m.end() && !unk->is_null() && !unk->is_number_integer())
    tokenizerJsonError("model.unk_id", "expected an integer or null");
  const int32_t unk_id = unk == m.end() || unk->is_null() ? -1 : unk->get<int32_t>();
  return std::make_unique<UnigramModel>(std::move(vocab), unk_id,
                                        optBool(m, "byte_fallback", false, "model"));
}

std::unique_ptr<TokenModel> parseModel(const json& m) {
  if (!m.is_object()) tokenizerJsonError("model", "expected an object");
  const std::string type = optString(m, "type", "model");
  if (type == "Unigram") return parseUnigram(m);
  if (type == "WordPiece" || type == "WordLevel")
    tokenizerJsonError("model.type", "model \"" + type + "\" is not supported (supported: BPE, Unigram)");
  if (type != "BPE" && !(type.empty() && m.contains("merges")))
    tokenizerJsonError("model.type", "expected \"BPE\" or \"Unigram\", got \"" + type + "\"");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    tokenizerJsonError("model.dropout", "BPE dropout is random; expected null or 0");
  if (!m.contains("vocab") || !m["vocab"].is_object()) tokenizerJsonError("model.vocab", "expected an object");
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(m["vocab"].size());
  for (const auto& [tok, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      tokenizerJsonError("model.vocab[\"" + tok + "\"]", "expected a non-negative integer id");
    vocab.emplace_back(tok, id.get<int32_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const json& ms = m.contains("merges") ? m["merges"] : json::array();
  if (!ms.is_array()) tokenizerJsonError("model.merges", "expected an array");
  merges.reserve(ms.size());
  for (size_t i = 0; i < ms.size(); ++i)
    merges.push_back(mergePair(ms[i], "model.merges[" + std::to_string(i) + "]"));
  BpeOptions o;
  o.unk_token = optString(m, "unk_token", "model");
  o.continuing_subword_prefix = optString(m, "continuing_subword_prefix", "model");
  o.end_of_word_suffix = optString(m, "end_of_word_suffix", "model");
  o.fuse_unk = optBool(m, "fuse_unk", false, "model");
  o.byte_fallback = optBool(m, "byte_fallback", false, "model");
  o.ignore_merges = optBool(m, "ignore_merges", false, "model");
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(o));
}

// The id of the special token `name` in a TemplateProcessing's special_tokens.
int32_t templateTokenId(const json& pp, const std::string& name, const std::string& where) {
  const json& st = pp.value("special_tokens", json::object());
  if (!st.contains(name) || !st[name].contains("ids") || !st[name]["ids"].is_array() ||
      st[name]["ids"].empty() || !st[name]["ids"][0].is_number_integer())
    tokenizerJsonError(where + ".special_tokens", "no ids for \"" + name + "\"");
  return st[name]["ids"][0].get<int32_t>();
}

// bos/eos from the post_processor: the special token right before and right after $A in
// a TemplateProcessing's "single" template (found also inside a Sequence).
void templateBosEos(const json& pp, const std::string& where, int32_t& bos, int32_t& eos) {
  if (!pp.is_object()) return;
  const std::string type = pp.value("type", "");
  if (type == "Sequence") {
    const json& list = pp.value("processors", json::array());
    for (size_t i = 0; i < list.size(); ++i)
      templateBosEos(list[i], where + ".processors[" + std::to_string(i) + "]", bos, eos);
    return;
  }
  if (type != "TemplateProcessing" || !pp.contains("single") || !pp["single"].is_array()) return;
  const json& single = pp["single"];
  size_t seq = single.size();
  for (size_t i = 0; i < single.size(); ++i)
    if (single[i].contains("Sequence")) seq = std::min(seq, i);
  if (seq == single.size()) return;
  auto special = [&](size_t i) -> std::string {
    if (!single[i].contains("SpecialToken")) return "";
    return single[i]["SpecialToken"].value("id", "");
  };
  if (seq > 0 && !special(seq - 1).empty()) bos = templateTokenId(pp, special(seq - 1), where);
  if (seq + 1 < single.size() && !special(seq + 1).empty())
    eos = templateTokenId(pp, special(seq + 1), where);
}

}  // namespace

std::string tokenizerConfigToken(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

json readJsonFileOrDiscarded(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::unique_ptr<TokenizerJson> TokenizerJson::load(const std::string& path,
                                                   const std::string& key) {
  const std::string hint =
      "point it at the tokenizer.json of a model directory (HF `tokenizers` format; a "
      "sentencepiece tokenizer.model also works)";
  if (!fs::is_regular_file(path)) throw ConfigError(key, path, "tokenizer file not found", hint);
  json j;
  try {
    std::ifstream in(path);
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw ConfigError(key, path, std::string("not a valid tokenizer.json: ") + e.what(), hint);
  }
  std::unique_ptr<TokenizerJson> t(new TokenizerJson());
  t->path_ = path;
  try {
    if (!j.is_object()) tokenizerJsonError("(top level)", "expected a JSON object");
    t->normalizer_ = TextNormalizer::parse(j.value("normalizer", json()), "normalizer");
    t->pre_tokenizer_ = PreTokenizer::parse(j.value("pre_tokenizer", json()), "pre_tokenizer");
    t->model_ = parseModel(j.value("model", json()));
    t->vocab_size_ = t->model_->maxId() + 1;
    t->loadAddedTokens(j.value("added_tokens", json::array()));
    t->loadBosEos(j.value("post_processor", json()));
  } catch (const std::invalid_argument& e) {
    throw ConfigError(key, path, e.what(), hint);
  }
  return t;
}

void TokenizerJson::loadAddedTokens(const json& list) {
  if (!list.is_array()) tokenizerJsonError("added_tokens", "expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& a = list[i];
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
        !a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0)
      tokenizerJsonError(where, "expected {\"id\": N, \"content\": \"...\", ...}");
    AddedTokenSet::Token tok;
    tok.content = a["content"].get<std::string>();
    tok.id = a["id"].get<int32_t>();
    tok.lstrip = optBool(a, "lstrip", false, where);
    tok.rstrip = optBool(a, "rstrip", false, where);
    tok.single_word = optBool(a, "single_word", false, where);
    vocab_size_ = std::max(vocab_size_, tok.id + 1);
    added_ids_[tok.content] = tok.id;
    // HF matches a normalized token's normalized form in the normalized text.
    if (optBool(a, "normalized", !optBool(a, "special", false, where), where)) {
      normalizer_.apply(tok.content);
      normalized_added_.add(std::move(tok));
    } else {
      raw_added_.add(std::move(tok));
    }
  }
}

int32_t TokenizerJson::tokenId(const std::string& token) const {
  auto it = added_ids_.find(token);
  return it != added_ids_.end() ? it->second : model_->id(token);
}

void TokenizerJson::loadBosEos(const json& post_processor) {
  templateBosEos(post_processor, "post_processor", bos_, eos_);
  const fs::path cfg_path = fs::path(path_).parent_path() / "tokenizer_config.json";
  if (!fs::is_regular_file(cfg_path)) return;
  const json cfg = readJsonFileOrDiscarded(cfg_path.string());
  if (bos_ < 0 && cfg.is_object() && cfg.value("add_bos_token", false) == true)
    bos_ = tokenId(tokenizerConfigToken(cfg, "bos_token"));
  if (eos_ < 0) eos_ = tokenId(tokenizerConfigToken(cfg, "eos_token"));
}

void TokenizerJson::encodeText(std::string_view text, bool at_start,
                               std::vector<int32_t>& out) const {
  std::vector<TextPiece> pieces;
  pre_tokenizer_.apply(TextPiece{std::string(text), at_start}, pieces);
  for (const TextPiece& p : pieces) model_->tokenize(p.text, out);
}

std::vector<int32_t> TokenizerJson::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encodeInto(text, out, nullptr);
  return out;
}

bool TokenizerJson::encodeWithEnds(std::string_view text, std::vector<int32_t>& ids,
                                   std::vector<size_t>& ends) const {
  if (!pre_tokenizer_.byteLevelCover()) return false;
  std::vector<int32_t> out;
  std::vector<size_t> e;
  encodeInto(text, out, &e);
  ids = std::move(out);
  ends = std::move(e);
  return true;
}

void TokenizerJson::modelEnds(const std::vector<int32_t>& out, size_t at, size_t limit,
                              std::vector<size_t>& ends) const {
  for (size_t k = ends.size(); k < out.size(); ++k) {
    for (char c : model_->piece(out[k])) at += (uint8_t(c) & 0xC0) != 0x80;  // characters
    ends.push_back(std::max(ends.empty() ? 0 : ends.back(), std::min(at, limit)));
  }
}

void TokenizerJson::encodeInto(std::string_view text, std::vector<int32_t>& out,
                               std::vector<size_t>* ends) const {
  if (!validUtf8(text)) throw ConfigError(path_ + ": cannot encode a text that is not UTF-8");
  try {
    raw_added_.split(text, [&](std::string_view piece, int32_t id, size_t offset) {
      const size_t limit = offset + piece.size();
      if (id >= 0) {
        out.push_back(id);
        if (ends) ends->push_back(limit);
        return;
      }
      if (normalizer_.empty() && normalized_added_.empty()) {
        encodeText(piece, offset == 0, out);
        if (ends) modelEnds(out, offset, limit, *ends);
        return;
      }
      std::string norm(piece);
      normalizer_.apply(norm);
      normalized_added_.split(norm, [&](std::string_view p, int32_t nid, size_t noffset) {
        if (nid >= 0)
          out.push_back(nid);
        else
          encodeText(p, offset == 0 && noffset == 0, out);
        if (ends && nid >= 0) ends->push_back(std::min(offset + noffset + p.size(), limit));
        if (ends && nid < 0) modelEnds(out, offset + noffset, limit, *ends);
      });
    });
  } catch (const std::runtime_error& e) {
    throw ConfigError(path_ + ": cannot encode a text of " + std::to_string(text.size()) +
                      " bytes: " + e.what());
  }
}

}  // namespace ftb
