// Chat templates: one user turn (and an optional system turn) rendered as the model family's
// chat format, up to and including the assistant header, so generation starts with the answer.
// The rendered text holds special-token strings: tokenize it with parse_special = true and
// add_bos = false (templates that need BOS write it themselves, as their jinja does).
// Each template's text is the family's official chat_template rendered for one turn; the source
// is named beside each one in chat_template.cc.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvb {

class GgufFile;

struct ChatTemplate {
  std::string name;            // "chatml-smollm2", "chatml-qwen2", "chatml", "llama3", ...
  std::string default_system;  // used when no system message is given; "" = no system turn
  std::vector<std::string> stop_strings;  // end-of-turn markers as they appear in decoded text
};

// Names accepted by chat_template(): chatml-smollm2, chatml-qwen2, chatml, llama3, llama3.1,
// mistral (v0.3), mistral-v0.2, plain.
std::vector<std::string> chat_template_names();
// Throws InputError listing the names when `name` is unknown.
const ChatTemplate& chat_template(std::string_view name);

// The prompt text. `system`: nullopt = the template's default system prompt (if any); a given
// string (even empty) replaces it, as the official templates do with a system message.
std::string apply_chat_template(const ChatTemplate& chat, std::string_view user,
                                std::optional<std::string_view> system = std::nullopt);

// The template for a model, from its jinja chat_template text (GGUF tokenizer.chat_template or
// tokenizer_config.json) when present, else from its architecture and name; "plain" when
// nothing matches.
std::string chat_template_name_for(std::string_view jinja, std::string_view architecture,
                                   std::string_view model_name);
std::string chat_template_name_for(const GgufFile& gguf);
std::string chat_template_name_for_hf_folder(const std::string& folder);

}  // namespace kvb
