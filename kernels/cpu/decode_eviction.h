// Decode-time eviction's building blocks: the contract the CUDA kernels
// (kernels/cuda/decode_eviction.h) are checked against (tests/cuda/backend_ops_test.cc), and the
// CPU emulation of a device engine's eviction step (tests/policies/device_eviction_test.cc).
//
// A slot is one (sequence b, KV head h), s = b * Hkv + h; query head a of sequence b is row
// b * Hq + a of the per-query-head arrays and belongs to slot b * Hkv + a / g (g = Hq / Hkv).
// lengths[s] counts the slot's entries, the step's own token included.
//
// attention_probabilities: p[j] = exp(scale * logit[j] - lse) for j < length, 0 beyond (in place
//   allowed): the step's softmax from its logits and the attention's log-sum-exp (natural log).
// eviction_scores: one score per entry of every slot from p (EvictionStatistic below).
// evict_to_keep: every slot holding more than `keep` entries keeps the first `sinks`, the last
//   `recent` and the best-scoring others up to max(keep, sinks + recent) in all, lower position
//   first among equal scores and NaN lowest (policies/selection.h keep_top's rule), and is
//   compacted in order: its K and V rows, its scores when `compact_scores` (an accumulated
//   statistic; the freed tail is zeroed), its length.
#pragma once

#include <cstdint>

namespace kvb::kernels {

struct AttentionProbabilitiesArgs {
  float* logits = nullptr;  // [B * Hq, stride]: q.k of row b * Hq + a on entry j; p on return
  int64_t stride = 0;
  const float* lse = nullptr;        // [Hq, B]: log-sum-exp of the scaled logits of (a, b)
  const int32_t* lengths = nullptr;  // [B * Hkv]
  int batch = 0, n_query_heads = 0, n_kv_heads = 0;
  int width = 0;  // entries written per row (0 from the slot's length on)
  float scale = 0;
};
void attention_probabilities(const AttentionProbabilitiesArgs& args);

enum class EvictionStatistic {
  // scores[s][j] += Σ_{a in s's group} p_a[j], in head order (carried across steps).
  kAccumulatedGroupSum,
  // scores[s][j] = Σ_a (p_a[j] / Hq) over all Hq heads of the sequence, in head order.
  kLayerMean,
  // For j < prefix = length - recent: each p_a rounded to bf16 when round_bf16, average-pooled
  // over [0, prefix) (kernel k, zero padding counted: Σ / k, rounded), then Σ over the group in
  // head order / g; entries from prefix on score 0.
  kPooledGroupMean,
};

struct EvictionScoresArgs {
  const float* probabilities = nullptr;  // [B * Hq, probability_stride]
  int64_t probability_stride = 0;
  const int32_t* lengths = nullptr;  // [B * Hkv]
  int batch = 0, n_query_heads = 0, n_kv_heads = 0;
  EvictionStatistic statistic = EvictionStatistic::kAccumulatedGroupSum;
  int pool_kernel = 1;  // odd
  bool round_bf16 = false;
  int recent = 0;
  float* scores = nullptr;  // [B * Hkv, score_stride]
  int64_t score_stride = 0;
};
void eviction_scores(const EvictionScoresArgs& args);

struct EvictToKeepArgs {
  float* keys = nullptr;  // rows of head_dim; slot s from row kv_offset[s]
  float* values = nullptr;
  const int64_t* kv_offset = nullptr;  // [n_slots]
  int32_t* lengths = nullptr;          // [n_slots], updated
  int n_slots = 0, head_dim = 0;
  float* scores = nullptr;  // [n_slots, score_stride]
  int64_t score_stride = 0;
  bool compact_scores = false;
  int keep = 0;  // < 0: the layer is left alone (nothing is written, not even the id)
  int sinks = 0, recent = 0;
  // Optional, [n_slots, score_stride]: an id per entry, compacted with the rows; the step's entry
  // (the slot's last) first gets appended_ids[s / n_kv_heads].
  int32_t* entry_ids = nullptr;
  const int32_t* appended_ids = nullptr;
  int n_kv_heads = 1;
};
void evict_to_keep(const EvictToKeepArgs& args);

// The length a slot of `length` entries has after evict_to_keep (the host's mirror of the device
// lengths, with no copy back).
int evicted_length(int length, int keep, int sinks, int recent);

// The order evict_to_keep ranks candidates by: larger keys are kept first. The score's order
// (NaN as -inf, -0 as +0) in the high 32 bits, the complement of the position in the low 32 bits.
uint64_t eviction_rank_key(float score, int position);

}  // namespace kvb::kernels
