// Decode eviction's CPU twins (kernels/cpu/decode_eviction.h) against brute force:
// - attention_probabilities against a softmax in double over each row's live entries;
// - eviction_scores against the statistics written out one by one (accumulated group sums, the
//   layer mean, and the pooled group mean through the policies' own pool1d / reduce_groups,
//   policies/selection.h, which the twin must reproduce bit for bit);
// - evict_to_keep against a rank count (an entry stays when fewer than `rest` candidates beat it:
//   higher score, or the same score and a lower position; NaN as -inf; both zeros tie) and against
//   keep_top itself, with the rows, scores and ids compacted in order and the tail zeroed;
// - evicted_length against the kept count.
#include "kernels/cpu/decode_eviction.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "policies/selection.h"

namespace kvb::kernels {
namespace {

constexpr int kBatch = 2, kQueryHeads = 6, kKvHeads = 2, kStride = 40, kWidth = 36;
// Per slot (b * Hkv + h): live entries, the step's token included.
const std::vector<int32_t> kLengths = {5, 36, 1, 23};

int slot_of(int b, int q) { return b * kKvHeads + q / (kQueryHeads / kKvHeads); }

// Probability rows [B * Hq, kStride] that sum to 1 over each slot's live entries.
std::vector<float> random_probabilities(uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> weight(1.0f);
  std::vector<float> p(size_t(kBatch) * kQueryHeads * kStride, 0.0f);
  for (int b = 0; b < kBatch; ++b)
    for (int q = 0; q < kQueryHeads; ++q) {
      float* row = p.data() + (b * kQueryHeads + q) * kStride;
      const int length = kLengths[slot_of(b, q)];
      float sum = 0;
      for (int j = 0; j < length; ++j) sum += row[j] = weight(rng);
      for (int j = 0; j < length; ++j) row[j] /= sum;
    }
  return p;
}

TEST(DecodeEviction, AttentionProbabilitiesAreTheSoftmaxOfTheLogits) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(size_t(kBatch) * kQueryHeads * kStride);
  for (auto& x : logits) x = normal(rng);
  const std::vector<float> original = logits;
  const float scale = 0.125f;
  std::vector<float> lse(kQueryHeads * kBatch);
  for (int b = 0; b < kBatch; ++b)
    for (int q = 0; q < kQueryHeads; ++q) {
      double sum = 0;
      for (int j = 0; j < kLengths[slot_of(b, q)]; ++j)
        sum += std::exp(double(original[(b * kQueryHeads + q) * kStride + j]) * scale);
      lse[q * kBatch + b] = static_cast<float>(std::log(sum));
    }
  attention_probabilities({.logits = logits.data(),
                           .stride = kStride,
                           .lse = lse.data(),
                           .lengths = kLengths.data(),
                           .batch = kBatch,
                           .n_query_heads = kQueryHeads,
                           .n_kv_heads = kKvHeads,
                           .width = kWidth,
                           .scale = scale});
  for (int b = 0; b < kBatch; ++b)
    for (int q = 0; q < kQueryHeads; ++q) {
      const int row = (b * kQueryHeads + q) * kStride, length = kLengths[slot_of(b, q)];
      double total = 0, sum = 0;
      for (int j = 0; j < length; ++j) total += std::exp(double(original[row + j]) * scale);
      for (int j = 0; j < kWidth; ++j) {
        const double expected =
            j < length ? std::exp(double(original[row + j]) * scale) / total : 0.0;
        EXPECT_NEAR(logits[row + j], expected, 1e-6) << "row " << row << " entry " << j;
        sum += logits[row + j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      for (int j = kWidth; j < kStride; ++j) EXPECT_EQ(logits[row + j], original[row + j]);
    }
}

EvictionScoresArgs scores_args(const std::vector<float>& p, std::vector<float>& scores,
                               EvictionStatistic statistic) {
  return {.probabilities = p.data(),
          .probability_stride = kStride,
          .lengths = kLengths.data(),
          .batch = kBatch,
          .n_query_heads = kQueryHeads,
          .n_kv_heads = kKvHeads,
          .statistic = statistic,
          .scores = scores.data(),
          .score_stride = kStride};
}

TEST(DecodeEviction, AccumulatedGroupSumsAndLayerMeans) {
  const std::vector<float> p = random_probabilities(5);
  std::vector<float> accumulated(size_t(kBatch) * kKvHeads * kStride);
  for (size_t i = 0; i < accumulated.size(); ++i) accumulated[i] = 0.01f * float(i % 17);
  const std::vector<float> before = accumulated;
  eviction_scores(scores_args(p, accumulated, EvictionStatistic::kAccumulatedGroupSum));
  std::vector<float> mean(accumulated.size(), -7.0f);
  eviction_scores(scores_args(p, mean, EvictionStatistic::kLayerMean));
  const int group = kQueryHeads / kKvHeads;
  for (int b = 0; b < kBatch; ++b)
    for (int h = 0; h < kKvHeads; ++h) {
      const int slot = b * kKvHeads + h;
      for (int j = 0; j < kStride; ++j) {
        const size_t at = slot * kStride + j;
        if (j >= kLengths[slot]) {  // nothing written past the live entries
          EXPECT_EQ(accumulated[at], before[at]);
          EXPECT_EQ(mean[at], -7.0f);
          continue;
        }
        double sum = before[at], layer = 0;
        for (int a = h * group; a < (h + 1) * group; ++a)
          sum += p[(b * kQueryHeads + a) * kStride + j];
        for (int a = 0; a < kQueryHeads; ++a) layer += p[(b * kQueryHeads + a) * kStride + j];
        EXPECT_NEAR(accumulated[at], sum, 1e-6) << "slot " << slot << " entry " << j;
        EXPECT_NEAR(mean[at], layer / kQueryHeads, 1e-7) << "slot " << slot << " entry " << j;
      }
    }
}

TEST(DecodeEviction, PooledGroupMeanIsThePoliciesPoolingBitForBit) {
  const std::vector<float> p = random_probabilities(7);
  const int group = kQueryHeads / kKvHeads;
  for (const int kernel : {1, 5, 7})
    for (const bool round : {false, true})
      for (const int recent : {0, 3, 40}) {
        SCOPED_TRACE(testing::Message()
                     << "kernel " << kernel << " bf16 " << round << " recent " << recent);
        std::vector<float> scores(size_t(kBatch) * kKvHeads * kStride, -1.0f);
        EvictionScoresArgs args = scores_args(p, scores, EvictionStatistic::kPooledGroupMean);
        args.pool_kernel = kernel;
        args.round_bf16 = round;
        args.recent = recent;
        eviction_scores(args);
        const Precision precision = round ? Precision::kBf16 : Precision::kFp32;
        for (int b = 0; b < kBatch; ++b)
          for (int h = 0; h < kKvHeads; ++h) {
            const int slot = b * kKvHeads + h, length = kLengths[slot];
            const int prefix = std::max(0, length - recent);
            std::vector<std::vector<float>> pooled;
            for (int a = h * group; a < (h + 1) * group; ++a) {
              std::vector<float> row(prefix);
              for (int j = 0; j < prefix; ++j)
                row[j] = maybe_bf16(p[(b * kQueryHeads + a) * kStride + j], precision);
              pooled.push_back(pool1d(row, kernel, Pooling::kAvg, precision));
            }
            std::vector<float> expected = reduce_groups(pooled, 1, GroupReduce::kMean)[0];
            expected.resize(length, 0.0f);
            for (int j = 0; j < length; ++j)
              ASSERT_EQ(scores[slot * kStride + j], expected[j]) << "slot " << slot << " " << j;
          }
      }
}

// Candidates in [sinks, length - recent) stay when fewer than `rest` of them rank higher.
std::vector<int32_t> kept_by_rank_count(const std::vector<float>& scores, int length, int keep,
                                        int sinks, int recent) {
  if (keep < 0 || length <= keep) return keep_all(length);
  sinks = std::min(sinks, length);
  recent = std::min(recent, length - sinks);
  const int rest = std::max(0, keep - sinks - recent);
  auto value = [&](int j) {
    return std::isnan(scores[j]) ? -std::numeric_limits<float>::infinity() : scores[j];
  };
  std::vector<int32_t> kept;
  for (int j = 0; j < length; ++j) {
    if (j < sinks || j >= length - recent) {
      kept.push_back(j);
      continue;
    }
    int better = 0;
    for (int i = sinks; i < length - recent; ++i)
      better += value(i) > value(j) || (value(i) == value(j) && i < j);
    if (better < rest) kept.push_back(j);
  }
  return kept;
}

TEST(DecodeEviction, EvictToKeepKeepsTheRankCountsBestAndCompactsInOrder) {
  std::mt19937 rng(11);
  constexpr int kSlots = 5, kDim = 3, kCapacity = 48;
  const std::vector<int32_t> lengths = {48, 20, 9, 1, 30};
  struct Rule {
    int keep, sinks, recent;
  };
  for (const Rule rule : {Rule{8, 0, 0}, Rule{8, 0, 4}, Rule{12, 2, 3}, Rule{3, 2, 4},
                          Rule{0, 0, 0}, Rule{30, 1, 1}, Rule{-1, 0, 0}}) {
    SCOPED_TRACE(testing::Message()
                 << "keep " << rule.keep << " sinks " << rule.sinks << " recent " << rule.recent);
    std::vector<float> keys(size_t(kSlots) * kCapacity * kDim), values(keys.size());
    std::vector<float> scores(size_t(kSlots) * kCapacity, 0.0f);
    std::vector<int32_t> ids(scores.size(), -99), appended = {1000, 2000, 3000};
    std::vector<int64_t> offsets(kSlots);
    for (int s = 0; s < kSlots; ++s) {
      offsets[s] = int64_t(s) * kCapacity;
      for (int j = 0; j < kCapacity; ++j) {
        for (int i = 0; i < kDim; ++i) {
          keys[(offsets[s] + j) * kDim + i] = float(j * 10 + i);
          values[(offsets[s] + j) * kDim + i] = -float(j * 10 + i);
        }
        // Many ties, both zeros, and a NaN now and then.
        float score = float(int(rng() % 7) - 2) * 0.25f;
        if (rng() % 5 == 0) score = -score;
        if (rng() % 13 == 0) score = std::numeric_limits<float>::quiet_NaN();
        if (j < lengths[s]) scores[s * kCapacity + j] = score;
        ids[s * kCapacity + j] = -1 - j;
      }
    }
    const std::vector<float> scores_before = scores;
    std::vector<int32_t> lengths_after = lengths;
    evict_to_keep({.keys = keys.data(),
                   .values = values.data(),
                   .kv_offset = offsets.data(),
                   .lengths = lengths_after.data(),
                   .n_slots = kSlots,
                   .head_dim = kDim,
                   .scores = scores.data(),
                   .score_stride = kCapacity,
                   .compact_scores = true,
                   .keep = rule.keep,
                   .sinks = rule.sinks,
                   .recent = rule.recent,
                   .entry_ids = ids.data(),
                   .appended_ids = appended.data(),
                   .n_kv_heads = 2});
    for (int s = 0; s < kSlots; ++s) {
      const std::vector<float> slot_scores(scores_before.begin() + s * kCapacity,
                                           scores_before.begin() + (s + 1) * kCapacity);
      const std::vector<int32_t> kept =
          kept_by_rank_count(slot_scores, lengths[s], rule.keep, rule.sinks, rule.recent);
      if (rule.keep >= 0) {
        EXPECT_EQ(kept, keep_top(std::span(slot_scores).first(lengths[s]), rule.keep, rule.sinks,
                                 rule.recent));
      }
      const int n = static_cast<int>(kept.size());
      ASSERT_EQ(lengths_after[s], n) << "slot " << s;
      EXPECT_EQ(evicted_length(lengths[s], rule.keep, rule.sinks, rule.recent), n);
      for (int i = 0; i < n; ++i) {
        const int j = kept[i];
        EXPECT_EQ(keys[(offsets[s] + i) * kDim + 2], float(j * 10 + 2)) << "slot " << s;
        EXPECT_EQ(values[(offsets[s] + i) * kDim], -float(j * 10)) << "slot " << s;
        const float was = slot_scores[j];
        const float now = scores[s * kCapacity + i];
        EXPECT_TRUE(now == was || (std::isnan(now) && std::isnan(was))) << "slot " << s;
        const int32_t id = rule.keep >= 0 && j == lengths[s] - 1 ? appended[s / 2] : -1 - j;
        EXPECT_EQ(ids[s * kCapacity + i], id) << "slot " << s << " kept " << j;
      }
      for (int j = n; j < lengths[s]; ++j) EXPECT_EQ(scores[s * kCapacity + j], 0.0f);
    }
  }
}

}  // namespace
}  // namespace kvb::kernels
