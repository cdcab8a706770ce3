// The exact logits q.k of every query head against every cached key of its KV head, for an exact
// top-k selection in the decode step. CPU twin: kernels/cpu/query_key_scores.h (same sums in f32,
// dimension order). Test: tests/cuda/query_key_scores_test.cc.
//
// A slot is one (sequence, KV head) pair, s = b * Hkv + h; its keys are bf16 rows
// keys + s * key_slot_stride + j * head_dim. Query head a of sequence b (list b * Hq + a) writes
// scores + list * score_stride + j for j < width: q.k_j below the slot's length, -inf from there,
// so that a top-k of at most `length` entries over the fixed width never picks an absent entry and
// one captured decode step serves a growing cache.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention.h"

namespace kvb::cuda {

struct QueryKeyScoresArgs {
  const __nv_bfloat16* q = nullptr;  // [B, Hq, head_dim] with q_seq_stride between sequences
  int64_t q_seq_stride = 0;
  const __nv_bfloat16* keys = nullptr;
  int64_t key_slot_stride = 0;
  int batch = 0, n_query_heads = 0, n_kv_heads = 0;
  int head_dim = 0;  // a multiple of 8, at most 256; Hq / Hkv at most 16
  // Per slot (device): the entries present; or nullptr and `length` for every slot.
  const int32_t* lengths = nullptr;
  int length = 0;
  int width = 0;  // scores written per list (>= every length)
  float* scores = nullptr;
  int64_t score_stride = 0;
};
void query_key_scores(const QueryKeyScoresArgs& args, cudaStream_t stream);

// The arguments for a decode step's queries against its own cache: the queries, batch, heads and
// lengths of the step's dense attention `attention`, its keys from `keys` (slot s of the step at
// keys + s * key_slot_stride), `width` scores per list at `scores` with `score_stride`.
QueryKeyScoresArgs decode_step_scores(const DecodeAttentionArgs& attention,
                                      const __nv_bfloat16* keys, int64_t key_slot_stride, int width,
                                      float* scores, int64_t score_stride);

}  // namespace kvb::cuda
