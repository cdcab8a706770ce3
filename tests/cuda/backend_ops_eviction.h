// The backend-ops rows of decode-time eviction's kernels (kernels/cuda/decode_eviction.h), each
// against its CPU twin (kernels/cpu/decode_eviction.h) on the same inputs:
// - attention_probabilities: exp of the same f32 argument, the device's expf within 2 ulp of the
//   CPU's: 1e-6 relative;
// - eviction_scores: the same f32 sums in the same order with IEEE adds, divides and bf16
//   roundings: equal up to 1e-6 relative (bit-equal expected);
// - evict_to_keep: the same scores in, so the same kept entries: lengths, K and V rows, compacted
//   statistic, zeroed tail and entry ids all exact.
// Ragged lengths per slot (one entry, lengths off the 32-row tiles, the whole width), GQA groups
// 1, 3, 4 and 7, one and several sequences.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/decode_eviction.h"
#include "kernels/cuda/decode_eviction.h"
#include "tests/cuda/backend_ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

struct EvictionShape {
  int batch, n_query_heads, n_kv_heads, head_dim, width;
  int slots() const { return batch * n_kv_heads; }
  int group() const { return n_query_heads / n_kv_heads; }
  // Ragged: slot 0 holds the whole width, slot 1 one entry, the others in between.
  std::vector<int32_t> lengths() const {
    std::vector<int32_t> out(slots());
    for (int s = 0; s < slots(); ++s)
      out[s] = s == 0 ? width : s == 1 ? 1 : 1 + (s * 7919 + width / 3) % width;
    return out;
  }
};

// Rows of p [B * Hq, stride] summing to 1 over their slot's entries, 0 beyond.
inline std::vector<float> eviction_probabilities(const EvictionShape& s, int64_t stride,
                                                 uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> weight(1.0f);
  const std::vector<int32_t> lengths = s.lengths();
  std::vector<float> p(size_t(s.batch) * s.n_query_heads * stride, 0.0f);
  for (int row = 0; row < s.batch * s.n_query_heads; ++row) {
    const int length =
        lengths[(row / s.n_query_heads) * s.n_kv_heads + (row % s.n_query_heads) / s.group()];
    float sum = 0;
    for (int j = 0; j < length; ++j) sum += p[row * stride + j] = weight(rng);
    for (int j = 0; j < length; ++j) p[row * stride + j] /= sum;
  }
  return p;
}

// The arguments both twins take, on host arrays (the device call swaps in its buffers).
template <typename Args>
Args probabilities_args(const EvictionShape& s, std::vector<float>& logits, int64_t stride,
                        const std::vector<float>& lse, const std::vector<int32_t>& lengths) {
  Args a;
  a.logits = logits.data();
  a.stride = stride;
  a.lse = lse.data();
  a.lengths = lengths.data();
  a.batch = s.batch;
  a.n_query_heads = s.n_query_heads;
  a.n_kv_heads = s.n_kv_heads;
  a.width = s.width;
  a.scale = 1.0f / std::sqrt(float(s.head_dim));
  return a;
}

inline void check_attention_probabilities(const EvictionShape& s) {
  const int64_t stride = s.width + 5;
  const std::vector<int32_t> lengths = s.lengths();
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(size_t(s.batch) * s.n_query_heads * stride),
      lse(s.batch * s.n_query_heads);
  for (auto& x : logits) x = normal(rng);
  for (auto& x : lse) x = 2.0f + normal(rng) * 0.1f;
  std::vector<float> expected = logits;
  kernels::attention_probabilities(
      probabilities_args<kernels::AttentionProbabilitiesArgs>(s, expected, stride, lse, lengths));
  auto d_logits = to_device(logits), d_lse = to_device(lse), d_lengths = to_device(lengths);
  auto on_device =
      probabilities_args<cuda::AttentionProbabilitiesArgs>(s, logits, stride, lse, lengths);
  on_device.logits = d_logits.as<float>();
  on_device.lse = d_lse.as<float>();
  on_device.lengths = d_lengths.as<int32_t>();
  cuda::attention_probabilities(on_device, nullptr);
  const std::vector<float> got = from_device<float>(d_logits, logits.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], 1e-6 * std::abs(expected[i]) + 1e-30) << "at " << i;
}

struct ScoresRule {
  kernels::EvictionStatistic statistic;
  int pool_kernel;
  bool round_bf16;
  int recent;
};

template <typename Args>
Args scores_args(const EvictionShape& s, const ScoresRule& rule, const float* p, int64_t stride,
                 const int32_t* lengths, std::vector<float>& scores) {
  Args a;
  a.probabilities = p;
  a.probability_stride = stride;
  a.lengths = lengths;
  a.batch = s.batch;
  a.n_query_heads = s.n_query_heads;
  a.n_kv_heads = s.n_kv_heads;
  a.statistic = rule.statistic;
  a.pool_kernel = rule.pool_kernel;
  a.round_bf16 = rule.round_bf16;
  a.recent = rule.recent;
  a.scores = scores.data();
  a.score_stride = stride;
  return a;
}

inline void check_eviction_scores(const EvictionShape& s, const ScoresRule& rule) {
  const int64_t stride = s.width + 3;
  const std::vector<int32_t> lengths = s.lengths();
  const std::vector<float> p = eviction_probabilities(s, stride, 5);
  std::vector<float> scores(size_t(s.slots()) * stride);
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = 0.001f * float(i % 101);
  auto d_p = to_device(p), d_scores = to_device(scores), d_lengths = to_device(lengths);
  kernels::eviction_scores(
      scores_args<kernels::EvictionScoresArgs>(s, rule, p.data(), stride, lengths.data(), scores));
  auto on_device = scores_args<cuda::EvictionScoresArgs>(s, rule, d_p.as<float>(), stride,
                                                         d_lengths.as<int32_t>(), scores);
  on_device.scores = d_scores.as<float>();
  on_device.width = s.width;
  cuda::eviction_scores(on_device, nullptr);
  const std::vector<float> got = from_device<float>(d_scores, scores.size());
  for (int slot = 0; slot < s.slots(); ++slot)
    for (int j = 0; j < lengths[slot]; ++j) {
      const size_t at = slot * stride + j;
      ASSERT_NEAR(got[at], scores[at], 1e-6 * std::abs(scores[at])) << "slot " << slot << " " << j;
    }
}

struct KeepRule {
  int keep, sinks, recent;
  bool compact_scores;
};

// The rule's part of the arguments; the arrays are each twin's own.
template <typename Args>
Args keep_args(const EvictionShape& s, const KeepRule& rule, int capacity) {
  Args a;
  a.n_slots = s.slots();
  a.head_dim = s.head_dim;
  a.score_stride = capacity;
  a.compact_scores = rule.compact_scores;
  a.keep = rule.keep;
  a.sinks = rule.sinks;
  a.recent = rule.recent;
  a.n_kv_heads = s.n_kv_heads;
  return a;
}

inline void check_evict_to_keep(const EvictionShape& s, const KeepRule& rule) {
  const int capacity = s.width + 7, d = s.head_dim;
  std::vector<int32_t> lengths = s.lengths();
  const std::vector<float> keys = random_bf16_values(size_t(s.slots()) * capacity * d, 41);
  const std::vector<float> values = random_bf16_values(keys.size(), 43);
  std::vector<int64_t> offsets(s.slots());
  std::vector<float> scores(size_t(s.slots()) * capacity);
  std::vector<int32_t> ids(scores.size()), appended(s.batch);
  std::mt19937 rng(47);
  for (int slot = 0; slot < s.slots(); ++slot) {
    offsets[slot] = int64_t(slot) * capacity;
    for (int j = 0; j < capacity; ++j) {
      float score = float(int(rng() % 9) - 3) * 0.125f;  // many ties, both zeros
      if (rng() % 4 == 0) score = -score;
      if (rng() % 29 == 0) score = std::nanf("");
      scores[slot * capacity + j] = j < lengths[slot] ? score : 0.0f;
      ids[slot * capacity + j] = -1 - j;
    }
  }
  for (int b = 0; b < s.batch; ++b) appended[b] = 5000 + b;
  auto d_keys = to_device_bf16(keys), d_values = to_device_bf16(values);
  auto d_offsets = to_device(offsets), d_lengths = to_device(lengths), d_scores = to_device(scores);
  auto d_ids = to_device(ids), d_appended = to_device(appended);
  std::vector<float> host_keys = keys, host_values = values;
  auto on_host = keep_args<kernels::EvictToKeepArgs>(s, rule, capacity);
  on_host.keys = host_keys.data();
  on_host.values = host_values.data();
  on_host.kv_offset = offsets.data();
  on_host.lengths = lengths.data();
  on_host.scores = scores.data();
  on_host.entry_ids = ids.data();
  on_host.appended_ids = appended.data();
  kernels::evict_to_keep(on_host);
  auto on_device = keep_args<cuda::EvictToKeepArgs>(s, rule, capacity);
  on_device.keys = d_keys.as<__nv_bfloat16>();
  on_device.values = d_values.as<__nv_bfloat16>();
  on_device.kv_offset = d_offsets.as<int64_t>();
  on_device.lengths = d_lengths.as<int32_t>();
  on_device.scores = d_scores.as<float>();
  on_device.entry_ids = d_ids.as<int32_t>();
  on_device.appended_ids = d_appended.as<int32_t>();
  cuda::evict_to_keep(on_device, nullptr);
  ASSERT_EQ(from_device<int32_t>(d_lengths, lengths.size()), lengths);
  const std::vector<float> got_keys = from_device_bf16(d_keys, keys.size());
  const std::vector<float> got_values = from_device_bf16(d_values, values.size());
  const std::vector<float> got_scores = from_device<float>(d_scores, scores.size());
  const std::vector<int32_t> got_ids = from_device<int32_t>(d_ids, ids.size());
  for (int slot = 0; slot < s.slots(); ++slot) {
    const int64_t first = offsets[slot] * d, live = int64_t(lengths[slot]) * d;
    for (int64_t i = first; i < first + live; ++i) {
      ASSERT_EQ(got_keys[i], host_keys[i]) << "slot " << slot << " row " << (i - first) / d;
      ASSERT_EQ(got_values[i], host_values[i]) << "slot " << slot << " row " << (i - first) / d;
    }
    for (int j = 0; j < capacity; ++j) {
      const size_t at = slot * capacity + j;
      ASSERT_TRUE(got_scores[at] == scores[at] ||
                  (std::isnan(got_scores[at]) && std::isnan(scores[at])))
          << "slot " << slot << " entry " << j;
      ASSERT_EQ(got_ids[at], ids[at]) << "slot " << slot << " entry " << j;
    }
  }
}

inline std::vector<OpCase> eviction_cases() {
  std::vector<OpCase> cases;
  const EvictionShape shapes[] = {{1, 9, 3, 64, 1100},    // SmolLM2-135M
                                  {2, 14, 2, 64, 333},    // Qwen2.5-Coder-0.5B, two sequences
                                  {1, 32, 8, 128, 4097},  // Llama-3.1-8B
                                  {3, 4, 4, 128, 65}};    // no GQA
  auto shape_name = [](const EvictionShape& s) {
    return case_name("_batch", s.batch, "_hq", s.n_query_heads, "_hkv", s.n_kv_heads, "_d",
                     s.head_dim, "_width", s.width);
  };
  using kernels::EvictionStatistic;
  for (const EvictionShape& s : shapes) {
    cases.push_back(
        {"attention_probabilities" + shape_name(s), [s] { check_attention_probabilities(s); }});
    const std::pair<const char*, ScoresRule> scores[] = {
        {"accumulated", {EvictionStatistic::kAccumulatedGroupSum, 1, false, 0}},
        {"layer_mean", {EvictionStatistic::kLayerMean, 1, false, 0}},
        {"pooled_bf16", {EvictionStatistic::kPooledGroupMean, 5, true, 32}},
        {"pooled_f32", {EvictionStatistic::kPooledGroupMean, 7, false, 3}}};
    for (const auto& [name, rule] : scores)
      cases.push_back({case_name("eviction_scores_", name, shape_name(s)),
                       [s, rule] { check_eviction_scores(s, rule); }});
    // One entry over the budget (the steady state), many (a question past it), the protected
    // entries filling the budget, and a budget above every length.
    const std::pair<const char*, KeepRule> keeps[] = {{"one_over", {s.width - 1, 0, 8, true}},
                                                      {"many_over", {s.width / 4, 4, 16, false}},
                                                      {"protected", {3, 2, 4, true}},
                                                      {"none_over", {s.width, 0, 0, true}}};
    for (const auto& [name, rule] : keeps)
      cases.push_back({case_name("evict_to_keep_", name, shape_name(s)),
                       [s, rule] { check_evict_to_keep(s, rule); }});
  }
  return cases;
}

}  // namespace kvb::test
