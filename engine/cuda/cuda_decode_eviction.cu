#include <algorithm>
#include <string>
#include <utility>

#include "common/errors.h"
#include "engine/cuda/cuda_decode_eviction.h"
#include "kernels/cpu/decode_eviction.h"
#include "kernels/cuda/decode_eviction.h"
#include "kernels/cuda/query_key_scores.h"

namespace kvb {

namespace {

using Statistic = DeviceEvictionSpec::Statistic;

void check_spec(const DeviceEvictionSpec& spec, const ModelConfig& config) {
  const int d = config.head_dim, group = config.n_query_heads / config.n_kv_heads;
  if (d % 8 != 0 || d > 256)
    throw InputError("GPU decode eviction needs head_dim a multiple of 8 up to 256; " +
                     config.name + " has " + std::to_string(d));
  if (group > 16)
    throw InputError("GPU decode eviction needs a GQA group of at most 16; " + config.name +
                     " has " + std::to_string(group));
  if (static_cast<int>(spec.keep.size()) != config.n_layers)
    throw InputError("GPU decode eviction: the spec's keep holds " +
                     std::to_string(spec.keep.size()) + " layers; " + config.name + " has " +
                     std::to_string(config.n_layers));
  if (spec.pool_kernel < 1 || spec.pool_kernel % 2 == 0)
    throw InputError("GPU decode eviction: pool_kernel " + std::to_string(spec.pool_kernel) +
                     " must be an odd number >= 1");
}

// The initial statistic of one (layer, slot), zero-padded to the capacity.
std::vector<float> initial_row(const DeviceEvictionSpec& spec, int layer, int head, int length,
                               int capacity) {
  std::vector<float> row(capacity, 0.0f);
  if (layer >= static_cast<int>(spec.initial.size()) ||
      head >= static_cast<int>(spec.initial[layer].size()))
    return row;
  const std::vector<float>& given = spec.initial[layer][head];
  if (static_cast<int>(given.size()) > length)
    throw InputError("GPU decode eviction: layer " + std::to_string(layer) + " head " +
                     std::to_string(head) + " starts with " + std::to_string(given.size()) +
                     " accumulated scores for " + std::to_string(length) +
                     " cached entries; start the eviction right after the prefill's compaction");
  std::copy(given.begin(), given.end(), row.begin());
  return row;
}

}  // namespace

CudaDecodeEviction::CudaDecodeEviction(DeviceEvictionSpec spec, const ModelConfig& config,
                                       int batch, int capacity, const std::vector<int32_t>& lengths,
                                       int first, int count, cudaStream_t stream)
    : spec_(std::move(spec)), config_(config), batch_(batch), capacity_(capacity) {
  check_spec(spec_, config_);
  const int hkv = config.n_kv_heads, slots = batch * hkv;
  logits_ = cuda::DeviceBuffer(size_t(batch) * config.n_query_heads * capacity * 4, "eviction p");
  lse_ = cuda::DeviceBuffer(size_t(batch) * config.n_query_heads * 4, "eviction lse");
  scores_ = cuda::DeviceBuffer(size_t(slots) * capacity * 4, "eviction scores");
  if (spec_.record_origins) {
    std::vector<int32_t> ids(size_t(slots) * capacity);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = -1 - static_cast<int32_t>(i % capacity);
    origins_.resize(config.n_layers);
    for (int l = 0; l < config.n_layers; ++l) {
      if (!spec_.evicts(l)) continue;
      origins_[l] = cuda::DeviceBuffer(ids.size() * 4, "entry origins");
      origins_[l].upload(ids.data(), ids.size() * 4);
    }
  }
  if (spec_.statistic != Statistic::kAccumulatedGroupSum) return;
  accumulated_.resize(config.n_layers);
  std::vector<float> rows(size_t(slots) * capacity);
  for (int l = 0; l < config.n_layers; ++l) {
    if (!spec_.evicts(l)) continue;
    for (int s = first * hkv; s < (first + count) * hkv; ++s) {
      const std::vector<float> row =
          initial_row(spec_, l, s % hkv, lengths[int64_t(l) * slots + s], capacity);
      std::copy(row.begin(), row.end(), rows.begin() + int64_t(s) * capacity);
    }
    accumulated_[l] = cuda::DeviceBuffer(rows.size() * 4, "accumulated scores");
    accumulated_[l].upload(rows.data(), rows.size() * 4);
  }
  cuda::check(cudaStreamSynchronize(stream), "eviction start");
}

void CudaDecodeEviction::evict(int layer, const cuda::DecodeAttentionArgs& a,
                               __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, int32_t* lengths,
                               const int32_t* positions, int first, cudaStream_t stream) const {
  const int d = config_.head_dim, hkv = config_.n_kv_heads;
  const int64_t first_slot = int64_t(first) * hkv;
  const int width = a.max_kv_length;
  // a.kv_length are `lengths`: the step's token counted.
  cuda::query_key_scores(
      cuda::decode_step_scores(a, k_cache + first_slot * capacity_ * d, int64_t(capacity_) * d,
                               width, logits_.as<float>(), capacity_),
      stream);
  cuda::attention_probabilities({.logits = logits_.as<float>(),
                                 .stride = capacity_,
                                 .lse = lse_.as<float>(),
                                 .lengths = lengths,
                                 .batch = a.batch,
                                 .n_query_heads = config_.n_query_heads,
                                 .n_kv_heads = hkv,
                                 .width = width,
                                 .scale = a.scale},
                                stream);
  float* scores = accumulated_.empty() ? scores_.as<float>()
                                       : accumulated_[layer].as<float>() + first_slot * capacity_;
  cuda::EvictionScoresArgs statistic;
  statistic.probabilities = logits_.as<float>();
  statistic.probability_stride = capacity_;
  statistic.lengths = lengths;
  statistic.batch = a.batch;
  statistic.n_query_heads = config_.n_query_heads;
  statistic.n_kv_heads = hkv;
  statistic.width = width;
  statistic.scores = scores;
  statistic.score_stride = capacity_;
  set_scores_rule(spec_, statistic);
  cuda::eviction_scores(statistic, stream);
  cuda::EvictToKeepArgs evict;
  evict.keys = k_cache;
  evict.values = v_cache;
  evict.kv_offset = a.kv_offset;
  evict.lengths = lengths;
  evict.n_slots = a.batch * hkv;
  evict.head_dim = d;
  evict.scores = scores;
  evict.score_stride = capacity_;
  set_keep_rule(spec_, layer, evict);
  if (spec_.record_origins)
    evict.entry_ids = origins_[layer].as<int32_t>() + first_slot * capacity_;
  evict.appended_ids = positions;
  evict.n_kv_heads = hkv;
  cuda::evict_to_keep(evict, stream);
}

std::vector<int32_t> CudaDecodeEviction::origins(int layer, int64_t slot, int length,
                                                 cudaStream_t stream) const {
  if (!spec_.record_origins || !spec_.evicts(layer)) return {};
  std::vector<int32_t> out(length);
  cuda::check(cudaStreamSynchronize(stream), "eviction origins");
  origins_[layer].download(out.data(), out.size() * 4, size_t(slot) * capacity_ * 4);
  return out;
}

void CudaDecodeEviction::follow_lengths(std::vector<int32_t>& lengths, int first, int count) const {
  const int64_t slots = int64_t(batch_) * config_.n_kv_heads;
  for (int l = 0; l < config_.n_layers; ++l) {
    if (!spec_.evicts(l)) continue;
    for (int64_t s = int64_t(first) * config_.n_kv_heads;
         s < int64_t(first + count) * config_.n_kv_heads; ++s) {
      int32_t& length = lengths[l * slots + s];
      length = kernels::evicted_length(length, spec_.keep[l], spec_.sinks, spec_.recent);
    }
  }
}

}  // namespace kvb
