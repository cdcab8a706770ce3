#include "engine/generation.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>

#include "common/errors.h"
#include "kernels/cpu/transformer_ops.h"

namespace kvb {
namespace {

using Clock = std::chrono::steady_clock;

double milliseconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// Position of the earliest stop string in `text`, or npos.
size_t find_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const auto& stop : stops)
    if (!stop.empty()) first = std::min(first, text.find(stop));
  return first;
}

}  // namespace

TokenId argmax(const std::vector<float>& logits) {
  int32_t next = 0;
  kernels::argmax_rows(logits.data(), 1, static_cast<int>(logits.size()), &next);
  return next;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

Generator::Generator(InferenceEngine& engine, const Tokenizer* tokenizer)
    : engine_(engine), tokenizer_(tokenizer) {}

PrefillSnapshot Generator::prefill(const std::vector<TokenId>& ids, const CaptureRequest& request) {
  if (ids.empty()) throw InputError("the prompt is empty (no tokens to prefill)");
  const auto start = Clock::now();
  PrefillSnapshot snapshot;
  snapshot.store = engine_.make_store();
  snapshot.request = request;
  snapshot.length = static_cast<int>(ids.size());
  snapshot.last_logits = engine_.forward_chunk(ids, snapshot.store, request, &snapshot.capture, 0);
  snapshot.prefill_ms = milliseconds_between(start, Clock::now());
  return snapshot;
}

int budget_tokens_for(const CachePlan& plan, int length) {
  if (!plan.budget) return 0;
  const int budget = plan.budget->tokens_for(length);
  if (budget <= 0)
    throw InputError("budget " + plan.budget->to_string() + " of a " + std::to_string(length) +
                     "-token prompt is 0 tokens; use a larger budget");
  if (budget > length)
    throw InputError("budget " + plan.budget->to_string() + " is larger than the prompt (" +
                     std::to_string(length) + " tokens); use a budget <= the prompt length");
  return budget;
}

KeptIndices select_kept(
    const CachePlan& plan, const PrefillCapture& captured,
    const std::function<PrefillView(const PrefillCapture&, const CaptureRequest&)>& view_of,
    const ModelConfig& config, int budget) {
  const CaptureRequest wanted = plan.prefill->capture();
  check_captures(captured, wanted, plan.prefill->name());
  // The captures of every cell's policy together: each reads its own window's rows (the last w of
  // the widest) and statistics, so nothing is copied per cell.
  KeptIndices kept = plan.prefill->select(view_of(captured, wanted), budget);
  if (static_cast<int>(kept.size()) != config.n_layers)
    throw std::logic_error("policy '" + plan.prefill->name() + "' returned kept indices for " +
                           std::to_string(kept.size()) + " layers, expected " +
                           std::to_string(config.n_layers));
  return kept;
}

int max_new_tokens_within_context(const ModelConfig& config, int prompt_tokens,
                                  const GenerationOptions& options) {
  if (options.max_new_tokens < 1)
    throw InputError("max new tokens must be >= 1 (got " + std::to_string(options.max_new_tokens) +
                     ")");
  // Generation stops when the context is full: the last sampled token needs no position.
  const int max_context = config.max_context;
  if (max_context > 0 && prompt_tokens > max_context)
    throw CapacityError("the prompt has " + std::to_string(prompt_tokens) + " tokens but " +
                        config.name + " has a context of " + std::to_string(max_context) +
                        " tokens; shorten the prompt");
  return max_context > 0 ? std::min(options.max_new_tokens, max_context - prompt_tokens + 1)
                         : options.max_new_tokens;
}

void Generator::compress(PrefillSnapshot& snapshot, CachePlan& plan, int spare_tokens,
                         GenerationResult& result) const {
  result.compressed_tokens = snapshot.length;
  result.budget_tokens = budget_tokens_for(plan, snapshot.length);
  if (!plan.budget || !plan.prefill) return;
  const ModelConfig& c = engine_.config();
  // The policies read float pointers: a 16-bit prompt is widened for them and narrowed back once
  // compacted (docs/engine.md §3.1.1).
  snapshot.store.widen();
  const KeptIndices kept = select_kept(
      plan, snapshot.capture,
      [&](const PrefillCapture& captures, const CaptureRequest& wanted) {
        return make_prefill_view(engine_.weights(), &snapshot.store, captures, wanted);
      },
      c, result.budget_tokens);
  for (int l = 0; l < c.n_layers; ++l) snapshot.store.compact(l, kept[l], spare_tokens);
  snapshot.store.narrow();
  // The captures (window queries, column sums) are no longer needed: free them.
  snapshot.capture = PrefillCapture{};
}

bool StopRule::is_stop_token(TokenId id) const {
  if (std::find(options_.extra_stop_ids.begin(), options_.extra_stop_ids.end(), id) !=
      options_.extra_stop_ids.end())
    return true;
  return options_.stop_at_end_of_generation && tokenizer_ != nullptr &&
         tokenizer_->is_end_of_generation(id);
}

bool StopRule::has_stop_string(const std::vector<TokenId>& output_ids) const {
  if (tokenizer_ == nullptr || options_.stop_strings.empty()) return false;
  return find_stop(tokenizer_->decode(output_ids, true), options_.stop_strings) !=
         std::string::npos;
}

std::string StopRule::final_text(const std::vector<TokenId>& output_ids) const {
  if (tokenizer_ == nullptr) return "";
  std::string text = tokenizer_->decode(output_ids, true);
  const size_t cut = find_stop(text, options_.stop_strings);
  if (cut != std::string::npos) text.resize(cut);
  return text;
}

GenerationResult Generator::continue_generation(PrefillSnapshot snapshot, CachePlan& plan,
                                                const std::vector<TokenId>& question_ids,
                                                const GenerationOptions& options) {
  const auto start = Clock::now();
  GenerationResult result;
  result.prompt_tokens = snapshot.length + static_cast<int>(question_ids.size());
  result.kv_bytes_full = snapshot.store.kv_bytes();
  const int max_new_tokens =
      max_new_tokens_within_context(engine_.config(), result.prompt_tokens, options);

  plan.early_exit_stats = {};
  plan.early_exit_oracle = {};
  const int spare = max_new_tokens + static_cast<int>(question_ids.size());
  compress(snapshot, plan, spare, result);
  const auto compressed = Clock::now();
  result.compress_ms = milliseconds_between(start, compressed);
  result.kv_bytes = snapshot.store.kv_bytes();

  std::vector<float> logits = std::move(snapshot.last_logits);
  double question_ms = 0;
  if (!question_ids.empty()) {
    logits = engine_.forward_chunk(question_ids, snapshot.store, CaptureRequest{}, nullptr,
                                   snapshot.length);
    question_ms = milliseconds_between(compressed, Clock::now());
  }
  result.prefill_ms = snapshot.prefill_ms + question_ms;
  KvStore& store = snapshot.store;
  const int budget = result.budget_tokens > 0 ? result.budget_tokens : snapshot.length;
  start_decode_policies(plan, store, result.prompt_tokens, budget);

  TokenId token = argmax(logits);
  const auto first_token = Clock::now();
  result.ttft_ms = snapshot.prefill_ms + milliseconds_between(start, first_token);
  int sampled = 1;
  int position = result.prompt_tokens;
  result.stop_reason = "max_new_tokens";
  const StopRule stops(tokenizer_, options);
  for (int step = 0;; ++step) {
    if (stops.is_stop_token(token)) {
      result.stop_reason = "eos";
      break;
    }
    result.output_ids.push_back(token);
    if (stops.has_stop_string(result.output_ids)) {
      result.stop_reason = "stop_string";
      break;
    }
    if (static_cast<int>(result.output_ids.size()) >= max_new_tokens) {
      if (max_new_tokens < options.max_new_tokens) result.stop_reason = "context_full";
      break;
    }
    logits = engine_.decode_step(token, position, step, store, plan);
    ++position;
    token = argmax(logits);
    ++sampled;
  }
  const auto end = Clock::now();
  result.output_tokens = sampled;
  result.decode_ms = milliseconds_between(first_token, end);
  result.tpot_ms = sampled > 1 ? result.decode_ms / (sampled - 1) : 0.0;
  result.text = stops.final_text(result.output_ids);
  result.kv_bytes_end = store.kv_bytes();
  result.kv_blocks_visited = plan.early_exit_stats.blocks_visited;
  result.kv_blocks_total = plan.early_exit_stats.blocks_total;
  result.early_exit_oracle = plan.early_exit_oracle;
  result.peak_rss_bytes = peak_rss_bytes();
  return result;
}

GenerationResult Generator::generate(const std::vector<TokenId>& prompt_ids, CachePlan& plan,
                                     const GenerationOptions& options,
                                     const std::vector<TokenId>& question_ids) {
  CaptureRequest request;
  if (plan.prefill) request = plan.prefill->capture();
  // Check the context before the (possibly long) prefill.
  max_new_tokens_within_context(engine_.config(),
                                static_cast<int>(prompt_ids.size() + question_ids.size()), options);
  return continue_generation(prefill(prompt_ids, request), plan, question_ids, options);
}

}  // namespace kvb
