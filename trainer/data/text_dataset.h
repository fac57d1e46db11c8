// JSONL text datasets tokenized with data.tokenizer, a sentencepiece tokenizer.model or an
// HF tokenizer.json (loadTextTokenizer, trainer/data/tokenizer.h): one JSON object per line
// with a text field (data.text_field), or a prompt and a completion field
// (data.prompt_field + data.completion_field: loss on the completion only).
//
// Contracts:
// - A text line gives [bos] + encode(text) + [eos] (bos/eos when the tokenizer defines
//   them; encode() is sentencepiece's own, spm_encode's ids, or HF tokenizers' encode()
//   without special tokens).
// - A prompt/completion line gives [bos] + encode(prompt + completion) + [eos], and its
//   first 1 + |encode(prompt)| ids (bos and the prompt, counted as TRL's SFTTrainer
//   counts them) are not loss targets: the |encode(prompt)| positions that predict a
//   prompt token are masked, as by SFTTrainer's completion-only collator.
// - Without data.prompt_field, a line holding "messages" and not the text field is a
//   conversation (trainer/data/chat_template.h): the chat template's text of it tokenized
//   whole (no BOS/EOS added: the template has them), and only the ids whose text overlaps an
//   assistant message's content and end-of-turn token are loss targets. The template
//   (data.chat_template) is resolved at the first such line.
// - Bad input throws ConfigError (exit 2) naming `file:line` and the key of the field:
//   an invalid JSON line, a missing or non-string field, an empty file, a malformed message.
// - The token ids are cached beside the dataset in `<file>.tok-<key>.bin`, key = hash
//   of (tokenizer bytes, those of the tokenizer_config.json and chat_template.jinja beside a
//   tokenizer, dataset bytes, fields, data.chat_template, format). It is written once, by
//   whichever process first takes an flock
//   on the dataset file (tmp + fsync + rename); the others wait for the lock (at most
//   parallel.timeout_seconds) and read it. A directory that cannot be written means no
//   cache (a warning), not a failure.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "common/run_config.h"

namespace ftb {

struct TokenizedDocs {
  std::vector<std::vector<int32_t>> ids;  // untruncated, in file order
  // Per document, which ids are loss targets: empty = all; else one flag per id (flag k for
  // ids[k]; flag 0 is unused), as Dataset::targets().
  std::vector<std::vector<uint8_t>> targets;
  std::string cache_path;                 // "" when not cached
  bool cache_hit = false;
};

// REQUIRES: c.tokenizer non-empty, c.data_source a .jsonl file.
TokenizedDocs loadTextJsonl(const TrainConfig& c);

// The longest line a JSONL data file may hold: one record (a document of token ids or
// texts) of at most 16 MiB, far beyond any seq_len; a longer one is refused before more
// than this bound is held in memory.
inline constexpr size_t kMaxJsonlLineBytes = size_t(16) << 20;
// Reads the next line of `in` (without its '\n') into `line`; false at the end of the
// file. A line longer than kMaxJsonlLineBytes throws ConfigError (data.source) naming
// `path`:`lineno`.
bool readJsonlLine(std::istream& in, std::string& line, const std::string& path, int64_t lineno);

// Where loadTextJsonl caches the ids of c.data_source tokenized as c says.
std::string tokenCachePath(const TrainConfig& c);

}  // namespace ftb
