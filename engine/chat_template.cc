#include "engine/chat_template.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "common/strings.h"
#include "engine/gguf.h"

namespace kvb {
namespace {

const std::vector<ChatTemplate>& all_templates() {
  static const std::vector<ChatTemplate> kTemplates = {
      // HuggingFaceTB/SmolLM2-135M-Instruct tokenizer_config.json chat_template (the same text is
      // in the model GGUF's tokenizer.chat_template): a system turn with this default is added
      // when the first message is not a system message.
      {"chatml-smollm2",
       "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
       {"<|im_end|>", "<|endoftext|>"}},
      // Qwen/Qwen2.5-7B-Instruct tokenizer_config.json chat_template: same rule, Qwen's default.
      {"chatml-qwen2",
       "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
       {"<|im_end|>", "<|endoftext|>"}},
      {"chatml", "", {"<|im_end|>"}},
      // Meta-Llama-3-8B-Instruct chat_template: no default system turn, content trimmed.
      {"llama3", "", {"<|eot_id|>", "<|end_of_text|>"}},
      // Llama-3.1-8B-Instruct chat_template: the system turn always opens with the knowledge
      // cut-off and the template's default date_string ("26 Jul 2024").
      {"llama3.1", "", {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}},
      // mistralai/Mistral-7B-Instruct-v0.3 chat_template: "[INST] " + system + "\n\n" + user +
      // "[/INST]" (the system message joins the last user turn).
      {"mistral", "", {"</s>"}},
      // Mistral-7B-Instruct v0.1/v0.2 (and MegaBeam-Mistral-7B-512K): "[INST] " + user + "
      // [/INST]".
      {"mistral-v0.2", "", {"</s>"}},
      {"plain", "", {}},
  };
  return kTemplates;
}

std::string trimmed(std::string_view text) {  // jinja's |trim: leading and trailing whitespace
  const auto is_space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return std::string(text);
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace

std::vector<std::string> chat_template_names() {
  std::vector<std::string> names;
  for (const ChatTemplate& chat : all_templates()) names.push_back(chat.name);
  return names;
}

const ChatTemplate& chat_template(std::string_view name) {
  for (const ChatTemplate& chat : all_templates())
    if (chat.name == name) return chat;
  const std::string known = join(chat_template_names(), ", ");
  throw InputError("unknown chat template '" + std::string(name) + "' (known: " + known + ")");
}

std::string apply_chat_template(const ChatTemplate& chat, std::string_view user,
                                std::optional<std::string_view> system) {
  const std::string_view name = chat.name;
  const std::optional<std::string_view> system_text =
      system ? system
             : (chat.default_system.empty() ? std::nullopt
                                            : std::optional<std::string_view>(chat.default_system));
  std::string out;
  if (name.substr(0, 6) == "chatml") {
    if (system_text) out += "<|im_start|>system\n" + std::string(*system_text) + "<|im_end|>\n";
    out += "<|im_start|>user\n" + std::string(user) + "<|im_end|>\n<|im_start|>assistant\n";
    return out;
  }
  if (name == "llama3" || name == "llama3.1") {
    out = "<|begin_of_text|>";
    if (name == "llama3.1") {
      out +=
          "<|start_header_id|>system<|end_header_id|>\n\n"
          "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
      out += system_text ? trimmed(*system_text) : "";
      out += "<|eot_id|>";
    } else if (system_text) {
      out +=
          "<|start_header_id|>system<|end_header_id|>\n\n" + trimmed(*system_text) + "<|eot_id|>";
    }
    out += "<|start_header_id|>user<|end_header_id|>\n\n" + trimmed(user) +
           "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  const std::string joined =
      system_text ? std::string(*system_text) + "\n\n" + std::string(user) : std::string(user);
  if (name == "mistral") return "<s>[INST] " + joined + "[/INST]";
  if (name == "mistral-v0.2") return "<s>[INST] " + joined + " [/INST]";
  return joined;  // plain
}

std::string chat_template_name_for(std::string_view jinja, std::string_view architecture,
                                   std::string_view model_name) {
  if (contains(jinja, "<|start_header_id|>"))
    return contains(jinja, "Cutting Knowledge Date") ? "llama3.1" : "llama3";
  if (contains(jinja, "<|im_start|>")) {
    if (contains(jinja, "You are Qwen")) return "chatml-qwen2";
    if (contains(jinja, "SmolLM")) return "chatml-smollm2";
    return "chatml";
  }
  if (contains(jinja, "[INST]"))
    return contains(jinja, "' [/INST]'") || contains(jinja, "\" [/INST]\"") ? "mistral-v0.2"
                                                                            : "mistral";
  const std::string name = lower(model_name);
  if (contains(name, "smollm")) return "chatml-smollm2";
  if (architecture == "qwen2" || contains(name, "qwen")) return "chatml-qwen2";
  if (contains(name, "llama-3.1") || contains(name, "llama 3.1") || contains(name, "llama3.1"))
    return "llama3.1";
  if (contains(name, "llama-3") || contains(name, "llama 3") || contains(name, "llama3"))
    return "llama3";
  if (contains(name, "mistral")) return "mistral";
  return "plain";
}

std::string chat_template_name_for(const GgufFile& gguf) {
  auto text = [&](const char* key) { return gguf.has(key) ? gguf.get_string(key) : ""; };
  return chat_template_name_for(text("tokenizer.chat_template"), text("general.architecture"),
                                text("general.name") + " " + text("general.basename"));
}

std::string chat_template_name_for_hf_folder(const std::string& folder) {
  namespace fs = std::filesystem;
  auto read = [&](const char* file) {
    const fs::path path = fs::path(folder) / file;
    if (!fs::exists(path)) return nlohmann::json::object();
    std::ifstream in(path);
    try {
      return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(path.string() + ": invalid JSON: " + e.what());
    }
  };
  const nlohmann::json tokenizer_config = read("tokenizer_config.json");
  const nlohmann::json config = read("config.json");
  // A field that is there must be a string (json::value() throws type_error otherwise).
  const auto string_field = [&](const nlohmann::json& object, const char* key, const char* file,
                                const std::string& where) {
    if (!object.is_object() || !object.contains(key) || object[key].is_null()) return std::string();
    if (!object[key].is_string())
      throw FormatError((fs::path(folder) / file).string() + ": " + where + key +
                        " must be a string, not " + object[key].dump());
    return object[key].get<std::string>();
  };
  std::string jinja;
  if (tokenizer_config.is_object() && tokenizer_config.contains("chat_template")) {
    const auto& value = tokenizer_config["chat_template"];
    if (value.is_string()) {
      jinja = value.get<std::string>();
    } else if (value.is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string where = "chat_template[" + std::to_string(i) + "].";
        if (!value[i].is_object())
          throw FormatError((fs::path(folder) / "tokenizer_config.json").string() + ": " +
                            where.substr(0, where.size() - 1) +
                            " must be an object {\"name\", \"template\"}, not " + value[i].dump());
        if (string_field(value[i], "name", "tokenizer_config.json", where) == "default")
          jinja = string_field(value[i], "template", "tokenizer_config.json", where);
      }
    }
  }
  return chat_template_name_for(
      jinja, string_field(config, "model_type", "config.json", ""),
      string_field(config, "_name_or_path", "config.json", "") + " " + folder);
}

}  // namespace kvb
