// Shared machinery of the prefill-eviction methods: window attention recomputed from the captured
// queries, 1-D pooling with PyTorch's edge semantics, GQA aggregation, deterministic top-k and the
// budget checks. A method file combines these; none of them knows about a particular method.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/cache_policy.h"
#include "kernels/cpu/dequantize.h"

namespace kvb {

// "bf16" emulates the casts of the bf16 reference implementations (docs/methods.md §0); "fp32"
// keeps every intermediate in fp32.
enum class Precision { kFp32, kBf16 };
enum class Pooling { kAvg, kMax };
// How the g query heads of one KV head are combined into one score per key.
enum class GroupReduce { kMean, kMax };

Precision parse_precision(const std::string& text);
Pooling parse_pooling(const std::string& text);
GroupReduce parse_group_reduce(const std::string& text);

// The value a bf16 tensor holds in the reference's bf16 mode (round_to_bf16: nearest, ties to
// even).
inline float maybe_bf16(float value, Precision precision) {
  return precision == Precision::kBf16 ? round_to_bf16(value) : value;
}

// Softmax weights of the last `window` prompt queries of query head `q_head`, row-major [w, L]:
// row t is the query at position L-w+t and sees keys j <= L-w+t (the rest are 0). The softmax runs
// in fp32 over every visible key, window keys included. In bf16 mode q and k are rounded to bf16,
// the logit q.k (fp32 accumulation) is rounded to bf16, divided by sqrt(d) in bf16, and the fp32
// probabilities are rounded to bf16 (SnapKV / PyramidKV / AdaKV / CAKE reference path).
// `window` is clamped to min(window, L, captured window).
std::vector<float> window_attention(const LayerPrefillView& layer, int q_head, int window,
                                    Precision precision);
int effective_window(const LayerPrefillView& layer, int window);

// Sum (or mean) over the `rows` rows of a row-major [rows, length] matrix of the first `columns`
// columns. In bf16 mode the result is rounded to bf16 (torch accumulates in fp32 and rounds once).
std::vector<float> reduce_rows(std::span<const float> matrix, int rows, int length, int columns,
                               bool mean, Precision precision);

// 1-D pooling along the token axis, stride 1, padding kernel/2 (kernel must be odd; 1 = identity).
// avg divides by `kernel` also at the edges (zero padding, count_include_pad); max pads with -inf.
std::vector<float> pool1d(std::span<const float> scores, int kernel, Pooling pooling,
                          Precision precision);

// Combines per-query-head scores into per-KV-head scores, query head a belonging to KV head a/g.
std::vector<std::vector<float>> reduce_groups(const std::vector<std::vector<float>>& per_query_head,
                                              int n_kv_heads, GroupReduce reduce);

// Indices of the k largest scores, ordered by score (descending) and, among equal scores, by lower
// index first (deterministic where torch.topk leaves ties unspecified). NaN ranks lowest.
std::vector<int32_t> top_k(std::span<const float> scores, int k);
// The same k indices in increasing index order: for callers that need the set, not its ranking
// (a kept set, counts per head), without ranking the winners.
std::vector<int32_t> top_k_set(std::span<const float> scores, int k);

// One head's positions as the selection sees them: the first `sinks` and the last `window` (clamped
// to fit `length`) are protected, kept whatever their scores; the candidates [begin, end) between
// them are chosen from.
struct ProtectedSpan {
  int length = 0, sinks = 0, window = 0;
  int begin() const { return sinks; }
  int end() const { return length - window; }
  // The kept set, sorted: the protected positions plus `chosen` (offsets from begin()).
  std::vector<int32_t> kept(std::span<const int32_t> chosen) const;
};
ProtectedSpan protected_span(int length, int sinks, int window);

// The kept set of one head, sorted: the first `sinks` and the last `window` positions always, plus
// the best-scoring other positions up to `keep` in total (protected ones count inside `keep`; if
// they alone exceed it they are still all kept).
std::vector<int32_t> keep_top(std::span<const float> scores, int keep, int sinks, int window);

// All positions [0, length).
std::vector<int32_t> keep_all(int length);

// Validates a per-head budget against the prompt; throws InputError naming the policy otherwise.
void check_budget(const std::string& policy, int budget_tokens, int prompt_length);

// Decode-time eviction: erases from one head of `store` every entry whose index is not in `kept`
// (sorted indices into the head's current sequence).
void evict_except(KvStore& store, int layer, int head, const std::vector<int32_t>& kept);

// logic_error naming `policy` and the statistic it missed when the view lacks the prompt's keys
// and values (a device view for a request without host_keys_values).
void require_keys_values(const LayerPrefillView& layer, const std::string& policy,
                         const std::string& statistic);

// True when `layer` is listed in `dense_layers` (left uncompressed).
bool is_dense_layer(const std::vector<int>& dense_layers, int layer);

}  // namespace kvb

namespace kvb {

// The SnapKV-family score (SnapKV, PyramidKV, AdaKV's base scorer): per query head the window
// attention on the prefix j < L-w, summed (or averaged) over the w window rows, pooled over the
// prefix only, and reduced over the GQA group before or after pooling. Returns per KV head a vector
// of length L whose window entries are 0 (the window is protected by the caller).
struct WindowScoreOptions {
  int window = 32;
  int kernel = 5;
  Pooling pooling = Pooling::kAvg;
  bool mean_over_rows = false;  // official SnapKV sums; AdaKV and kvpress average
  Precision precision = Precision::kBf16;
  GroupReduce group_reduce = GroupReduce::kMean;
  bool reduce_group_before_pooling = false;  // kvpress: after; AdaKV/DropKV: before
};
// Reads the view's window attention sums for options.window when the backend computed them
// (a device), else recomputes the window attention from the keys.
std::vector<std::vector<float>> window_attention_scores(const LayerPrefillView& layer,
                                                        const WindowScoreOptions& options);
// The window sums window_attention_scores reads: with the bf16 casts of the reference (the logits
// and probabilities rounded as window_attention rounds them) in bf16 precision, so that the sums a
// device computed give the kept set the recompute from the keys gives.
WindowSumsRequest window_sums_request(const WindowScoreOptions& options);
// What window_attention_scores needs of the prefill: the window queries, and the window sums in
// place of the prompt's keys.
CaptureRequest window_attention_capture(const WindowScoreOptions& options);

}  // namespace kvb
