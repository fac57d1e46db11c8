// JSON from files ftbench does not control (safetensors headers, config.json,
// adapter_config.json, model.safetensors.index.json): parsed with a bounded nesting depth,
// and quoted in error messages only in short.
//
// Contracts:
// - jsonTooDeepAt(text, max_depth): the byte offset of the first '{' or '[' outside a
//   string that opens level max_depth + 1, or npos when the text nests no deeper than
//   max_depth. One linear pass, no allocation; says nothing else about validity.
// - parseJsonInput(text, key, path): the parsed JSON, or ConfigError (exit 2) naming `key`
//   and `path` when the text nests deeper than kMaxJsonDepth (checked before parsing: the
//   JSON library recurses once per level when printing, comparing and copying) or is not
//   valid JSON (the library's message, its last-read token cut by shortText; `hint` is that
//   error's hint). Whatever it
//   returns is safe to pass to shortJson.
//   Its readers: parseSafetensorsHeader (common/safetensors_header.h), config.json
//   (common/hf_config.h), the index and adapter_config.json (trainer/hf/); a checkpoint
//   manifest is refused past the depth too (common/checkpoint_manifest.h); each line of a
//   JSONL dataset or `trainer tokenize` input (trainer/data/).
// - shortText(s): s when it is at most kShortTextBytes long, else its first kShortPrefixBytes
//   (never splitting a UTF-8 sequence) + "... (N bytes)". For any value from a file that
//   an error message quotes (a tensor name, a dtype, a field).
// - shortJson(v): v printed as JSON with every string cut by shortText, nesting deeper than
//   kMaxJsonDepth printed as "...", and no element begun once kMaxShortJsonBytes are
//   written ("..." instead). Never throws; a few hundred bytes at most for any input.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ftb {

inline constexpr int kMaxJsonDepth = 64;  // safetensors headers nest 3 levels, HF configs ~5
inline constexpr size_t kShortTextBytes = 128, kShortPrefixBytes = 64;
inline constexpr size_t kMaxShortJsonBytes = 240;

size_t jsonTooDeepAt(std::string_view text, int max_depth);

nlohmann::json parseJsonInput(std::string_view text, const std::string& key,
                              const std::string& path, const std::string& hint = "");

std::string shortText(const std::string& s);
std::string shortJson(const nlohmann::json& v);

}  // namespace ftb
