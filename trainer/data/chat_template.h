// Chat (instruction) records of a JSONL dataset: {"messages": [{"role": ..., "content": ...}]},
// formatted by a chat template the trainer knows, with the loss on the assistant turns.
//
// Supported formats (data.chat_template, trainer/docs/data.md § Chat data):
// - "llama3", Meta Llama 3 Instruct's template: bos_token, then for each message
//   <|start_header_id|>ROLE<|end_header_id|>\n\n + trim(content) + <|eot_id|>.
// - "chatml", ChatML: for each message <|im_start|>ROLE\n + content + <|im_end|>\n; the Qwen 1.5 /
//   Qwen 2 / SmolLM2 form of it first adds a system turn with its default text when the first
//   message is not a system one.
// data.chat_template = "auto" reads the template of the tokenizer's model directory
// (chat_template.jinja beside the tokenizer, else tokenizer_config.json's "chat_template") and
// recognises it by its text (chatTemplateFromText); every other template is refused.
//
// Loss (RenderedChat::loss_spans): an assistant message's content as rendered and its
// end-of-turn token (<|eot_id|>, <|im_end|>), not its header nor the "\n" after <|im_end|>. A
// token is a target when its text overlaps a span: what transformers' apply_chat_template(...,
// return_assistant_tokens_mask=True) marks for the same template with {% generation %} around
// exactly those (tests/e2e/trainer/test_chat_data.py compares them token for token).
//
// Errors are ConfigError (exit 2): the file and what was found for a template; `where`
// (file:line) for a record, with the index of the message.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace ftb {

class TextTokenizer;

struct ChatTemplate {
  enum class Format { kLlama3, kChatml } format = Format::kChatml;
  std::string bos_token;        // kLlama3: text before the first message ("" = none)
  bool default_system = false;  // kChatml: add a system turn when the first message is not one
  std::string system_text;      // ... holding this text
  std::string source;           // where it came from (for messages): a file, or the key
};

// The template data.chat_template = `setting` ("auto", "llama3" or "chatml") names for the
// tokenizer at `tokenizer_path`. bos_token is tokenizer_config.json's (beside the tokenizer),
// "" when it has none, as transformers renders it.
ChatTemplate resolveChatTemplate(const std::string& setting, const std::string& tokenizer_path);

// The template whose text is `text` (a chat_template string): recognised after dropping
// whitespace inside {{ }} and {% %} outside string literals, quotes, concatenations of two
// literals and {% generation %} tags; false when it is none the trainer renders.
bool chatTemplateFromText(const std::string& text, ChatTemplate& out);

struct ChatMessage {
  std::string role, content;
};

// The "messages" of record `j` (a JSON object): a non-empty list of {"role", "content"}
// objects, role one of system, user, assistant, content a string (other keys are ignored).
std::vector<ChatMessage> parseMessages(const nlohmann::json& j, const std::string& where);

struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> loss_spans;  // [begin, end) bytes of text, in order
};
RenderedChat renderChat(const ChatTemplate& t, const std::vector<ChatMessage>& messages);

// Target flags of tokens whose text ends at `ends` (token k: [ends[k-1], ends[k]), from 0):
// 1 where that range overlaps a span. REQUIRES: spans in order, not overlapping.
std::vector<uint8_t> spanTargets(const std::vector<size_t>& ends,
                                 const std::vector<std::pair<size_t, size_t>>& spans);

// The ids of a conversation and its target flags (flag k for ids[k]): renderChat, then
// tok.encodeWithEnds of the whole text (as apply_chat_template encodes it: no BOS/EOS added,
// special tokens in the text are special tokens), then spanTargets. A tokenizer that cannot
// tell which text a token stands for is a ConfigError naming `tokenizer_path`.
struct ChatDoc {
  std::vector<int32_t> ids;
  std::vector<uint8_t> targets;
};
ChatDoc encodeChat(const TextTokenizer& tok, const std::string& tokenizer_path,
                   const ChatTemplate& t, const std::vector<ChatMessage>& messages);

}  // namespace ftb
