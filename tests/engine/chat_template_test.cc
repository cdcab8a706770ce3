// Chat templates against the official templates rendered for one user turn (the expected strings
// are those templates' output, written out by hand from their jinja; sources in chat_template.cc)
// and against the SmolLM2 GGUF's own tokenizer.chat_template.
#include "engine/chat_template.h"

#include <gtest/gtest.h>

#include "common/errors.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

TEST(ChatTemplate, SmolLm2AddsItsDefaultSystemTurn) {
  EXPECT_EQ(apply_chat_template(chat_template("chatml-smollm2"), "Hi"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A given system message replaces the default, as in the jinja (messages[0] is a system turn).
  EXPECT_EQ(apply_chat_template(chat_template("chatml-smollm2"), "Hi", "Be brief."),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen2AndGenericChatml) {
  EXPECT_EQ(apply_chat_template(chat_template("chatml-qwen2"), "Q"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template(chat_template("chatml"), "Q"),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3FamilyTrimsContent) {
  EXPECT_EQ(apply_chat_template(chat_template("llama3"), " Q \n"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(chat_template("llama3"), "Q", "S"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(chat_template("llama3.1"), "Q"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, MistralVersionsDifferInTheSpaceBeforeTheClosingTag) {
  EXPECT_EQ(apply_chat_template(chat_template("mistral"), "Q"), "<s>[INST] Q[/INST]");
  EXPECT_EQ(apply_chat_template(chat_template("mistral"), "Q", "S"), "<s>[INST] S\n\nQ[/INST]");
  EXPECT_EQ(apply_chat_template(chat_template("mistral-v0.2"), "Q"), "<s>[INST] Q [/INST]");
  EXPECT_EQ(apply_chat_template(chat_template("plain"), "Q"), "Q");
  EXPECT_EQ(apply_chat_template(chat_template("plain"), "Q", "S"), "S\n\nQ");
}

TEST(ChatTemplate, StopStringsAndUnknownNames) {
  EXPECT_EQ(chat_template("llama3").stop_strings.front(), "<|eot_id|>");
  EXPECT_EQ(chat_template("chatml-smollm2").stop_strings.front(), "<|im_end|>");
  EXPECT_TRUE(chat_template("plain").stop_strings.empty());
  try {
    chat_template("vicuna");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("vicuna"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("chatml-smollm2"), std::string::npos);
  }
  for (const std::string& name : chat_template_names()) EXPECT_EQ(chat_template(name).name, name);
}

TEST(ChatTemplate, PicksTheTemplateFromMetadata) {
  EXPECT_EQ(chat_template_name_for("{{'<|im_start|>' + ... 'You are Qwen, created by'", "", ""),
            "chatml-qwen2");
  EXPECT_EQ(chat_template_name_for("... '<|start_header_id|>' ...", "llama", ""), "llama3");
  EXPECT_EQ(chat_template_name_for("Cutting Knowledge Date <|start_header_id|>", "llama", ""),
            "llama3.1");
  EXPECT_EQ(chat_template_name_for(R"({{ "[INST] " + message["content"] + "[/INST]" }})", "", ""),
            "mistral");
  EXPECT_EQ(chat_template_name_for("{{ '[INST] ' + message['content'] + ' [/INST]' }}", "", ""),
            "mistral-v0.2");
  EXPECT_EQ(chat_template_name_for("", "qwen2", "Qwen2.5 7B Instruct 1M"), "chatml-qwen2");
  EXPECT_EQ(chat_template_name_for("", "llama", "Meta Llama 3.1 8B Instruct"), "llama3.1");
  EXPECT_EQ(chat_template_name_for("", "llama", "Mistral-7B-Instruct-v0.3"), "mistral");
  EXPECT_EQ(chat_template_name_for("", "gpt2", "gpt-2"), "plain");
}

// The SmolLM2 GGUF's own jinja selects chatml-smollm2, and our rendering holds the exact default
// system text that jinja contains.
TEST(ChatTemplate, SmolLm2GgufSelectsItsTemplate) {
  KVB_REQUIRE_FILE(test::default_model_path());
  const auto gguf = GgufFile::open(test::default_model_path());
  EXPECT_EQ(chat_template_name_for(*gguf), "chatml-smollm2");
  const std::string jinja = gguf->get_string("tokenizer.chat_template");
  const std::string system_turn =
      "<|im_start|>system\n" + chat_template("chatml-smollm2").default_system + "<|im_end|>\n";
  EXPECT_NE(jinja.find(system_turn), std::string::npos);
  // The rendered prompt tokenizes with its markers as single special tokens.
  const auto tokenizer = tokenizer_from_gguf(*gguf);
  const auto ids = tokenizer->encode(apply_chat_template(chat_template("chatml-smollm2"), "Hi"),
                                     false, /*parse_special=*/true);
  EXPECT_EQ(tokenizer->token_text(ids.front()), "<|im_start|>");
  EXPECT_EQ(tokenizer->decode({ids.end() - 4, ids.end()}),
            "<|im_start|>assistant\n");  // "assistant" is 2 tokens
}

}  // namespace
}  // namespace kvb
