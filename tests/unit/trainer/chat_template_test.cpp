// Chat records by hand: which chat_template texts are recognised, the text each format renders
// and the spans in the loss, the token flags of those spans, and the errors of a malformed
// message. The ids and masks against transformers' apply_chat_template:
// tests/e2e/trainer/test_chat_data.py.
#include "trainer/data/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace ftb {
namespace {

// As Meta-Llama-3-8B-Instruct's and Qwen2-0.5B-Instruct's tokenizer_config.json hold them
// (JSON-decoded: "\n" inside the quotes is a backslash and an n).
const char* const kMetaLlama3 =
    R"({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %})";
const char* const kQwen2 =
    R"({% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

ChatTemplate recognised(const std::string& text) {
  ChatTemplate t;
  EXPECT_TRUE(chatTemplateFromText(text, t)) << text;
  return t;
}

TEST(ChatTemplate, RecognisesLlama3AndChatmlWhateverTheSpacingInsideTags) {
  EXPECT_EQ(recognised(kMetaLlama3).format, ChatTemplate::Format::kLlama3);
  // Community copies: blanks inside tags, a no-op prefix, no generation prompt, generation tags.
  recognised(replaced(kMetaLlama3, "{{ content }}", "{{content}}"));
  recognised(std::string("{% if not add_generation_prompt is defined %}{% set "
                         "add_generation_prompt = false %}{% endif %}") +
             kMetaLlama3);
  recognised(replaced(kMetaLlama3,
                      "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_"
                      "id|>\\n\\n' }}{% endif %}",
                      ""));
  recognised(
      replaced(kMetaLlama3, "{{ content }}", "{% generation %}{{ content }}{% endgeneration %}"));
  const ChatTemplate q = recognised(kQwen2);
  EXPECT_EQ(q.format, ChatTemplate::Format::kChatml);
  EXPECT_TRUE(q.default_system);
  EXPECT_EQ(q.system_text, "You are a helpful assistant.");
  // One literal or two joined by +, double quotes, another default system text.
  const std::string smol =
      replaced(replaced(kQwen2, "'<|im_end|>' + '\\n'}}", "\"<|im_end|>\\n\" }}"),
               "You are a helpful assistant.", "You are a helpful AI assistant named SmolLM");
  EXPECT_EQ(recognised(smol).system_text, "You are a helpful AI assistant named SmolLM");
  const ChatTemplate plain = recognised(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}");
  EXPECT_EQ(plain.format, ChatTemplate::Format::kChatml);
  EXPECT_FALSE(plain.default_system);
}

TEST(ChatTemplate, RefusesTemplatesThatRenderOtherwise) {
  ChatTemplate t;
  // Text outside tags is output: a newline between two tags changes the rendering.
  EXPECT_FALSE(chatTemplateFromText(replaced(kQwen2, "{% endif %}{{'", "{% endif %}\n{{'"), t));
  EXPECT_FALSE(chatTemplateFromText(replaced(kMetaLlama3, "| trim", ""), t));
  EXPECT_FALSE(chatTemplateFromText(replaced(kQwen2, "'<|im_end|>' + '\\n'", "'<|im_end|>'"), t));
  EXPECT_FALSE(chatTemplateFromText(replaced(kQwen2, "helpful assistant.", "it's me"), t));
  EXPECT_FALSE(
      chatTemplateFromText("{{ bos_token }}{% for message in messages %}[INST] "
                           "{{ message['content'] }} [/INST]{% endfor %}",
                           t));
  EXPECT_FALSE(chatTemplateFromText("", t));
}

TEST(ChatTemplate, Llama3RendersTrimmedContentAndMarksAssistantContentAndEot) {
  ChatTemplate t = recognised(kMetaLlama3);
  t.bos_token = "<|begin_of_text|>";
  const RenderedChat r = renderChat(
      t, {{"system", " Be brief. "}, {"user", "\u3000Hi\n"}, {"assistant", "\n Hello!\t"}});
  const std::string a = "Hello!<|eot_id|>";
  EXPECT_EQ(r.text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n" +
                a);
  ASSERT_EQ(r.loss_spans.size(), 1u);
  EXPECT_EQ(r.loss_spans[0], std::make_pair(r.text.size() - a.size(), r.text.size()));
}

TEST(ChatTemplate, ChatmlAddsTheDefaultSystemTurnOnlyWithoutOne) {
  const ChatTemplate t = recognised(kQwen2);
  const RenderedChat r =
      renderChat(t, {{"user", "q"}, {"assistant", " a "}, {"user", "q2"}, {"assistant", ""}});
  EXPECT_EQ(
      r.text,
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nq<|im_end|>"
      "\n<|im_start|>assistant\n a <|im_end|>\n<|im_start|>user\nq2<|im_end|>\n"
      "<|im_start|>assistant\n<|im_end|>\n");
  ASSERT_EQ(r.loss_spans.size(), 2u);
  EXPECT_EQ(r.text.substr(r.loss_spans[0].first, r.loss_spans[0].second - r.loss_spans[0].first),
            " a <|im_end|>");
  EXPECT_EQ(r.text.substr(r.loss_spans[1].first, r.loss_spans[1].second - r.loss_spans[1].first),
            "<|im_end|>");
  const RenderedChat s = renderChat(t, {{"system", "S"}, {"user", "q"}});
  EXPECT_EQ(s.text, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n");
  EXPECT_TRUE(s.loss_spans.empty());
}

TEST(ChatTemplate, SpanTargetsMarkEveryTokenOverlappingASpan) {
  // Tokens [0,3) [3,5) [5,9) [9,10) [10,12) [12,12); spans [4,9) and [10,11).
  const std::vector<size_t> ends = {3, 5, 9, 10, 12, 12};
  EXPECT_EQ(spanTargets(ends, {{4, 9}, {10, 11}}), (std::vector<uint8_t>{0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(spanTargets(ends, {{3, 5}}), (std::vector<uint8_t>{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(spanTargets(ends, {}), (std::vector<uint8_t>(6, 0)));
}

std::string messagesError(const nlohmann::json& messages) {
  try {
    parseMessages(nlohmann::json{{"messages", messages}}, "d.jsonl:7");
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exitCode(), 2);
    return e.what();
  }
  return "no error";
}

TEST(ChatTemplate, MalformedMessagesNameTheLineAndTheMessage) {
  using J = nlohmann::json;
  EXPECT_NE(messagesError(J::array({{{"role", "tool"}, {"content", "x"}}}))
                .find("d.jsonl:7: key 'data.source': messages[0] has role \"tool\""),
            std::string::npos);
  EXPECT_NE(messagesError(J::array({{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}}}))
                .find("messages[1] (role \"assistant\") has no \"content\" string"),
            std::string::npos);
  EXPECT_NE(messagesError(J::array({{{"role", "user"}, {"content", 3}}})).find("(a JSON number)"),
            std::string::npos);
  EXPECT_NE(messagesError(J::array({{{"content", "x"}}})).find("messages[0] has no \"role\""),
            std::string::npos);
  EXPECT_NE(messagesError(J::array()).find("an empty list"), std::string::npos);
  EXPECT_NE(messagesError("hi").find("\"messages\" is a JSON string"), std::string::npos);
  EXPECT_NE(messagesError(J::array({"hi"})).find("messages[0] is a JSON string"),
            std::string::npos);
}

}  // namespace
}  // namespace ftb
