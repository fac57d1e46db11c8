// `trainer tokenize`: the ids the trainer trains on, for anyone to compare with another
// tokenizer implementation.
//
//   trainer tokenize --tokenizer PATH [--text-field F] [--add-bos-eos]
//                    [--chat-template auto|llama3|chatml] IN.jsonl OUT.jsonl
//
// Contract: PATH is a tokenizer.json or a sentencepiece tokenizer.model (loadTextTokenizer).
// Each non-blank line of IN (a JSON object) gives one line {"input_ids": [...]} in OUT, in
// order: the ids of its text field (default "text"), without BOS/EOS unless --add-bos-eos
// (then as the trainer's dataset adds them). A line holding "messages" and no text field is
// a conversation: {"input_ids": [...], "labels": [...]}, the ids and loss targets the
// trainer's dataset takes from it (trainer/data/chat_template.h; --chat-template as
// data.chat_template), labels[k] = input_ids[k] for a target, else -100: a file the trainer
// reads back as pre-tokenized data. Blank lines are skipped, as the dataset skips
// them. OUT is written whole or not at all (a temporary file renamed). Bad input (a line
// that is not a JSON object, no such field or not a string, a malformed message or unknown
// chat template, an unreadable file) exits 2 naming IN:line, the file or the flag; a missing
// option or operand exits 2 with the usage.
#pragma once

#include <string>
#include <vector>

namespace ftb {

// REQUIRES: args are the words after "trainer tokenize". Returns the exit code.
int tokenizeMain(const std::vector<std::string>& args);

}  // namespace ftb
