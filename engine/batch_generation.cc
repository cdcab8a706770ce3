#include "engine/batch_generation.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>

#include "common/errors.h"

namespace kvb {
namespace {

using Clock = std::chrono::steady_clock;

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One cell while its batch runs.
struct CellState {
  const CellRequest* request = nullptr;
  GenerationResult result;
  int max_new_tokens = 0;
  TokenId token = 0;  // sampled, not yet checked or fed
  int position = 0;
  int step = 0;
  bool done = false;
  Clock::time_point first_token;
};

// The union of what the cells' prefill policies capture.
CaptureRequest capture_union(const std::vector<CellState*>& batch) {
  CaptureRequest request;
  for (const CellState* cell : batch)
    if (cell->request->plan->prefill) request.merge(cell->request->plan->prefill->capture());
  return request;
}

// Checks the cell's newly sampled token; false once the cell has stopped.
bool accept_token(CellState& cell, const StopRule& stops) {
  GenerationResult& r = cell.result;
  if (stops.is_stop_token(cell.token)) {
    r.stop_reason = "eos";
    return false;
  }
  r.output_ids.push_back(cell.token);
  if (stops.has_stop_string(r.output_ids)) {
    r.stop_reason = "stop_string";
    return false;
  }
  if (static_cast<int>(r.output_ids.size()) >= cell.max_new_tokens) {
    if (cell.max_new_tokens < cell.request->options.max_new_tokens) r.stop_reason = "context_full";
    return false;
  }
  return true;
}

void finish_cell(Engine& engine, const Tokenizer* tokenizer, int seq, CellState& cell) {
  GenerationResult& r = cell.result;
  CachePlan& plan = *cell.request->plan;
  engine.finish_decode(seq);
  r.decode_ms = milliseconds_since(cell.first_token);
  r.tpot_ms = r.output_tokens > 1 ? r.decode_ms / (r.output_tokens - 1) : 0.0;
  r.text = StopRule(tokenizer, cell.request->options).final_text(r.output_ids);
  r.kv_bytes_end = engine.kv_bytes(seq);
  r.kv_blocks_visited = plan.early_exit_stats.blocks_visited;
  r.kv_blocks_total = plan.early_exit_stats.blocks_total;
  r.early_exit_oracle = plan.early_exit_oracle;
  cell.done = true;
}

// Greedy steps for the cells `members` of `batch` (their sequence numbers), all in one decode call
// per step, until each has stopped.
void decode_until_done(Engine& engine, const Tokenizer* tokenizer,
                       const std::vector<CellState*>& batch, const std::vector<int>& members) {
  std::vector<DecodeInput> inputs;
  for (;;) {
    inputs.clear();
    for (int i : members) {
      CellState& cell = *batch[i];
      if (cell.done) continue;
      if (!accept_token(cell, StopRule(tokenizer, cell.request->options))) {
        finish_cell(engine, tokenizer, i, cell);
        continue;
      }
      inputs.push_back({i, cell.token, cell.position, cell.step});
    }
    if (inputs.empty()) return;
    const std::vector<TokenId> next = engine.decode(inputs);
    for (size_t k = 0; k < inputs.size(); ++k) {
      CellState& cell = *batch[inputs[k].sequence];
      cell.token = next[k];
      ++cell.position;
      ++cell.step;
      ++cell.result.output_tokens;
    }
  }
}

// Prefill, fork, compress, question and decode for cells that fit in memory together; with
// `decode_together` one batched step for all, otherwise the cells' decodes one after another.
void run_batch(Engine& engine, const Tokenizer* tokenizer, const std::vector<TokenId>& context,
               const std::vector<TokenId>& question, std::vector<CellState*>& batch,
               bool decode_together) {
  const ModelConfig& config = engine.config();
  const int length = static_cast<int>(context.size());
  const int n = static_cast<int>(batch.size());
  int spare = 0;
  for (const CellState* cell : batch)
    spare = std::max(spare, cell->max_new_tokens + static_cast<int>(question.size()));
  engine.reserve(n, length + spare);
  engine.reset_peak_memory();

  const auto prefill_start = Clock::now();
  const CaptureRequest request = capture_union(batch);
  PrefillCapture captured;
  const std::vector<float> logits = engine.prefill(0, context, request, captured);
  for (int i = 1; i < n; ++i) engine.fork(0, i);
  const double prefill_ms = milliseconds_since(prefill_start);
  const int64_t kv_bytes_full = engine.kv_bytes(0);

  // Every cell selects from sequence 0 before any sequence is compacted.
  KvStore host_copy;
  std::vector<KeptIndices> kept(n);
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    CellState& cell = *batch[i];
    CachePlan& plan = *cell.request->plan;
    plan.early_exit_stats = {};
    plan.early_exit_oracle = {};
    cell.result.compressed_tokens = length;
    cell.result.budget_tokens = budget_tokens_for(plan, length);
    if (plan.budget && plan.prefill)
      kept[i] = select_kept(
          plan, captured,
          [&](const PrefillCapture& captures, const CaptureRequest& wanted) {
            return engine.prefill_view(0, captures, wanted, host_copy);
          },
          config, cell.result.budget_tokens);
    cell.result.compress_ms = milliseconds_since(start);
  }
  host_copy = KvStore();
  captured = PrefillCapture();
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    if (!kept[i].empty()) engine.compact(i, kept[i], spare);
    batch[i]->result.compress_ms += milliseconds_since(start);
    batch[i]->result.kv_bytes = engine.kv_bytes(i);  // after compression, before the question
  }

  std::vector<int> sequences(n);
  std::iota(sequences.begin(), sequences.end(), 0);
  std::vector<TokenId> first(n, argmax(logits));
  double question_ms = 0;
  if (!question.empty()) {
    const auto start = Clock::now();
    first = engine.extend(sequences, question, length);
    question_ms = milliseconds_since(start);
  }
  const int prompt_tokens = length + static_cast<int>(question.size());
  for (int i = 0; i < n; ++i) {  // a CPU selector builds its codes or pages here
    const auto start = Clock::now();
    CellState& cell = *batch[i];
    const int budget = cell.result.budget_tokens > 0 ? cell.result.budget_tokens : length;
    engine.start_decode(i, *cell.request->plan, prompt_tokens, budget);
    cell.result.compress_ms += milliseconds_since(start);
  }
  const auto prepare_start = Clock::now();
  engine.prepare_decode();  // the batch's decode-time method (a selector's codes or pages)
  const double prepare_ms = milliseconds_since(prepare_start);
  const auto first_token = Clock::now();
  for (int i = 0; i < n; ++i) {
    CellState& cell = *batch[i];
    GenerationResult& r = cell.result;
    r.prompt_tokens = prompt_tokens;
    r.kv_bytes_full = kv_bytes_full;
    r.prefill_ms = prefill_ms + question_ms;
    r.compress_ms += prepare_ms;
    r.ttft_ms = prefill_ms + r.compress_ms + question_ms;
    r.decode_batch = decode_together ? n : 1;
    r.stop_reason = "max_new_tokens";
    r.output_tokens = 1;
    cell.first_token = first_token;
    cell.token = first[i];
    cell.position = prompt_tokens;
  }

  if (decode_together) {
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    decode_until_done(engine, tokenizer, batch, all);
  } else {
    for (int i = 0; i < n; ++i) {
      batch[i]->first_token = Clock::now();  // its decode starts when the previous cell's ends
      decode_until_done(engine, tokenizer, batch, {i});
    }
  }
  const int64_t peak = engine.peak_memory_bytes();
  for (CellState* cell : batch) cell->result.peak_rss_bytes = peak;
}

}  // namespace

std::string decode_group_of(const CachePlan& plan) {
  std::string group;
  // A selector or a decode eviction is stateful and parametrised beyond its label: its own group.
  if (plan.selector || plan.decode_eviction)
    group = "plan@" + std::to_string(reinterpret_cast<uintptr_t>(&plan));
  if (plan.early_exit) {
    const EarlyExitParams& p = *plan.early_exit;
    char text[200];
    std::snprintf(text, sizeof(text), "|art:%g,%g,%d,%d,%d,%s,%d%d%d,%d,%d,%g", p.tau, p.phi,
                  p.patience, p.block_size, p.sink_tokens, p.scale_criterion.c_str(),
                  p.use_scale ? 1 : 0, p.use_direction ? 1 : 0, p.per_head ? 1 : 0,
                  p.decision_window, p.enabled ? 1 : 0, p.oracle_tolerance);
    group += text;
  }
  return group;
}

std::vector<GenerationResult> generate_cells(Engine& engine, const Tokenizer* tokenizer,
                                             const std::vector<TokenId>& context,
                                             const std::vector<TokenId>& question,
                                             const std::vector<CellRequest>& cells,
                                             const BatchOptions& options) {
  if (context.empty()) throw InputError("the prompt is empty (no tokens to prefill)");
  const int prompt_tokens = static_cast<int>(context.size() + question.size());
  std::vector<CellState> states(cells.size());
  std::map<std::string, std::vector<CellState*>> groups;
  int longest_new = 0;
  for (size_t i = 0; i < cells.size(); ++i) {
    states[i].request = &cells[i];
    states[i].max_new_tokens =
        max_new_tokens_within_context(engine.config(), prompt_tokens, cells[i].options);
    longest_new = std::max(longest_new, states[i].max_new_tokens);
    engine.check_plan(*cells[i].plan);
    // Cells decoded one at a time share the prefill and the batch all the same: a decode step
    // computes only the sequences it is given (engine/engine.h), on every backend.
    const std::string key =
        options.cells_alone ? "alone" + std::to_string(i) : decode_group_of(*cells[i].plan);
    groups[key].push_back(&states[i]);
  }
  const int capacity =
      static_cast<int>(context.size()) + longest_new + static_cast<int>(question.size());
  for (auto& [key, members] : groups) {
    int fits = std::max(1, engine.max_sequences(capacity));
    for (size_t begin = 0; begin < members.size();) {
      const size_t count = std::min(members.size() - begin, static_cast<size_t>(fits));
      std::vector<CellState*> batch(members.begin() + begin, members.begin() + begin + count);
      try {
        run_batch(engine, tokenizer, context, question, batch, options.batch_cells);
      } catch (const CapacityError&) {
        if (count == 1) throw;
        fits = static_cast<int>(count / 2);  // the estimate was optimistic: split further
        for (CellState* cell : batch) *cell = CellState{cell->request, {}, cell->max_new_tokens};
        continue;
      }
      begin += count;
    }
  }
  std::vector<GenerationResult> results;
  results.reserve(states.size());
  for (auto& state : states) results.push_back(std::move(state.result));
  return results;
}

}  // namespace kvb
