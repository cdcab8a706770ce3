// Greedy generation under a cache plan, with vLLM's timings (README.md, "Latency rows"):
//   TTFT = request start -> first token (prefill + compression + first sampling),
//   TPOT = (end - first token) / (tokens - 1); prefill_ms and compress_ms reported separately.
//
// Two prompt modes:
//   query-aware:        the whole prompt is prefilled, compressed, then decoded;
//   question-agnostic:  the context is prefilled and compressed, then the question is appended as
//                       a chunk over the compressed cache (forward_chunk), then decoded.
// The sweep runner prefills once (prefill()) and replays many (policy, budget) cells from copies
// of the snapshot (continue_generation()).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/cache_policy.h"
#include "engine/engine.h"
#include "engine/prefill_capture.h"
#include "engine/tokenizer.h"

namespace kvb {

struct GenerationOptions {
  int max_new_tokens = 64;
  bool stop_at_end_of_generation = true;  // EOS and chat end tokens (tokenizer's rule)
  std::vector<std::string> stop_strings;  // generation stops once the text contains one
  std::vector<TokenId> extra_stop_ids;    // e.g. a benchmark's own stop tokens
};

struct GenerationResult {
  std::vector<TokenId> output_ids;  // generated ids (the stop token excluded)
  std::string text;                 // decoded, cut before a matched stop string
  std::string stop_reason;          // "eos", "stop_string", "max_new_tokens", "context_full"
  int prompt_tokens = 0;
  int output_tokens = 0;      // tokens sampled (including a stop token)
  int compressed_tokens = 0;  // tokens the policy compressed (the prompt or the context)
  int budget_tokens = 0;      // 0 when no prefill policy ran
  double prefill_ms = 0;      // includes the question chunk in question-agnostic mode
  double compress_ms = 0;
  double ttft_ms = 0;
  double tpot_ms = 0;          // 0 when fewer than two tokens were sampled
  double decode_ms = 0;        // first token -> end
  int64_t kv_bytes_full = 0;   // KV bytes the uncompressed prompt held
  int64_t kv_bytes = 0;        // KV bytes held after compression (before decoding)
  int64_t kv_bytes_end = 0;    // KV bytes held at the end
  int64_t peak_rss_bytes = 0;  // host RSS on the CPU, device bytes on a GPU (peak)
  int decode_batch = 1;        // sequences decoded together with this one
  // ART (kind E): KV blocks the decode attention walked / could have walked, summed over decode
  // steps, layers and KV groups (skipped fraction = 1 - visited / total); 0 without early exit.
  int64_t kv_blocks_visited = 0;
  int64_t kv_blocks_total = 0;
  kernels::EarlyExitOracleSummary early_exit_oracle;  // filled in ART's oracle mode only
};

// A full-attention prefill: the store holding every prompt token, the captures the policies need,
// and the last token's logits. Copy it to replay several cells.
struct PrefillSnapshot {
  KvStore store;
  PrefillCapture capture;
  CaptureRequest request;
  std::vector<float> last_logits;
  int length = 0;
  double prefill_ms = 0;
};

// The plan's budget in tokens for a prompt of `length` (0 without a budget). InputError when it
// rounds to 0 tokens or passes the prompt.
int budget_tokens_for(const CachePlan& plan, int length);

// The kept indices the plan's prefill policy chooses at `budget`, from the view `view_of` builds
// for the policy's own captures (cut from `captured`). Checked: one list per layer.
KeptIndices select_kept(
    const CachePlan& plan, const PrefillCapture& captured,
    const std::function<PrefillView(const PrefillCapture&, const CaptureRequest&)>& view_of,
    const ModelConfig& config, int budget);

// The options' max new tokens, cut where the context ends. InputError for < 1, CapacityError for
// a prompt longer than the context.
int max_new_tokens_within_context(const ModelConfig& config, int prompt_tokens,
                                  const GenerationOptions& options);

// When greedy generation stops and the text it returns (Generator and generate_cells share it).
class StopRule {
 public:
  // `tokenizer` may be null: then only max_new_tokens and extra_stop_ids stop, and the text is "".
  StopRule(const Tokenizer* tokenizer, const GenerationOptions& options)
      : tokenizer_(tokenizer), options_(options) {}
  bool is_stop_token(TokenId id) const;
  // Whether the text of the tokens generated so far contains a stop string.
  bool has_stop_string(const std::vector<TokenId>& output_ids) const;
  // The decoded text, cut before the first stop string.
  std::string final_text(const std::vector<TokenId>& output_ids) const;

 private:
  const Tokenizer* tokenizer_;
  const GenerationOptions& options_;
};

class Generator {
 public:
  // `tokenizer` may be null (random-weight tests): then only max_new_tokens and extra_stop_ids stop
  // generation and the text is empty.
  Generator(InferenceEngine& engine, const Tokenizer* tokenizer);

  PrefillSnapshot prefill(const std::vector<TokenId>& ids, const CaptureRequest& request);

  // Compresses the snapshot's cache with `plan` (if it has a prefill policy), appends
  // `question_ids` when non-empty (question-agnostic mode), then decodes greedily.
  GenerationResult continue_generation(PrefillSnapshot snapshot, CachePlan& plan,
                                       const std::vector<TokenId>& question_ids,
                                       const GenerationOptions& options);

  // Query-aware: prefill the whole prompt, then continue. Question-agnostic: pass the context as
  // `prompt_ids` and the question as `question_ids`.
  GenerationResult generate(const std::vector<TokenId>& prompt_ids, CachePlan& plan,
                            const GenerationOptions& options,
                            const std::vector<TokenId>& question_ids = {});

 private:
  void compress(PrefillSnapshot& snapshot, CachePlan& plan, int spare_tokens,
                GenerationResult& result) const;

  InferenceEngine& engine_;
  const Tokenizer* tokenizer_;
};

// Index of the largest logit (the lowest index among ties).
TokenId argmax(const std::vector<float>& logits);
// Peak resident set size of this process, in bytes.
int64_t peak_rss_bytes();

}  // namespace kvb
