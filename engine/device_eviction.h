// A decode-time eviction (kind C) as the generic operations a device engine runs inside its decode
// step, the analogue of engine/device_selection.h for selection: after each layer's attention the
// step derives one statistic per cached entry from that attention's own probabilities, and every
// (sequence, KV head) that holds more than its layer's `keep` entries keeps `keep` of them: the
// protected ones (the first `sinks`, the last `recent`) and the best-scoring others, lower position
// first among equal scores (policies/selection.h keep_top), compacted in order on the device. A
// policy (policies/) fills this from its own parameters and state
// (DecodeEvictionPolicy::device_eviction); the engine reads only these building blocks and never
// learns which method asked for them. Plain C++ so that the policy layer can build it without CUDA.
#pragma once

#include <vector>

#include "kernels/cpu/decode_eviction.h"

namespace kvb {

struct DeviceEvictionSpec {
  // What one entry j of (sequence, KV head h) scores at a step, from p_a[j], the step's attention
  // probability of query head a on entry j (a in h's GQA group G of g heads, or all Hq heads).
  enum class Statistic {
    // S[j] += Σ_{a∈G} p_a[j] (in head order), carried across steps and through the compaction;
    // an entry appended by the step starts from 0.
    kAccumulatedGroupSum,
    // This step's (Σ_a p_a[j] / Hq) over all Hq query heads of the layer, in head order: one score
    // for every KV head of the sequence.
    kLayerMean,
    // This step's p over the entries before the last `recent`: each p rounded (round_bf16),
    // average-pooled over those entries (pool_kernel wide, zero padding counted, rounded), then
    // the group mean (Σ in head order, / g); the last `recent` entries score 0.
    kPooledGroupMean,
  };
  Statistic statistic = Statistic::kAccumulatedGroupSum;
  int pool_kernel = 1;      // kPooledGroupMean: odd, >= 1
  bool round_bf16 = false;  // kPooledGroupMean: emulate the bf16 casts of the reference

  // Per layer: once a head holds more than keep[l] entries it keeps max(keep[l], sinks + recent);
  // a negative keep[l] leaves the layer alone (a dense layer).
  std::vector<int> keep;
  int sinks = 0;
  int recent = 0;

  // kAccumulatedGroupSum: the statistic the prefill gave the entries held at the start,
  // [layer][KV head][entry]; missing entries (a question appended after compaction) start from 0.
  std::vector<std::vector<std::vector<float>>> initial;

  // Keep the origin of every entry of the evicting layers (tests compare the kept positions with
  // the CPU's): -(1 + i) for the i-th entry a head held at the start, the token's position for an
  // entry a decode step appended.
  bool record_origins = false;

  bool evicts(int layer) const { return layer < static_cast<int>(keep.size()) && keep[layer] >= 0; }
};

// The spec's rule in the arguments of the kernels that run it (kernels/cpu/decode_eviction.h and
// its device twin, whose fields are the same): what eviction_scores derives, and what
// evict_to_keep keeps in `layer`. A device engine and the tests that emulate it with the CPU twins
// share these.
inline kernels::EvictionStatistic eviction_statistic(DeviceEvictionSpec::Statistic statistic) {
  switch (statistic) {
    case DeviceEvictionSpec::Statistic::kAccumulatedGroupSum:
      return kernels::EvictionStatistic::kAccumulatedGroupSum;
    case DeviceEvictionSpec::Statistic::kLayerMean:
      return kernels::EvictionStatistic::kLayerMean;
    case DeviceEvictionSpec::Statistic::kPooledGroupMean:
      break;
  }
  return kernels::EvictionStatistic::kPooledGroupMean;
}

template <typename ScoresArgs>
void set_scores_rule(const DeviceEvictionSpec& spec, ScoresArgs& args) {
  args.statistic = eviction_statistic(spec.statistic);
  args.pool_kernel = spec.pool_kernel;
  args.round_bf16 = spec.round_bf16;
  args.recent = spec.recent;
}

template <typename KeepArgs>
void set_keep_rule(const DeviceEvictionSpec& spec, int layer, KeepArgs& args) {
  args.keep = spec.keep[layer];
  args.sinks = spec.sinks;
  args.recent = spec.recent;
  // An accumulated statistic belongs to its entries: it moves with them.
  args.compact_scores = spec.statistic == DeviceEvictionSpec::Statistic::kAccumulatedGroupSum;
}

}  // namespace kvb
