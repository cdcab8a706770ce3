#include "harness/sweep/engine_backend.h"

#include <algorithm>
#include <sstream>

#include "common/errors.h"
#include "datasets/generation.h"
#include "datasets/registry.h"
#include "engine/batch_generation.h"
#include "engine/chat_template.h"
#include "engine/engine_factory.h"
#include "engine/gguf.h"
#include "harness/sweep/benchmark_data.h"
#include "policies/registry.h"

namespace kvb {

struct EngineBackend::ModelState {
  std::string path;
  LoadedModel loaded;
  std::unique_ptr<Engine> engine;
  const ChatTemplate* chat = nullptr;
  ChatFrame frame;  // the chat template around one user message
};

namespace {

// The template's text around one user message, found by rendering a marker message.
ChatFrame frame_of(const ChatTemplate& chat) {
  const std::string marker = "\x1f\x1e";
  const std::string rendered = apply_chat_template(chat, marker);
  const size_t at = rendered.find(marker);
  if (at == std::string::npos) return ChatFrame{};
  return ChatFrame{rendered.substr(0, at), rendered.substr(at + marker.size())};
}

std::string chat_template_for_model(const std::string& path, const LoadedModel& loaded) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && path.size() > 5 &&
      path.substr(path.size() - 5) == ".gguf")
    return chat_template_name_for(*GgufFile::open(path));
  if (std::filesystem::is_directory(path, ec)) return chat_template_name_for_hf_folder(path);
  return loaded.chat_template.empty() ? "plain" : loaded.chat_template;
}

}  // namespace

EngineBackend::EngineBackend(const SweepConfig&, DataSearch data, FILE* log,
                             EngineBackendOptions options)
    : data_(std::move(data)),
      log_(log),
      options_(std::move(options)),
      device_(resolve_device(options_.device)) {}

EngineBackend::~EngineBackend() = default;

void EngineBackend::check_cells(const std::vector<SampleGroup>& groups) {
  for (const auto& group : groups)
    for (const auto& cell : group.cells) {
      const std::string key = cell.key();
      if (checked_plans_.count(key)) continue;
      try {
        checked_plans_.emplace(key, make_cache_plan(cell.plan_spec(), &plan_files_));
      } catch (const InputError& e) {
        throw InputError("policy '" + cell.policy + "' with params " + cell.params.dump() +
                         " and budget '" + cell.budget_text() + "': " + e.what());
      }
    }
}

const LoadedModel& EngineBackend::model(const std::string& path) {
  auto it = models_.find(path);
  if (it == models_.end()) {
    if (log_) std::fprintf(log_, "[kvbench run] loading %s (%s)\n", path.c_str(), device_.c_str());
    auto state = std::make_unique<ModelState>();
    state->path = path;
    // On the GPU the weights go straight to the device (a preset's generated there, a file's
    // uploaded tensor by tensor): no f32 host copy of an 8B model.
    state->loaded = load_model(
        path, {.weights_on_host = device_ != "cuda", .weight_format = options_.weight_format});
    if (!state->loaded.tokenizer && path.size() > 5 && path.substr(path.size() - 5) == ".gguf")
      state->loaded.tokenizer = tokenizer_from_gguf(*GgufFile::open(path));
    if (!state->loaded.tokenizer)
      throw InputError("model " + path + " has no tokenizer this build can read");
    state->engine = make_engine(device_, *state->loaded.weights, options_.cpu);
    state->chat = &chat_template(chat_template_for_model(path, state->loaded));
    state->frame = frame_of(*state->chat);
    it = models_.emplace(path, std::move(state)).first;
  }
  return it->second->loaded;
}

void EngineBackend::begin_group(const SampleGroup& group) {
  model(group.model_path);
  current_ = models_.at(group.model_path).get();
  const BenchmarkSpec& spec = group.benchmark;
  if (log_)
    std::fprintf(log_, "[kvbench run] %s %s/%s at %d tokens\n",
                 loads_from_files(spec, group.task) ? "loading" : "generating",
                 spec.benchmark.c_str(), group.task.c_str(), group.length);
  GroupSampleInputs inputs;
  inputs.tokenizer = current_->loaded.tokenizer.get();
  inputs.frame = current_->frame;
  inputs.data = data_;
  inputs.model_context = current_->engine->config().max_context;
  samples_ = samples_for_group(group, inputs);
}

bool EngineBackend::replays_prefill(const Cell& cell) const {
  const auto replays = [](const CachePlan& plan) {
    return !plan.prefill || plan.prefill->replays_full_prefill();
  };
  const auto checked = checked_plans_.find(cell.key());
  if (checked != checked_plans_.end()) return replays(checked->second);
  return replays(make_cache_plan(cell.plan_spec()));  // a cell check_cells() did not see
}

EngineBackend::Prompt EngineBackend::build_prompt(const Sample& sample, PromptMode mode) const {
  const Tokenizer& tokenizer = *current_->loaded.tokenizer;
  const bool chat = sample.use_chat_template;
  const ChatFrame& frame = current_->frame;
  const bool bos = !chat && tokenizer.adds_bos_by_default();
  Prompt prompt;
  if (mode == PromptMode::kQueryAware || sample.question_part.empty()) {
    const std::string user = sample.full_user_message();
    const std::string text = (chat ? frame.wrap(user) : user) + sample.answer_prefix;
    prompt.context = tokenizer.encode(text, bos, /*parse_special=*/true);
    return prompt;
  }
  // Question-agnostic: compress the context alone, then append the question (kvpress's setting).
  const std::string context = (chat ? frame.prefix : "") + sample.context_part;
  const std::string question =
      sample.question_part + (chat ? frame.suffix : "") + sample.answer_prefix;
  prompt.context = tokenizer.encode(context, bos, true);
  prompt.question = tokenizer.encode(question, false, true);
  return prompt;
}

GenerationOptions EngineBackend::options_for(const Sample& sample, const Cell& cell) const {
  GenerationOptions options;
  options.max_new_tokens = cell.max_new_tokens > 0
                               ? std::min(cell.max_new_tokens, sample.max_new_tokens)
                               : sample.max_new_tokens;
  if (sample.use_chat_template || sample.extra.value("chat_template_in_text", false))
    options.stop_strings = current_->chat->stop_strings;
  // A benchmark's own end of answer (NIAH's first line) is cut from the text by score_answer().
  return options;
}

const Sample& EngineBackend::sample_at(int sample_index) const {
  return samples_.at(sample_index % samples_.size());
}

std::vector<SampleResult> EngineBackend::run_cells(const SampleGroup&,
                                                   const std::vector<const Cell*>& cells,
                                                   int sample_index, PromptMode mode) {
  const Sample& sample = sample_at(sample_index);
  std::vector<CachePlan> plans;
  plans.reserve(cells.size());
  std::vector<CellRequest> requests;
  for (const Cell* cell : cells) {
    plans.push_back(make_cache_plan(cell->plan_spec(), &plan_files_));
    requests.push_back({&plans.back(), options_for(sample, *cell)});
  }
  const Prompt prompt = build_prompt(sample, mode);
  const bool timed_alone = sample_index < options_.latency_samples;
  const std::vector<GenerationResult> generated =
      generate_cells(*current_->engine, current_->loaded.tokenizer.get(), prompt.context,
                     prompt.question, requests,
                     BatchOptions{.batch_cells = options_.batch_cells && !timed_alone,
                                  .cells_alone = timed_alone});
  std::vector<SampleResult> results;
  for (size_t i = 0; i < cells.size(); ++i)
    results.push_back(to_result(sample, *cells[i], generated[i]));
  return results;
}

void EngineBackend::check_device(const std::vector<SampleGroup>& groups) {
  for (const auto& group : groups) {
    model(group.model_path);
    const Engine& engine = *models_.at(group.model_path)->engine;
    for (const auto& cell : group.cells) engine.check_plan(checked_plans_.at(cell.key()));
  }
}

SampleResult EngineBackend::to_result(const Sample& sample, const Cell& cell,
                                      const GenerationResult& g) const {
  SampleResult r;
  r.sample_id = sample.id;
  r.depth = sample.depth;
  const ScoredAnswer scored = score_answer(g.text, sample);
  r.prediction = scored.answer;
  r.references = sample.references;
  r.score = scored.score;
  r.ttft_ms = g.ttft_ms;
  r.tpot_ms = g.tpot_ms;
  r.prefill_ms = g.prefill_ms;
  r.compress_ms = g.compress_ms;
  r.total_ms = g.ttft_ms + g.decode_ms;
  r.tokens_in = g.prompt_tokens;
  r.tokens_out = g.output_tokens;
  const ModelConfig& config = current_->engine->config();
  // kv_bytes is measured before decode starts, so at the cache's element size: bf16 on the GPU,
  // the CPU engine's dtype (engine/cpu/cpu_backend.h's kv_bytes).
  const int element_bytes =
      current_->engine->backend_name() == "cuda" ? 2 : kv_dtype_bytes(cpu_kv_dtype(options_.cpu));
  const int64_t entry_bytes = int64_t{2} * config.head_dim * element_bytes;
  r.kv_bytes = g.kv_bytes;
  r.kept_entries = entry_bytes > 0 ? g.kv_bytes / entry_bytes : 0;
  r.peak_bytes = g.peak_rss_bytes;
  r.extra = {{"stop_reason", g.stop_reason},
             {"budget_tokens", g.budget_tokens},
             {"compressed_tokens", g.compressed_tokens},
             {"kv_bytes_full", g.kv_bytes_full},
             {"kv_bytes_end", g.kv_bytes_end},
             {"decode_ms", g.decode_ms},
             {"decode_batch", g.decode_batch},
             {"backend", current_->engine->backend_name()}};
  r.extra.update(scored.extra);  // the benchmark's metrics beside the score
  if (g.kv_blocks_total > 0) {   // ART: KV blocks walked / present over the decode steps
    r.extra["kv_blocks_visited"] = g.kv_blocks_visited;
    r.extra["kv_blocks_total"] = g.kv_blocks_total;
  }
  (void)cell;
  return r;
}

}  // namespace kvb
