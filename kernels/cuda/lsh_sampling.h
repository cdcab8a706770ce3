// LSH sampling with importance weights on the GPU (docs/methods.md §11). CPU twin:
// kernels/cpu/lsh_sampling.h (the same means, codes, lists and, up to f64 rounding, biases). Test:
// tests/cuda/lsh_sampling_check.h (backend-ops rows) and tests/cuda/cuda_sparse_engine_test.cc.
//
// A "slot" is one (sequence, KV head) pair, slot = b * Hkv + h, with its own rows [K * L, d]
// (projections[slot], a device pointer: slots of one KV head share them). After prefill:
//   lsh_key_mean      the f64 mean of each slot's middle keys [begin, end), rounded to f32;
//   lsh_hash_keys     their codes (table-major, 16-bit) and centred norms.
// Each decode step of one layer:
//   lsh_hash_queries  the L codes of every query head (its KV head's rows);
//   lsh_sample_lists  per query head: the collisions of every hashed key, then the list
//                     [0, begin) + sampled keys of [begin, end) in increasing order + [end, T)
//                     with T the slot's device length, in decode_attention's index-list format
//                     with a parallel logit bias (-log(u + 1e-4) for sampled keys, 0 otherwise).
// Sign bits are decided as the CPU's: a product within f32 rounding of zero is taken again in f64.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvb::cuda {

inline constexpr int kLshMaxGroup = 8;  // query heads per KV head

struct LshKeyMeanArgs {
  const __nv_bfloat16* keys = nullptr;  // slot s, entry j: keys + s * key_slot_stride + j * d
  int64_t key_slot_stride = 0;
  int n_slots = 0;
  int head_dim = 0;  // 64 or 128
  int begin = 0, end = 0;
  float* mean = nullptr;  // [n_slots, head_dim]
};
void lsh_key_mean(const LshKeyMeanArgs& args, cudaStream_t stream);

struct LshHashKeysArgs {
  const float* const* projections = nullptr;  // [n_slots] device pointers to [K * L, d] rows
  int bits_per_table = 0, tables = 0;         // K (<= 16), L
  const __nv_bfloat16* keys = nullptr;        // as in LshKeyMeanArgs
  int64_t key_slot_stride = 0;
  const float* mean = nullptr;  // [n_slots, head_dim]
  int n_slots = 0;
  int head_dim = 0;
  int begin = 0, end = 0;
  // Slot s, table l, key j: codes[s * code_slot_stride + l * code_table_stride + j - begin].
  uint16_t* codes = nullptr;
  int64_t code_slot_stride = 0, code_table_stride = 0;
  float* centred_norms = nullptr;  // slot s, key j: [s * norm_slot_stride + j - begin]
  int64_t norm_slot_stride = 0;
};
void lsh_hash_keys(const LshHashKeysArgs& args, cudaStream_t stream);

struct LshHashQueriesArgs {
  const float* const* projections = nullptr;  // [B * Hkv]
  int bits_per_table = 0, tables = 0;
  const __nv_bfloat16* q = nullptr;  // [B, Hq, head_dim] with q_seq_stride between sequences
  int64_t q_seq_stride = 0;
  int batch = 0, n_query_heads = 0, n_kv_heads = 0, head_dim = 0;  // group <= kLshMaxGroup
  uint16_t* codes = nullptr;                                       // [B * Hq, tables]
};
void lsh_hash_queries(const LshHashQueriesArgs& args, cudaStream_t stream);

struct LshSampleListsArgs {
  int bits_per_table = 0, tables = 0, min_collisions = 0;
  const __nv_bfloat16* q = nullptr;  // as in LshHashQueriesArgs
  int64_t q_seq_stride = 0;
  const uint16_t* query_codes = nullptr;  // lsh_hash_queries
  const __nv_bfloat16* keys = nullptr;    // slot s, entry j: keys + s * key_slot_stride + j * d
  int64_t key_slot_stride = 0;
  const int32_t* lengths = nullptr;  // [B * Hkv] device: the entries each slot holds (T)
  const float* mean = nullptr;       // [B * Hkv, head_dim]
  const uint16_t* codes = nullptr;   // lsh_hash_keys over [begin, end)
  int64_t code_slot_stride = 0, code_table_stride = 0;
  const float* centred_norms = nullptr;
  int64_t norm_slot_stride = 0;
  int begin = 0, end = 0;  // the hashed (middle) entries of every slot
  int batch = 0, n_query_heads = 0, n_kv_heads = 0, head_dim = 0;
  // Scratch: [B * Hq, ceil((end - begin) / 32)] words and [B * Hq, end - begin] floats.
  uint32_t* sampled_mask = nullptr;
  float* sampled_bias = nullptr;
  // Head (b, a)'s list at indices + (b * Hq + a) * index_stride, index_stride >= the longest T;
  // logit_bias parallel to it; index_offset / index_count as decode_attention reads them.
  int32_t* indices = nullptr;
  float* logit_bias = nullptr;
  int64_t index_stride = 0;
  int64_t* index_offset = nullptr;
  int32_t* index_count = nullptr;
};
void lsh_sample_lists(const LshSampleListsArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
