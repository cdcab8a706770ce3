#include "policies/selection.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "common/errors.h"
#include "kernels/cpu/window_attention_sums.h"

namespace kvb {

Precision parse_precision(const std::string& text) {
  if (text == "bf16") return Precision::kBf16;
  if (text == "fp32") return Precision::kFp32;
  throw InputError("precision '" + text + "' is unknown; use bf16 or fp32");
}

Pooling parse_pooling(const std::string& text) {
  if (text == "avg") return Pooling::kAvg;
  if (text == "max") return Pooling::kMax;
  throw InputError("pooling '" + text + "' is unknown; use avg or max");
}

GroupReduce parse_group_reduce(const std::string& text) {
  if (text == "mean") return GroupReduce::kMean;
  if (text == "max") return GroupReduce::kMax;
  throw InputError("group reduction '" + text + "' is unknown; use mean or max");
}

int effective_window(const LayerPrefillView& layer, int window) {
  return std::max(0, std::min({window, layer.length, layer.window}));
}

std::vector<float> window_attention(const LayerPrefillView& layer, int q_head, int window,
                                    Precision precision) {
  const int w = effective_window(layer, window);
  const int length = layer.length;
  const int d = layer.head_dim;
  const bool bf16 = precision == Precision::kBf16;
  // The window queries (the captured window may be longer than this method's: its last w rows).
  std::vector<float> queries(static_cast<size_t>(w) * d);
  std::copy_n(layer.query(q_head, layer.window - w), queries.size(), queries.begin());
  const float* keys = layer.keys[q_head / layer.group_size()];
  std::vector<float> rounded_keys;
  if (bf16) {
    for (auto& x : queries) x = round_to_bf16(x);
    rounded_keys.assign(keys, keys + static_cast<size_t>(length) * d);
    for (auto& x : rounded_keys) x = round_to_bf16(x);
    keys = rounded_keys.data();
  }
  const float root = std::sqrt(static_cast<float>(d));
  // logits [w, L] = Q K^T (fp32 accumulation), scaled in fp32 or, in bf16 mode, rounded to bf16,
  // divided by sqrt(d) (a bf16 tensor divided by a python float: fp32 op, bf16 result).
  std::vector<float> probs(static_cast<size_t>(w) * length, 0.0f);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, w, length, d, bf16 ? 1.0f : 1.0f / root,
              queries.data(), d, keys, d, 0.0f, probs.data(), length);
  for (int t = 0; t < w; ++t) {
    const int visible = length - w + t + 1;
    float* row = &probs[static_cast<size_t>(t) * length];
    if (bf16)
      for (int j = 0; j < visible; ++j) row[j] = kernels::reference_bf16_logit(row[j], root);
    kernels::window_softmax(row, visible);
    for (int j = 0; j < visible; ++j) row[j] = maybe_bf16(row[j], precision);
    std::fill(row + visible, row + length, 0.0f);  // causally masked
  }
  return probs;
}

std::vector<float> reduce_rows(std::span<const float> matrix, int rows, int length, int columns,
                               bool mean, Precision precision) {
  std::vector<float> out(columns, 0.0f);
  for (int t = 0; t < rows; ++t) {
    const float* row = matrix.data() + static_cast<size_t>(t) * length;
    for (int j = 0; j < columns; ++j) out[j] += row[j];
  }
  for (auto& value : out) {
    if (mean && rows > 0) value /= static_cast<float>(rows);
    value = maybe_bf16(value, precision);
  }
  return out;
}

std::vector<float> pool1d(std::span<const float> scores, int kernel, Pooling pooling,
                          Precision precision) {
  if (kernel < 1 || kernel % 2 == 0)
    throw InputError("pooling kernel " + std::to_string(kernel) +
                     " must be an odd number >= 1 (1 = no pooling)");
  const int n = static_cast<int>(scores.size());
  if (kernel == 1) return {scores.begin(), scores.end()};
  const int half = kernel / 2;
  auto window = [&](int i) {  // one output, its window cut at the ends (torch's padding)
    const int lo = std::max(0, i - half), hi = std::min(n - 1, i + half);
    if (pooling == Pooling::kMax) {
      float best = -std::numeric_limits<float>::infinity();
      for (int j = lo; j <= hi; ++j) best = std::max(best, scores[j]);
      return best;
    }
    float sum = 0.0f;
    for (int j = lo; j <= hi; ++j) sum += scores[j];
    return maybe_bf16(sum / static_cast<float>(kernel), precision);
  };
  std::vector<float> out(n);
  // Outputs whose window lies inside: one pass per offset over contiguous rows, which the compiler
  // vectorises; each output still combines the same values in the same order (offset ascending,
  // from -inf or 0), so the bits are the window's. A policy pools every head of every layer, per
  // sweep cell (timings: results/host-selection.md).
  const int first = std::min(half, n), last = std::max(first, n - half);
  for (int i = 0; i < first; ++i) out[i] = window(i);
  for (int i = last; i < n; ++i) out[i] = window(i);
  float* inside = out.data();
  const float* in = scores.data();
  const bool is_max = pooling == Pooling::kMax;
  std::fill(inside + first, inside + last, is_max ? -std::numeric_limits<float>::infinity() : 0.0f);
  for (int offset = -half; offset <= half; ++offset) {
    if (is_max) {
      for (int i = first; i < last; ++i) inside[i] = std::max(inside[i], in[i + offset]);
    } else {
      for (int i = first; i < last; ++i) inside[i] += in[i + offset];
    }
  }
  if (!is_max) {
    for (int i = first; i < last; ++i) inside[i] /= static_cast<float>(kernel);
    if (precision == Precision::kBf16) round_to_bf16(inside + first, last - first);
  }
  return out;
}

std::vector<std::vector<float>> reduce_groups(const std::vector<std::vector<float>>& per_query_head,
                                              int n_kv_heads, GroupReduce reduce) {
  const int n_query_heads = static_cast<int>(per_query_head.size());
  const int group = n_query_heads / n_kv_heads;
  std::vector<std::vector<float>> out(n_kv_heads);
  for (int h = 0; h < n_kv_heads; ++h) {
    out[h] = per_query_head[h * group];
    for (int a = h * group + 1; a < (h + 1) * group; ++a) {
      const auto& scores = per_query_head[a];
      for (size_t j = 0; j < scores.size(); ++j)
        out[h][j] =
            reduce == GroupReduce::kMax ? std::max(out[h][j], scores[j]) : out[h][j] + scores[j];
    }
    if (reduce == GroupReduce::kMean)
      for (auto& value : out[h]) value /= static_cast<float>(group);
  }
  return out;
}

namespace {

// A score as the top-k ranks it: NaN lowest.
float rank_key(float score) {
  return std::isnan(score) ? -std::numeric_limits<float>::infinity() : score;
}

// The ranked top_k's (rank key, index) side by side, the k best moved to the front by a selection
// (nth_element): each comparison on contiguous pairs, no heap of k (timings against the
// partial_sort it replaced: results/host-selection.md). The order is total, so the set is the same.
struct Ranked {
  float key;
  int32_t index;
};

bool ranks_above(const Ranked& a, const Ranked& b) {
  return a.key != b.key ? a.key > b.key : a.index < b.index;
}

std::vector<Ranked> best_first(std::span<const float> scores, int k) {
  const int n = static_cast<int>(scores.size());
  std::vector<Ranked> ranked(n);
  for (int i = 0; i < n; ++i) ranked[i] = {rank_key(scores[i]), i};
  if (k < n) std::nth_element(ranked.begin(), ranked.begin() + k, ranked.end(), ranks_above);
  ranked.resize(k);
  return ranked;
}

}  // namespace

std::vector<int32_t> top_k(std::span<const float> scores, int k) {
  k = std::clamp(k, 0, static_cast<int>(scores.size()));
  std::vector<Ranked> best = best_first(scores, k);
  std::sort(best.begin(), best.end(), ranks_above);
  std::vector<int32_t> order(k);
  for (int i = 0; i < k; ++i) order[i] = best[i].index;
  return order;
}

std::vector<int32_t> top_k_set(std::span<const float> scores, int k) {
  const int n = static_cast<int>(scores.size());
  k = std::clamp(k, 0, n);
  if (k == 0) return {};
  // The k-th best key by a selection over the keys alone, then one pass in index order: every key
  // above it, and of the keys equal to it the lowest indices — top_k's ranking, with no ranking.
  auto key = [&](int i) { return rank_key(scores[i]); };
  std::vector<float> keys(n);
  for (int i = 0; i < n; ++i) keys[i] = key(i);
  std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<float>());
  const float kth = keys[k - 1];
  int above = 0;
  for (int i = 0; i < n; ++i) above += key(i) > kth;
  int ties = k - above;
  std::vector<int32_t> indices;
  indices.reserve(k);
  for (int i = 0; i < n; ++i) {
    const float value = key(i);
    if (value > kth || (value == kth && ties-- > 0)) indices.push_back(i);
  }
  return indices;
}

ProtectedSpan protected_span(int length, int sinks, int window) {
  ProtectedSpan span;
  span.length = length;
  span.sinks = std::clamp(sinks, 0, length);
  span.window = std::clamp(window, 0, length - span.sinks);
  return span;
}

std::vector<int32_t> ProtectedSpan::kept(std::span<const int32_t> chosen) const {
  std::vector<int32_t> kept;
  kept.reserve(sinks + chosen.size() + window);
  for (int j = 0; j < sinks; ++j) kept.push_back(j);
  for (int32_t j : chosen) kept.push_back(j + begin());
  for (int j = end(); j < length; ++j) kept.push_back(j);
  // Sinks, candidates and window lie in that order, so a chosen set in index order (top_k_set)
  // leaves nothing to sort; a ranked one is sorted here.
  if (!std::is_sorted(chosen.begin(), chosen.end())) std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<int32_t> keep_top(std::span<const float> scores, int keep, int sinks, int window) {
  const int n = static_cast<int>(scores.size());
  if (keep >= n) return keep_all(n);
  const ProtectedSpan span = protected_span(n, sinks, window);
  const int rest = std::max(0, keep - span.sinks - span.window);
  return span.kept(top_k_set(scores.subspan(span.begin(), span.end() - span.begin()), rest));
}

std::vector<int32_t> keep_all(int length) {
  std::vector<int32_t> all(length);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

void check_budget(const std::string& policy, int budget_tokens, int prompt_length) {
  if (budget_tokens <= 0)
    throw InputError("budget of policy '" + policy + "' is " + std::to_string(budget_tokens) +
                     " tokens; it must be > 0 (use e.g. --budget 512 or --budget 10%)");
  if (budget_tokens > prompt_length)
    throw InputError("budget of policy '" + policy + "' is " + std::to_string(budget_tokens) +
                     " tokens, larger than the prompt (" + std::to_string(prompt_length) +
                     " tokens); use a budget <= the prompt length or a fraction such as 50%");
}

void evict_except(KvStore& store, int layer, int head, const std::vector<int32_t>& kept) {
  size_t next = kept.size();
  for (int index = store.length(layer, head) - 1; index >= 0; --index) {
    if (next > 0 && kept[next - 1] == index) {
      --next;
    } else {
      store.erase(layer, head, index);
    }
  }
}

void require_keys_values(const LayerPrefillView& layer, const std::string& policy,
                         const std::string& statistic) {
  if (!layer.has_keys_values())
    throw std::logic_error(
        policy + ": the prefill view holds neither " + statistic +
        " nor the prompt's keys and values; its CaptureRequest must ask for one");
}

bool is_dense_layer(const std::vector<int>& dense_layers, int layer) {
  return std::find(dense_layers.begin(), dense_layers.end(), layer) != dense_layers.end();
}

}  // namespace kvb

namespace kvb {

std::vector<std::vector<float>> window_attention_scores(const LayerPrefillView& layer,
                                                        const WindowScoreOptions& options) {
  const int w = effective_window(layer, options.window);
  const int length = layer.length;
  const int prefix = length - w;
  std::vector<std::vector<float>> per_query_head(layer.n_query_heads);
  const float* device_sums = layer.window_sums_for(window_sums_request(options));
  if (!device_sums)
    require_keys_values(layer, "window attention scores",
                        "the window sums of w = " + std::to_string(options.window));
  for (int a = 0; a < layer.n_query_heads; ++a) {
    if (device_sums) {  // Σ_t p(t -> j) over the window rows, row a of [Hq, L]
      const float* sums = device_sums + static_cast<int64_t>(a) * length;
      const float divisor = options.mean_over_rows ? static_cast<float>(std::max(w, 1)) : 1.0f;
      per_query_head[a].resize(prefix);
      for (int j = 0; j < prefix; ++j)
        per_query_head[a][j] = maybe_bf16(sums[j] / divisor, options.precision);
      continue;
    }
    const auto probs = window_attention(layer, a, w, options.precision);
    per_query_head[a] =
        reduce_rows(probs, w, length, prefix, options.mean_over_rows, options.precision);
  }
  auto pool = [&](std::vector<float>& scores) {
    scores = pool1d(scores, options.kernel, options.pooling, options.precision);
  };
  std::vector<std::vector<float>> per_kv_head;
  if (options.reduce_group_before_pooling) {
    per_kv_head = reduce_groups(per_query_head, layer.n_kv_heads, options.group_reduce);
    for (auto& scores : per_kv_head) pool(scores);
  } else {
    for (auto& scores : per_query_head) pool(scores);
    per_kv_head = reduce_groups(per_query_head, layer.n_kv_heads, options.group_reduce);
  }
  for (auto& scores : per_kv_head) {
    for (auto& value : scores) value = maybe_bf16(value, options.precision);
    scores.resize(length, 0.0f);
  }
  return per_kv_head;
}

WindowSumsRequest window_sums_request(const WindowScoreOptions& options) {
  return {.window = options.window, .reference_bf16_casts = options.precision == Precision::kBf16};
}

CaptureRequest window_attention_capture(const WindowScoreOptions& options) {
  CaptureRequest request;
  request.window_queries = options.window;
  request.window_attention_sums = {window_sums_request(options)};
  return request;
}

}  // namespace kvb
