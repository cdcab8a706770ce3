// kvbench generate --model PATH (--prompt STR | --prompt-file FILE) [--chat] [--system STR]
//                  [--max-new-tokens N] [--policy P --budget B [--params JSON]] [--question STR]
//                  [--stop STR]... [--device cpu|cuda|auto] [--json]
// Greedy generation on the chosen engine (auto: the GPU when present). With --question the prompt
// mode is question-agnostic: the prompt (the context) is prefilled and compressed, then the
// question is appended; otherwise the whole prompt is compressed (query-aware).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "common/errors.h"
#include "engine/batch_generation.h"
#include "engine/chat_template.h"
#include "engine/engine_factory.h"
#include "engine/generation.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/commands/cpu_options.h"
#include "policies/registry.h"

namespace kvb::cli {
namespace {

// The chat template of the model: from the file's own jinja template when there is one.
const ChatTemplate& template_for(const std::string& model_path, const LoadedModel& model) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(model_path) && fs::path(model_path).extension() == ".gguf")
    return chat_template(chat_template_name_for(*GgufFile::open(model_path)));
  if (fs::is_directory(model_path))
    return chat_template(chat_template_name_for_hf_folder(model_path));
  return chat_template(model.chat_template);
}

// The model's tokenizer; built from the model path when the loader did not provide one.
std::shared_ptr<const Tokenizer> tokenizer_for(const std::string& model_path,
                                               const LoadedModel& model) {
  if (model.tokenizer) return model.tokenizer;
  return tokenizer_from_path(model_path);
}

std::string prompt_text(const Args& args) {
  if (!args.has("prompt-file")) return args.get("prompt");
  if (args.has("prompt"))
    throw InputError("kvbench generate: give --prompt or --prompt-file, not both");
  std::ifstream file(args.get("prompt-file"), std::ios::binary);
  if (!file)
    throw InputError("kvbench generate: cannot read --prompt-file " + args.get("prompt-file"));
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

struct PromptText {
  std::string context;   // compressed part (the whole prompt in query-aware mode)
  std::string question;  // appended after compression; empty in query-aware mode
};

// With a question the user turn is "prompt\n\nquestion"; the rendered text is split where the
// question starts, so that the template's closing markers travel with the question.
PromptText render_prompt(const Args& args, const LoadedModel& model) {
  const std::string prompt = prompt_text(args);
  const std::string question = args.get_or("question", "");
  const std::string user = question.empty() ? prompt : prompt + "\n\n" + question;
  if (!args.flag("chat")) return {question.empty() ? prompt : prompt + "\n\n", question};
  const ChatTemplate& chat = template_for(args.get("model"), model);
  std::optional<std::string> system = args.maybe("system");
  const std::string text = system ? apply_chat_template(chat, user, std::string_view(*system))
                                  : apply_chat_template(chat, user);
  if (question.empty()) return {text, ""};
  const size_t at = text.rfind(question);
  if (at == std::string::npos)
    throw InputError(
        "kvbench generate: the chat template altered the question text; use --question without "
        "--chat");
  return {text.substr(0, at), text.substr(at)};
}

std::vector<TokenId> encode(const Tokenizer& tokenizer, const std::string& text, bool chat,
                            bool first_part) {
  if (text.empty()) return {};
  const bool bos = first_part && !chat && tokenizer.adds_bos_by_default();
  return tokenizer.encode(text, bos, /*parse_special=*/chat);
}

}  // namespace

int generate(const std::vector<std::string>& argv) {
  Args args("generate", argv, {"json", "chat"});
  args.allow_only(
      with_cpu_options({"model", "prompt", "prompt-file", "chat", "system", "max-new-tokens",
                        "policy", "budget", "params", "question", "stop", "device", "json"}));
  const ThreadLimit threads(args);
  GenerationOptions options;
  options.max_new_tokens = args.get_int("max-new-tokens", 64);
  if (options.max_new_tokens < 1)
    throw InputError("kvbench generate: --max-new-tokens must be >= 1");
  const std::string policy = args.get_or("policy", "full");
  std::optional<Budget> budget;
  if (auto text = args.maybe("budget")) budget = Budget::parse(*text);
  nlohmann::json params = nlohmann::json::object();
  if (auto text = args.maybe("params")) {
    try {
      params = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& e) {
      throw InputError("kvbench generate: --params is not valid JSON (" + std::string(e.what()) +
                       ")");
    }
  }
  CachePlan plan = make_cache_plan(policy, params, budget);

  const std::string device = resolve_device(args.get_or("device", "auto"));
  // On the GPU the weights go from the file to the device, with no f32 copy on the host.
  const LoadedModel model = load_model(
      args.get("model"),
      {.weights_on_host = device != "cuda", .weight_format = weight_format_option(args)});
  const std::shared_ptr<const Tokenizer> tokenizer = tokenizer_for(args.get("model"), model);
  const PromptText prompt = render_prompt(args, model);
  const bool chat = args.flag("chat");
  if (chat) {
    const ChatTemplate& chat_format = template_for(args.get("model"), model);
    options.stop_strings = chat_format.stop_strings;
  }
  for (const auto& stop : args.all("stop")) options.stop_strings.push_back(stop);
  const std::vector<TokenId> context_ids = encode(*tokenizer, prompt.context, chat, true);
  const std::vector<TokenId> question_ids = encode(*tokenizer, prompt.question, chat, false);

  const std::unique_ptr<Engine> engine =
      make_engine(device, *model.weights, cpu_engine_options(args));
  engine->check_plan(plan);
  const GenerationResult r = generate_cells(*engine, tokenizer.get(), context_ids, question_ids,
                                            {CellRequest{&plan, options}})
                                 .front();

  const std::string mode = question_ids.empty() ? "query-aware" : "question-agnostic";
  if (args.flag("json")) {
    nlohmann::json out = {{"text", r.text},
                          {"output_ids", r.output_ids},
                          {"stop_reason", r.stop_reason},
                          {"policy", plan.label.empty() ? policy : plan.label},
                          {"budget", budget ? budget->to_string() : ""},
                          {"budget_tokens", r.budget_tokens},
                          {"prompt_mode", mode},
                          {"prompt_tokens", r.prompt_tokens},
                          {"compressed_tokens", r.compressed_tokens},
                          {"output_tokens", r.output_tokens},
                          {"ttft_ms", r.ttft_ms},
                          {"tpot_ms", r.tpot_ms},
                          {"prefill_ms", r.prefill_ms},
                          {"compress_ms", r.compress_ms},
                          {"decode_ms", r.decode_ms},
                          {"kv_bytes_full", r.kv_bytes_full},
                          {"kv_bytes", r.kv_bytes},
                          {"kv_bytes_end", r.kv_bytes_end},
                          {"peak_rss_bytes", r.peak_rss_bytes},
                          {"backend", engine->backend_name()}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%s\n", r.text.c_str());
  std::fprintf(stderr,
               "[%s, %s] prompt %d tokens, output %d tokens (%s); TTFT %.1f ms (prefill %.1f, "
               "compress %.1f), TPOT %.2f ms; KV %.2f MB of %.2f MB\n",
               plan.label.empty() ? policy.c_str() : plan.label.c_str(), mode.c_str(),
               r.prompt_tokens, r.output_tokens, r.stop_reason.c_str(), r.ttft_ms, r.prefill_ms,
               r.compress_ms, r.tpot_ms, r.kv_bytes / 1e6, r.kv_bytes_full / 1e6);
  return 0;
}

}  // namespace kvb::cli
