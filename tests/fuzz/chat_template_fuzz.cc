// libFuzzer target for chat templates (engine/chat_template.cc). Byte 0 picks the mode:
//   0: render: byte 1 picks the template, the rest is "user\0system" (no NUL: the default system);
//      the rendered prompt must hold the user text (trimmed for the Llama-3 templates) and the
//      given system text;
//   1: the template of an HF folder: the rest is "tokenizer_config.json\0config.json";
//   2: the template named by jinja text, an architecture and a model name ("a\0b\0c").
// The chosen name must be one chat_template() accepts; bad files raise InputError / FormatError.
// Seeds: make_fuzz_seeds.cc (official chat_template texts' markers, tokenizer_config.json files).
#include <cstddef>
#include <cstdint>

#include "engine/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::vector<std::string_view> split_nul(std::string_view text, size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const size_t nul = text.find('\0');
    if (nul == std::string_view::npos) break;
    out.push_back(text.substr(0, nul));
    text.remove_prefix(nul + 1);
  }
  out.push_back(text);
  return out;
}

void check_name(const std::string& name) {
  (void)kvb::chat_template(name);  // throws InputError for a name it does not know
}

std::string trimmed(std::string_view text) {  // jinja's |trim, as the Llama-3 templates apply it
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  return std::string(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view rest = kvb::fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      static const std::vector<std::string> names = kvb::chat_template_names();
      const kvb::ChatTemplate& chat = kvb::chat_template(names[data[1] % names.size()]);
      const auto parts = split_nul(rest.substr(1), 2);
      const std::string_view user = parts[0];
      const std::optional<std::string_view> system =
          parts.size() > 1 ? std::optional<std::string_view>(parts[1]) : std::nullopt;
      const std::string out = kvb::apply_chat_template(chat, user, system);
      const bool trims = chat.name.rfind("llama3", 0) == 0;
      const std::string want_user = trims ? trimmed(user) : std::string(user);
      if (out.find(want_user) == std::string::npos)
        kvb::fuzz::violated(chat.name + ": the rendered prompt lost the user message");
      if (system) {
        const std::string want_system = trims ? trimmed(*system) : std::string(*system);
        if (out.find(want_system) == std::string::npos)
          kvb::fuzz::violated(chat.name + ": the rendered prompt lost the system message");
      }
      break;
    }
    case 1: {
      const auto parts = split_nul(rest, 2);
      const auto folder = kvb::fuzz::scratch_dir() / "chat";
      std::filesystem::remove_all(folder);
      std::filesystem::create_directories(folder);
      kvb::fuzz::write_file(folder / "tokenizer_config.json", parts[0]);
      if (parts.size() > 1) kvb::fuzz::write_file(folder / "config.json", parts[1]);
      kvb::fuzz::accepts(
          [&] { check_name(kvb::chat_template_name_for_hf_folder(folder.string())); });
      break;
    }
    default: {
      const auto parts = split_nul(rest, 3);
      check_name(kvb::chat_template_name_for(parts[0], parts.size() > 1 ? parts[1] : "",
                                             parts.size() > 2 ? parts[2] : ""));
    }
  }
  return 0;
}
