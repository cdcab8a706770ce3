// Decode-time eviction (kind C) inside CudaEngine's decode step, from the generic operations a
// policy asks for (engine/device_eviction.h). In each evicting layer the step appends its token,
// runs the dense attention with its log-sum-exp, then (kernels/cuda/decode_eviction.h,
// kernels/cuda/query_key_scores.h):
//   1. the exact q.k of every cached entry per query head (query_key_scores), normalised with the
//      attention's log-sum-exp into the step's probabilities (attention_probabilities);
//   2. the spec's statistic per (sequence, KV head) entry (eviction_scores), accumulated in a
//      buffer that lives across steps where the spec asks for it;
//   3. every head over its layer's keep count keeps its best entries and is compacted in order on
//      the device (evict_to_keep): K, V, the accumulated statistic and the length.
// No number crosses to the host: the host's mirror of the lengths follows the same rule
// (kernels::evicted_length), so the engine's capacity checks and graph bounds stay right and one
// captured decode graph serves every step. Each policy's CPU after_step() is the twin:
// tests/cuda/cuda_eviction_engine_test.cc compares their kept positions on SmolLM2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/device_eviction.h"
#include "engine/model_config.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_utils.h"

namespace kvb {

class CudaDecodeEviction {
 public:
  // `lengths` are the engine's host lengths [n_layers * batch * Hkv] now (the accumulated
  // statistic's initial values must fit them). Every sequence of [first, first + count) starts
  // from the same spec.initial; the batch's other sequences (which do not decode under it) from
  // zero. InputError for a spec the device does not run (names the field and the fix).
  CudaDecodeEviction(DeviceEvictionSpec spec, const ModelConfig& config, int batch, int capacity,
                     const std::vector<int32_t>& lengths, int first, int count,
                     cudaStream_t stream);

  bool evicts(int layer) const { return spec_.evicts(layer); }
  // Where the attention of an evicting layer writes its log-sum-exp ([Hq, count] for a step over
  // `count` sequences).
  float* lse() const { return lse_.as<float>(); }
  // After the attention `attention` of layer `layer` for sequences [first, first + attention.batch)
  // (rotated queries at attention.q, the step's token appended, attention.lse written): scores and
  // evicts in `k_cache`, `v_cache` and `lengths` (the device lengths from `first` on).
  // `positions` are the step's token positions from `first` on (the appended entries' origins).
  void evict(int layer, const cuda::DecodeAttentionArgs& attention, __nv_bfloat16* k_cache,
             __nv_bfloat16* v_cache, int32_t* lengths, const int32_t* positions, int first,
             cudaStream_t stream) const;
  // With spec.record_origins: the origins (DeviceEvictionSpec::record_origins) of the `length`
  // entries slot `slot` holds at `layer` (synchronises).
  std::vector<int32_t> origins(int layer, int64_t slot, int length, cudaStream_t stream) const;
  // The host mirror of a step over [first, first + count) once it ran: `lengths` is the engine's
  // [n_layers * batch * Hkv], already counting the step's token.
  void follow_lengths(std::vector<int32_t>& lengths, int first, int count) const;

 private:
  DeviceEvictionSpec spec_;
  ModelConfig config_;
  int batch_ = 0, capacity_ = 0;
  cuda::DeviceBuffer logits_;                    // [batch * Hq, capacity]: q.k, then p
  cuda::DeviceBuffer lse_;                       // [Hq * batch]
  cuda::DeviceBuffer scores_;                    // [batch * Hkv, capacity]: this step's statistic
  std::vector<cuda::DeviceBuffer> accumulated_;  // per layer [batch * Hkv, capacity], or empty
  std::vector<cuda::DeviceBuffer> origins_;  // record_origins: per layer [batch * Hkv, capacity]
};

}  // namespace kvb
