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
  int sequence = 0;   // the engine's sequence the cell decodes in
  KeptIndices kept;   // chosen from the prefilled prompt (empty: the cell keeps everything)
  TokenId token = 0;  // sampled, not yet checked or fed
  int position = 0;
  int step = 0;
  bool done = false;
  Clock::time_point first_token;
};

// The cell as before its batch ran (after an optimistic batch size failed).
CellState restarted(const CellState& cell) {
  CellState fresh;
  fresh.request = cell.request;
  fresh.max_new_tokens = cell.max_new_tokens;
  return fresh;
}

// The union of what the cells' prefill policies capture.
CaptureRequest capture_union(const std::vector<CellState*>& cells) {
  CaptureRequest request;
  for (const CellState* cell : cells)
    if (cell->request->plan->prefill) request.merge(cell->request->plan->prefill->capture());
  return request;
}

// Room each cell needs beyond the prompt: its question and its new tokens.
int spare_tokens_of(const std::vector<CellState*>& cells, const std::vector<TokenId>& question) {
  int spare = 0;
  for (const CellState* cell : cells)
    spare = std::max(spare, cell->max_new_tokens + static_cast<int>(question.size()));
  return spare;
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

void finish_cell(Engine& engine, const Tokenizer* tokenizer, CellState& cell) {
  GenerationResult& r = cell.result;
  CachePlan& plan = *cell.request->plan;
  engine.finish_decode(cell.sequence);
  r.decode_ms = milliseconds_since(cell.first_token);
  r.tpot_ms = r.output_tokens > 1 ? r.decode_ms / (r.output_tokens - 1) : 0.0;
  r.text = StopRule(tokenizer, cell.request->options).final_text(r.output_ids);
  r.kv_bytes_end = engine.kv_bytes(cell.sequence);
  r.kv_blocks_visited = plan.early_exit_stats.blocks_visited;
  r.kv_blocks_total = plan.early_exit_stats.blocks_total;
  r.early_exit_oracle = plan.early_exit_oracle;
  cell.done = true;
}

// Greedy steps for `cells`, all in one decode call per step, until each has stopped.
void decode_until_done(Engine& engine, const Tokenizer* tokenizer,
                       const std::vector<CellState*>& cells) {
  std::vector<DecodeInput> inputs;
  std::vector<CellState*> stepping;
  for (;;) {
    inputs.clear();
    stepping.clear();
    for (CellState* cell : cells) {
      if (cell->done) continue;
      if (!accept_token(*cell, StopRule(tokenizer, cell->request->options))) {
        finish_cell(engine, tokenizer, *cell);
        continue;
      }
      inputs.push_back({cell->sequence, cell->token, cell->position, cell->step});
      stepping.push_back(cell);
    }
    if (inputs.empty()) return;
    const std::vector<TokenId> next = engine.decode(inputs);
    for (size_t k = 0; k < inputs.size(); ++k) {
      CellState& cell = *stepping[k];
      cell.token = next[k];
      ++cell.position;
      ++cell.step;
      ++cell.result.output_tokens;
    }
  }
}

// The prompt prefilled once into sequence `base`, with what every cell that replays it needs.
struct SharedPrefill {
  int base = 0;
  int length = 0;  // prompt tokens before the question
  std::vector<float> logits;
  double prefill_ms = 0;
  int64_t kv_bytes_full = 0;
};

// Prefills `context` into the empty sequence `base` with the union of the cells' captures, and
// selects every cell's kept set from it (before any sequence is compacted).
SharedPrefill prefill_and_select(Engine& engine, const std::vector<TokenId>& context,
                                 const std::vector<CellState*>& cells, int base) {
  SharedPrefill shared;
  shared.base = base;
  shared.length = static_cast<int>(context.size());
  const auto prefill_start = Clock::now();
  const CaptureRequest request = capture_union(cells);
  PrefillCapture captured;
  shared.logits = engine.prefill(base, context, request, captured);
  shared.prefill_ms = milliseconds_since(prefill_start);
  shared.kv_bytes_full = engine.kv_bytes(base);
  KvStore host_copy;
  for (CellState* cell : cells) {
    const auto start = Clock::now();
    CachePlan& plan = *cell->request->plan;
    cell->result.compressed_tokens = shared.length;
    cell->result.budget_tokens = budget_tokens_for(plan, shared.length);
    if (plan.budget && plan.prefill)
      cell->kept = select_kept(
          plan, captured,
          [&](const PrefillCapture& captures, const CaptureRequest& wanted) {
            return engine.prefill_view(base, captures, wanted, host_copy);
          },
          engine.config(), cell->result.budget_tokens);
    cell->result.compress_ms = milliseconds_since(start);
  }
  return shared;
}

// For cells whose sequences are free (or the shared prefill's own, for one of them): forks the
// prefill into each, compacts, appends the question and decodes, with `decode_together` one
// batched step for all, otherwise the cells' decodes one after another.
void decode_cells(Engine& engine, const Tokenizer* tokenizer, const SharedPrefill& shared,
                  const std::vector<TokenId>& question, const std::vector<CellState*>& batch,
                  bool decode_together) {
  const int n = static_cast<int>(batch.size());
  const int spare = spare_tokens_of(batch, question);
  for (CellState* cell : batch)
    if (cell->sequence != shared.base) engine.fork(shared.base, cell->sequence);
  // Compactions after every fork: the shared prefill may be one of the cells' sequences.
  for (CellState* cell : batch) {
    const auto start = Clock::now();
    cell->request->plan->early_exit_stats = {};
    cell->request->plan->early_exit_oracle = {};
    if (!cell->kept.empty()) engine.compact(cell->sequence, cell->kept, spare);
    cell->result.compress_ms += milliseconds_since(start);
    cell->result.kv_bytes = engine.kv_bytes(cell->sequence);  // after compression
  }

  std::vector<int> sequences;
  for (const CellState* cell : batch) sequences.push_back(cell->sequence);
  std::vector<TokenId> first(n, argmax(shared.logits));
  double question_ms = 0;
  if (!question.empty()) {
    const auto start = Clock::now();
    first = engine.extend(sequences, question, shared.length);
    question_ms = milliseconds_since(start);
  }
  const int prompt_tokens = shared.length + static_cast<int>(question.size());
  for (CellState* cell : batch) {  // a CPU selector builds its codes or pages here
    const auto start = Clock::now();
    const int budget = cell->result.budget_tokens > 0 ? cell->result.budget_tokens : shared.length;
    engine.start_decode(cell->sequence, *cell->request->plan, prompt_tokens, budget);
    cell->result.compress_ms += milliseconds_since(start);
  }
  const auto prepare_start = Clock::now();
  engine.prepare_decode();  // the batch's decode-time method (a selector's codes or pages)
  const double prepare_ms = milliseconds_since(prepare_start);
  const auto first_token = Clock::now();
  for (int i = 0; i < n; ++i) {
    CellState& cell = *batch[i];
    GenerationResult& r = cell.result;
    r.prompt_tokens = prompt_tokens;
    r.kv_bytes_full = shared.kv_bytes_full;
    r.prefill_ms = shared.prefill_ms + question_ms;
    r.compress_ms += prepare_ms;
    r.ttft_ms = shared.prefill_ms + r.compress_ms + question_ms;
    r.decode_batch = decode_together ? n : 1;
    r.stop_reason = "max_new_tokens";
    r.output_tokens = 1;
    cell.first_token = first_token;
    cell.token = first[i];
    cell.position = prompt_tokens;
  }

  if (decode_together) {
    decode_until_done(engine, tokenizer, batch);
  } else {
    for (CellState* cell : batch) {
      cell->first_token = Clock::now();  // its decode starts when the previous cell's ends
      decode_until_done(engine, tokenizer, {cell});
    }
  }
  const int64_t peak = engine.peak_memory_bytes();
  for (CellState* cell : batch) cell->result.peak_rss_bytes = peak;
}

// Cells that fit in memory together: a prefill of their own into sequence 0, forked into 1..n-1.
void run_batch(Engine& engine, const Tokenizer* tokenizer, const std::vector<TokenId>& context,
               const std::vector<TokenId>& question, const std::vector<CellState*>& batch,
               bool decode_together) {
  const int n = static_cast<int>(batch.size());
  engine.reserve(n, static_cast<int>(context.size()) + spare_tokens_of(batch, question));
  engine.reset_peak_memory();
  for (int i = 0; i < n; ++i) batch[i]->sequence = i;
  const SharedPrefill shared = prefill_and_select(engine, context, batch, /*base=*/0);
  decode_cells(engine, tokenizer, shared, question, batch, decode_together);
}

// Runs `members` in parts of at most `part` cells; a part whose run raises CapacityError (the
// memory estimate was optimistic) is put back as it was and split further.
template <typename RunPart>
void run_in_parts(const std::vector<CellState*>& members, size_t part, const RunPart& run_part) {
  for (size_t begin = 0; begin < members.size();) {
    const size_t count = std::min(members.size() - begin, part);
    const std::vector<CellState*> batch(members.begin() + begin, members.begin() + begin + count);
    std::vector<CellState> before;
    for (const CellState* cell : batch) before.push_back(*cell);
    try {
      run_part(batch);
    } catch (const CapacityError&) {
      if (count == 1) throw;
      part = count / 2;
      for (size_t k = 0; k < count; ++k) *batch[k] = before[k];
      continue;
    }
    begin += count;
  }
}

// Cells of several decode groups from one prefill: the prompt stays in sequence 0 and each group
// (in parts of at most `slots` - 1 cells) is forked from it into sequences 1, 2, ... in turn.
void run_groups_on_one_prefill(Engine& engine, const Tokenizer* tokenizer,
                               const std::vector<TokenId>& context,
                               const std::vector<TokenId>& question,
                               const std::map<std::string, std::vector<CellState*>>& groups,
                               int slots, bool decode_together) {
  std::vector<CellState*> all;
  for (const auto& [key, members] : groups) all.insert(all.end(), members.begin(), members.end());
  engine.reserve(slots, static_cast<int>(context.size()) + spare_tokens_of(all, question));
  engine.reset_peak_memory();
  const SharedPrefill shared = prefill_and_select(engine, context, all, /*base=*/0);
  for (const auto& [key, members] : groups)
    run_in_parts(members, static_cast<size_t>(slots - 1), [&](const std::vector<CellState*>& part) {
      for (size_t k = 0; k < part.size(); ++k) part[k]->sequence = static_cast<int>(k) + 1;
      decode_cells(engine, tokenizer, shared, question, part, decode_together);
    });
}

std::vector<GenerationResult> results_of(std::vector<CellState>& states) {
  std::vector<GenerationResult> results;
  results.reserve(states.size());
  for (auto& state : states) results.push_back(std::move(state.result));
  return results;
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
  const int fits_now = std::max(1, engine.max_sequences(capacity));
  size_t largest = 0;
  for (const auto& [key, members] : groups) largest = std::max(largest, members.size());
  if (groups.size() > 1 && !options.cells_alone && fits_now >= 2) {
    try {
      run_groups_on_one_prefill(engine, tokenizer, context, question, groups,
                                static_cast<int>(std::min<size_t>(fits_now, largest + 1)),
                                options.batch_cells);
      return results_of(states);
    } catch (const CapacityError&) {
      // Not even the prompt beside one cell: each group part prefills on its own below.
      for (CellState& state : states) state = restarted(state);
    }
  }
  for (const auto& [key, members] : groups)
    run_in_parts(members, static_cast<size_t>(fits_now), [&](const std::vector<CellState*>& part) {
      run_batch(engine, tokenizer, context, question, part, options.batch_cells);
    });
  return results_of(states);
}

}  // namespace kvb
