#include "kernels/cpu/decode_eviction.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/dequantize.h"

namespace kvb::kernels {

namespace {

float rounded(float x, bool round) { return round ? round_to_bf16(x) : x; }

// Average pool of p_a over [0, prefix) at j: Σ of the (rounded) values in the window / k, rounded.
float pooled(const float* p, int j, int prefix, int kernel, bool round) {
  const int half = kernel / 2;
  float sum = 0.0f;
  for (int i = std::max(0, j - half); i <= std::min(prefix - 1, j + half); ++i)
    sum += rounded(p[i], round);
  return rounded(sum / static_cast<float>(kernel), round);
}

float slot_score(const EvictionScoresArgs& a, int b, int h, int j, int length, float old) {
  const int group = a.n_query_heads / a.n_kv_heads;
  auto row = [&](int q_head) {
    return a.probabilities + (int64_t(b) * a.n_query_heads + q_head) * a.probability_stride;
  };
  switch (a.statistic) {
    case EvictionStatistic::kAccumulatedGroupSum:
      for (int q = h * group; q < (h + 1) * group; ++q) old += row(q)[j];
      return old;
    case EvictionStatistic::kLayerMean: {
      float mean = 0.0f;
      for (int q = 0; q < a.n_query_heads; ++q)
        mean += row(q)[j] / static_cast<float>(a.n_query_heads);
      return mean;
    }
    case EvictionStatistic::kPooledGroupMean: {
      const int prefix = length - a.recent;
      if (j >= prefix) return 0.0f;
      float sum = pooled(row(h * group), j, prefix, a.pool_kernel, a.round_bf16);
      for (int q = h * group + 1; q < (h + 1) * group; ++q)
        sum += pooled(row(q), j, prefix, a.pool_kernel, a.round_bf16);
      return sum / static_cast<float>(group);
    }
  }
  return old;
}

void move_row(float* rows, int64_t from, int64_t to, int dim) {
  std::copy_n(rows + from * dim, dim, rows + to * dim);
}

}  // namespace

void attention_probabilities(const AttentionProbabilitiesArgs& a) {
  const int group = a.n_query_heads / a.n_kv_heads;
  for (int b = 0; b < a.batch; ++b)
    for (int q = 0; q < a.n_query_heads; ++q) {
      float* row = a.logits + (int64_t(b) * a.n_query_heads + q) * a.stride;
      const int length = a.lengths[b * a.n_kv_heads + q / group];
      const float lse = a.lse[int64_t(q) * a.batch + b];
      for (int j = 0; j < a.width; ++j) row[j] = j < length ? std::exp(row[j] * a.scale - lse) : 0;
    }
}

void eviction_scores(const EvictionScoresArgs& a) {
  for (int b = 0; b < a.batch; ++b)
    for (int h = 0; h < a.n_kv_heads; ++h) {
      const int slot = b * a.n_kv_heads + h;
      const int length = a.lengths[slot];
      float* scores = a.scores + slot * a.score_stride;
      for (int j = 0; j < length; ++j) scores[j] = slot_score(a, b, h, j, length, scores[j]);
    }
}

int evicted_length(int length, int keep, int sinks, int recent) {
  if (keep < 0 || length <= keep) return length;
  sinks = std::clamp(sinks, 0, length);
  recent = std::clamp(recent, 0, length - sinks);
  return std::max(keep, sinks + recent);
}

uint64_t eviction_rank_key(float score, int position) {
  if (std::isnan(score)) score = -std::numeric_limits<float>::infinity();
  if (score == 0.0f) score = 0.0f;  // -0 ranks as +0, as the comparison does
  const uint32_t bits = std::bit_cast<uint32_t>(score);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (uint64_t(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(position));
}

void evict_to_keep(const EvictToKeepArgs& a) {
  if (a.keep < 0) return;  // a layer left alone (the device launches nothing)
  for (int s = 0; s < a.n_slots; ++s) {
    const int length = a.lengths[s];
    int32_t* ids = a.entry_ids ? a.entry_ids + s * a.score_stride : nullptr;
    if (ids && length > 0) ids[length - 1] = a.appended_ids[s / a.n_kv_heads];
    const int kept_count = evicted_length(length, a.keep, a.sinks, a.recent);
    if (kept_count == length) continue;
    const int sinks = std::clamp(a.sinks, 0, length);
    const int middle_end = length - std::clamp(a.recent, 0, length - sinks);
    float* scores = a.scores + s * a.score_stride;
    // The smallest key that stays: candidates rank by key, and kept_count - protected of them stay.
    std::vector<uint64_t> keys;
    for (int j = sinks; j < middle_end; ++j) keys.push_back(eviction_rank_key(scores[j], j));
    const size_t evicted = size_t(length - kept_count);
    uint64_t lowest_kept = ~uint64_t(0);  // none stays when the protected ones fill `keep`
    if (evicted < keys.size()) {
      std::nth_element(keys.begin(), keys.begin() + evicted, keys.end());
      lowest_kept = keys[evicted];
    }
    int next = 0;
    for (int j = 0; j < length; ++j) {
      const bool candidate = j >= sinks && j < middle_end;
      if (candidate && eviction_rank_key(scores[j], j) < lowest_kept) continue;
      move_row(a.keys + a.kv_offset[s] * a.head_dim, j, next, a.head_dim);
      move_row(a.values + a.kv_offset[s] * a.head_dim, j, next, a.head_dim);
      if (a.compact_scores) scores[next] = scores[j];
      if (ids) ids[next] = ids[j];
      ++next;
    }
    if (a.compact_scores) std::fill(scores + next, scores + length, 0.0f);
    a.lengths[s] = next;
  }
}

}  // namespace kvb::kernels
