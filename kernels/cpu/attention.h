// Scaled dot-product attention on the CPU: the reference every CUDA attention kernel and every
// decode-time method is checked against.
//
// prefill_attention: a chunk of T queries per query head over its KV head's entries (GQA: query
// head a reads KV head a / (Hq/Hkv)). The KV head holds `prefix[h]` entries from before the chunk
// followed by the chunk's own T entries, so chunk query t sees entries [0, prefix + t]. A prefill
// is a chunk over an empty cache (prefix 0); question-agnostic mode appends the question as a chunk
// over a compressed cache. Threaded over (head, query block) with TBB; each block is two sgemms.
//
// decode_attention: one query over one KV head's entries, optionally restricted to an index list
// and with a per-index additive logit bias (decode-time selection methods); optionally writes the
// probabilities in store order (zeros for entries not attended), for decode-time eviction. Keys
// and values may be held in f32, f16 or bf16 (kernels/cpu/kv_rows.h); 16-bit rows are widened as
// they are read, so the result is the f32 computation on the rounded values.
#pragma once

#include <cstdint>
#include <vector>

namespace kvb::kernels {

struct PrefillAttentionArgs {
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_queries = 0;                 // T
  const float* queries = nullptr;    // [T, n_query_heads * head_dim]
  std::vector<const float*> keys;    // per KV head [prefix + T, head_dim]
  std::vector<const float*> values;  // per KV head [prefix + T, head_dim]
  std::vector<int> prefix;           // per KV head: entries before the chunk
  float* output = nullptr;           // [T, n_query_heads * head_dim]
  float* row_log_sum_exp = nullptr;  // optional [n_query_heads, T]
  // Optional per query head [prefix + T]: Σ over the chunk's queries of p(query -> entry)
  // (H2O's accumulated attention). Accumulated into (callers zero it).
  std::vector<float*> column_sums;
  // > 0: the product P·V takes each probability as the CUDA flash kernels do, rounded to bf16
  // relative to the row's running maximum over the key tiles of this many entries up to its own
  // (kernels/cuda/online_softmax.cuh, probability_fragment). The row log-sum-exp and the column
  // sums stay exact.
  int bf16_probability_tile = 0;
};

void prefill_attention(const PrefillAttentionArgs& args);

struct DecodeAttentionArgs {
  const float* query = nullptr;  // [head_dim], post-RoPE
  const void* keys = nullptr;    // [n_entries, head_dim] in kv_type
  const void* values = nullptr;  // [n_entries, head_dim] in kv_type
  uint32_t kv_type = 0;          // ggml type code of keys and values: 0 f32, 1 f16, 30 bf16
  int n_entries = 0;
  int head_dim = 0;
  const int32_t* indices = nullptr;  // attend only to these entries (any order); nullptr = all
  int n_indices = 0;
  const float* logit_bias = nullptr;  // [n_indices] (or [n_entries] without indices); may be null
  float* output = nullptr;            // [head_dim]
  float* probabilities = nullptr;     // optional [n_entries] in store order
  float scale = 0;                    // 0 means 1/sqrt(head_dim)
  // > 0: P·V takes the probabilities rounded as PrefillAttentionArgs::bf16_probability_tile says,
  // over the attended entries in their order; `probabilities` gets them exact.
  int bf16_probability_tile = 0;
};

// Returns the log-sum-exp of the attended logits.
float decode_attention(const DecodeAttentionArgs& args);

}  // namespace kvb::kernels
