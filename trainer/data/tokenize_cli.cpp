#include "trainer/data/tokenize_cli.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/cli_args.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json_input.h"
#include "common/log.h"
#include "trainer/data/chat_template.h"
#include "trainer/data/text_dataset.h"
#include "trainer/data/tokenizer.h"

namespace ftb {
namespace {

struct TokenizeOptions {
  std::string tokenizer, text_field, in, out, chat_template;
  bool bos_eos = false;
};

// The text field of record `j` of one line, or a ConfigError naming IN:line.
std::string lineText(const nlohmann::json& j, const std::string& field, const std::string& where) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string())
    throw ConfigError(
        "--text-field", where,
        it == j.end() ? "no \"" + field + "\" field in this line"
                      : "field \"" + field + "\" is a " + it->type_name() + ", expected a string",
        "name the field that holds the text with --text-field");
  return it->get<std::string>();
}

// One output line: {"input_ids": [...]}, with "labels" (the id where `targets` flags it, else
// -100) when targets is not null.
void appendIds(const std::vector<int32_t>& ids, const std::vector<uint8_t>* targets,
               std::string& out) {
  out += "{\"input_ids\": [";
  for (size_t i = 0; i < ids.size(); ++i) (i ? out += ", " : out) += std::to_string(ids[i]);
  if (targets != nullptr) {
    out += "], \"labels\": [";
    for (size_t i = 0; i < ids.size(); ++i)
      (i ? out += ", " : out) += (*targets)[i] ? std::to_string(ids[i]) : "-100";
  }
  out += "]}\n";
}

// Encodes the records of IN; the chat template is resolved at the first conversation.
class LineEncoder {
 public:
  LineEncoder(const TokenizeOptions& o, const TextTokenizer& tok) : o_(o), tok_(tok) {}
  // The output line of `line` into `buf`; the time spent in the tokenizer is added to
  // `encode_s` and its ids to `tokens`.
  void encode(const std::string& line, const std::string& where, std::string& buf, double& encode_s,
              int64_t& tokens) {
    nlohmann::json j =
        parseJsonInput(line, "IN.jsonl", where,
                       "one JSON object per line, e.g. {\"" + o_.text_field + "\": \"...\"}");
    if (!j.is_object()) throw ConfigError("IN.jsonl", where, "expected a JSON object");
    buf.clear();
    if (!j.contains(o_.text_field) && j.contains("messages")) {
      const std::vector<ChatMessage> messages = parseMessages(j, where);
      if (!chat_) chat_ = resolveChatTemplate(o_.chat_template, o_.tokenizer);
      const auto t0 = std::chrono::steady_clock::now();
      const ChatDoc d = encodeChat(tok_, o_.tokenizer, *chat_, messages);
      encode_s += secondsSince(t0);
      tokens += int64_t(d.ids.size());
      appendIds(d.ids, &d.targets, buf);
      return;
    }
    const std::string text = lineText(j, o_.text_field, where);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok_.encode(text);  // timed alone: no JSON, no I/O
    encode_s += secondsSince(t0);
    tokens += int64_t(ids.size());
    if (o_.bos_eos && tok_.bos() >= 0) ids.insert(ids.begin(), tok_.bos());
    if (o_.bos_eos && tok_.eos() >= 0) ids.push_back(tok_.eos());
    appendIds(ids, nullptr, buf);
  }

 private:
  const TokenizeOptions& o_;
  const TextTokenizer& tok_;
  std::optional<ChatTemplate> chat_;
};

// Writes OUT through a temporary file beside it, renamed into place once complete, and
// prints the counts and the time spent in encode() alone to stderr.
void tokenizeFile(const TokenizeOptions& o) {
  const auto t_load = std::chrono::steady_clock::now();
  std::unique_ptr<TextTokenizer> tok = loadTextTokenizer(o.tokenizer, "--tokenizer");
  const double load_s = secondsSince(t_load);
  double encode_s = 0;
  int64_t texts = 0, tokens = 0;
  std::ifstream in(o.in);
  if (!in) throw ConfigError("IN.jsonl", o.in, "cannot open: " + std::string(std::strerror(errno)));
  const std::string tmp = o.out + ".tmp." + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw IoError(tmp + ": cannot create: " + std::strerror(errno));
  try {
    std::string line, buf;
    LineEncoder encoder(o, *tok);
    for (int64_t lineno = 1; readJsonlLine(in, line, o.in, lineno); ++lineno) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      encoder.encode(line, o.in + ":" + std::to_string(lineno), buf, encode_s, tokens);
      ++texts;
      if (!out.write(buf.data(), std::streamsize(buf.size())))
        throw IoError(tmp + ": write failed: " + std::strerror(errno));
    }
    out.close();
    if (!out) throw IoError(tmp + ": write failed: " + std::strerror(errno));
    fsyncPath(tmp);
    renameDurably(tmp, o.out);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::cerr << "trainer tokenize: " << texts << " texts, " << tokens << " tokens from encode()"
            << "; encode " << encode_s << " s, " << (encode_s > 0 ? double(tokens) / encode_s : 0)
            << " tokens/s on one thread; tokenizer load " << load_s << " s; wrote " << o.out
            << "\n";
}

cxxopts::Options tokenizeCli() {
  cxxopts::Options cli(
      "trainer tokenize",
      "Write the token ids of each JSONL line's text as {\"input_ids\": [...]}, of a\n"
      "\"messages\" line as {\"input_ids\": [...], \"labels\": [...]}.\n"
      "  trainer tokenize --tokenizer PATH [--text-field F] [--add-bos-eos]\n"
      "                   [--chat-template auto|llama3|chatml] IN.jsonl OUT.jsonl");
  cli.add_options()("tokenizer", "a tokenizer.json (HF tokenizers) or a sentencepiece .model",
                    cxxopts::value<std::string>())(
      "text-field", "JSONL field with the text",
      cxxopts::value<std::string>()->default_value("text"))(
      "add-bos-eos", "add BOS and EOS as the trainer's dataset does (default: neither)")(
      "chat-template", "format of \"messages\" lines, as data.chat_template",
      cxxopts::value<std::string>()->default_value("auto"))(
      "files", "IN.jsonl OUT.jsonl", cxxopts::value<std::vector<std::string>>())("h,help",
                                                                                 "show help");
  cli.parse_positional({"files"});
  cli.positional_help("IN.jsonl OUT.jsonl");
  return cli;
}

}  // namespace

int tokenizeMain(const std::vector<std::string>& args) {
  cxxopts::Options cli = tokenizeCli();
  const char* usage = "trainer tokenize --tokenizer PATH IN.jsonl OUT.jsonl";
  return guardedCli(cli,
                    [&]() -> std::optional<int> {
                      const auto parsed = parseSubcommand(cli, "trainer tokenize", args);
                      if (!parsed) return 0;
                      const cxxopts::ParseResult& r = *parsed;
                      if (!r.count("tokenizer"))
                        throw ConfigError("--tokenizer", "command line", "missing", usage);
                      const auto files = r.count("files")
                                             ? r["files"].as<std::vector<std::string>>()
                                             : std::vector<std::string>{};
                      if (files.size() != 2)
                        throw ConfigError("IN.jsonl OUT.jsonl", "command line",
                                          "expected two files, got " + std::to_string(files.size()),
                                          usage);
                      TokenizeOptions o{r["tokenizer"].as<std::string>(),
                                        r["text-field"].as<std::string>(),
                                        files[0],
                                        files[1],
                                        r["chat-template"].as<std::string>(),
                                        r.count("add-bos-eos") > 0};
                      if (o.chat_template != "auto" && o.chat_template != "llama3" &&
                          o.chat_template != "chatml")
                        throw ConfigError("--chat-template", "command line",
                                          "unknown value \"" + o.chat_template + "\"",
                                          "expected auto, llama3 or chatml");
                      tokenizeFile(o);
                      return 0;
                    })
      .value_or(0);
}

}  // namespace ftb
