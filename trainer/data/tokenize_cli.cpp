#include "trainer/data/tokenize_cli.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/cli_args.h"
#include "common/error.h"
#include "common/json_input.h"
#include "common/files.h"
#include "common/log.h"
#include "trainer/data/text_dataset.h"
#include "trainer/data/tokenizer.h"

namespace ftb {
namespace {

struct TokenizeOptions {
  std::string tokenizer, text_field, in, out;
  bool bos_eos = false;
};

// The text field of one line, or a ConfigError naming IN:line.
std::string lineText(const std::string& line, const std::string& field, const std::string& where) {
  nlohmann::json j = parseJsonInput(
      line, "IN.jsonl", where, "one JSON object per line, e.g. {\"" + field + "\": \"...\"}");
  if (!j.is_object()) throw ConfigError("IN.jsonl", where, "expected a JSON object");
  auto it = j.find(field);
  if (it == j.end() || !it->is_string())
    throw ConfigError(
        "--text-field", where,
        it == j.end() ? "no \"" + field + "\" field in this line"
                      : "field \"" + field + "\" is a " + it->type_name() + ", expected a string",
        "name the field that holds the text with --text-field");
  return it->get<std::string>();
}

void appendIds(const std::vector<int32_t>& ids, std::string& out) {
  out += "{\"input_ids\": [";
  for (size_t i = 0; i < ids.size(); ++i) (i ? out += ", " : out) += std::to_string(ids[i]);
  out += "]}\n";
}

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
    for (int64_t lineno = 1; readJsonlLine(in, line, o.in, lineno); ++lineno) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = o.in + ":" + std::to_string(lineno);
      const std::string text = lineText(line, o.text_field, where);
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<int32_t> ids = tok->encode(text);  // timed alone: no JSON, no I/O
      encode_s += secondsSince(t0);
      ++texts;
      tokens += int64_t(ids.size());
      if (o.bos_eos && tok->bos() >= 0) ids.insert(ids.begin(), tok->bos());
      if (o.bos_eos && tok->eos() >= 0) ids.push_back(tok->eos());
      buf.clear();
      appendIds(ids, buf);
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
      "Write the token ids of each JSONL line's text as {\"input_ids\": [...]}.\n"
      "  trainer tokenize --tokenizer PATH [--text-field F] [--add-bos-eos] IN.jsonl OUT.jsonl");
  cli.add_options()("tokenizer", "a tokenizer.json (HF tokenizers) or a sentencepiece .model",
                    cxxopts::value<std::string>())(
      "text-field", "JSONL field with the text",
      cxxopts::value<std::string>()->default_value("text"))(
      "add-bos-eos", "add BOS and EOS as the trainer's dataset does (default: neither)")(
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
                                        r["text-field"].as<std::string>(), files[0], files[1],
                                        r.count("add-bos-eos") > 0};
                      tokenizeFile(o);
                      return 0;
                    })
      .value_or(0);
}

}  // namespace ftb
