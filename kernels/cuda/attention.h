// CUDA attention kernels (bf16 in, f32 accumulate). CPU twins: kernels/cpu/attention.h.
//
// prefill_attention: causal attention of a chunk of n queries against the keys of one
//   sequence's cache (the chunk's own keys already appended), with GQA. Query i sits at position
//   `query_offset + i` and sees keys 0 .. query_offset + i. Returns the row log-sum-exp (natural
//   log, of the scaled logits) when `lse` is non-null: DropKV's fused scoring recomputes p from it.
// decode_attention: flash-decoding over a ragged per-head KV store; one query per sequence and
//   head; the KV of a head is split into chunks processed by separate blocks, then merged.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvb::cuda {

// Which prefill kernel runs: kAuto takes the Hopper wgmma kernel where it applies (compute
// capability 9.0, head_dim 128, built with sm_90a) and the mma.sync kernel otherwise, except for a
// few queries after a long prefix (at most 16 after 1,024 keys or more, a GQA group of at most 16)
// with a workspace given, DropKV's window forward, which runs split-KV (kSplitKv): the keys are cut
// into splits over every SM and each KV head's keys and values are read once for all its
// W x group (query, query head) rows, where the prefill kernels give each query head one block
// streaming every key. The others force one (tests, A/B benchmarks). Forcing kWgmma where it does
// not apply, or kSplitKv without a workspace or beyond its reach, throws.
enum class PrefillKernel { kAuto, kMmaSync, kWgmma, kSplitKv };

struct PrefillAttentionArgs {
  const __nv_bfloat16* q = nullptr;  // [n, q_row_stride] with head a at column a*head_dim
  int64_t q_row_stride = 0;          // elements between consecutive queries (a multiple of 8)
  const __nv_bfloat16* k = nullptr;  // [Hkv, kv_head_stride] rows of head_dim
  const __nv_bfloat16* v = nullptr;
  int64_t kv_head_stride = 0;    // elements between consecutive KV heads (a multiple of 8)
  __nv_bfloat16* out = nullptr;  // [n, out_row_stride], head a at column a*head_dim
  int64_t out_row_stride = 0;
  float* lse = nullptr;  // [Hq, n] or nullptr
  int n_queries = 0;
  int query_offset = 0;  // keys visible to query i: 0 .. query_offset + i
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // 64 or 128
  float scale = 0;   // 1/sqrt(head_dim)
  PrefillKernel kernel = PrefillKernel::kAuto;
  void* workspace = nullptr;  // prefill_split_kv_workspace_bytes(...), or nullptr
  // kSplitKv: keys per split, any count (0: as many splits as fill the GPU once). Tests force small
  // ones, so that many partials merge whatever the GPU.
  int split_kv_chunk_keys = 0;
};
void prefill_attention(const PrefillAttentionArgs& args, cudaStream_t stream);
// Workspace of the split-KV path (kSplitKv) for these queries over query_offset + n_queries keys
// (its split layout on the current device: a partial of head_dim + 2 floats per row and split).
size_t prefill_split_kv_workspace_bytes(const PrefillAttentionArgs& args);
// True when the wgmma prefill kernel is built and runs on the current device for this head_dim.
bool wgmma_prefill_available(int head_dim);

// The decode step's token, appended by decode_attention itself (dense mode): what
// rope_append_kv_decode would do before it, without a kernel boundary between. The query and the
// new K and V are read pre-RoPE and unbiased from the sequence's row at `q` ([Hq | Hkv K | Hkv V]
// heads of head_dim); the query is biased and rotated in shared memory (q in memory stays as it
// is), K and V are written at each KV head's current length in k_cache/v_cache (the buffers behind
// k/v), the query attends over length + 1 entries, and kv_length advances by one.
struct DecodeAppend {
  const int32_t* positions = nullptr;   // [B]; nullptr = no append (the caller appended)
  const float* inv_freq = nullptr;      // [head_dim / 2]
  const __nv_bfloat16* bias = nullptr;  // [(Hq + 2 Hkv) * head_dim] or nullptr
  bool interleaved = false;
  __nv_bfloat16* k_cache = nullptr;
  __nv_bfloat16* v_cache = nullptr;
  int32_t* kv_length = nullptr;  // the same lengths as DecodeAttentionArgs::kv_length
};

// One decode query per (sequence, query head) against a ragged KV store. KV head h of sequence b
// occupies rows kv_offset[b*Hkv+h] .. + kv_length[b*Hkv+h] of the layer's k/v buffers (row =
// head_dim elements). With `indices`, head (b, a) attends only to the rows listed at
// indices[index_offset[b*Hq+a] .. + index_count[b*Hq+a]] (relative to its KV head's first row),
// each with an optional additive logit bias at the same place in `logit_bias`.
struct DecodeAttentionArgs {
  const __nv_bfloat16* q = nullptr;  // [B, Hq, head_dim] contiguous per sequence with q_seq_stride
  int64_t q_seq_stride = 0;
  const __nv_bfloat16* k = nullptr;
  const __nv_bfloat16* v = nullptr;
  const int64_t* kv_offset = nullptr;     // [B*Hkv] device
  const int32_t* kv_length = nullptr;     // [B*Hkv] device
  int max_kv_length = 0;                  // upper bound over heads (chooses the split count)
  const int32_t* indices = nullptr;       // optional selection lists
  const int64_t* index_offset = nullptr;  // [B*Hq]
  const int32_t* index_count = nullptr;   // [B*Hq]
  const float* logit_bias = nullptr;      // optional, parallel to indices
  // Index mode: every query head of a GQA group has the same list (index_offset and index_count
  // equal within the group, as BinaryPC's and Quest's shared lists). One block then serves the
  // group and reads each gathered row once, on the tensor cores (not with logit_bias).
  bool shared_group_lists = false;
  __nv_bfloat16* out = nullptr;  // [B, Hq, head_dim] with out_seq_stride
  int64_t out_seq_stride = 0;
  int batch = 0;
  int n_query_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // 64 or 128
  float scale = 0;
  float* workspace = nullptr;  // decode_attention_workspace_floats(...) floats
  float* lse = nullptr;        // optional row log-sum-exp (natural log), [Hq, B]
  int chunk_size = 0;          // 0 = choose automatically
  DecodeAppend append;         // dense mode only
};
size_t decode_attention_workspace_floats(int batch, int n_query_heads, int head_dim,
                                         int max_kv_length);
// The workspace of exactly this call's split layout (on the current device): what a one-off call
// needs, where decode_attention_workspace_floats bounds every layout up to max_kv_length.
size_t decode_attention_layout_workspace_floats(const DecodeAttentionArgs& args);
// Throws std::invalid_argument, naming `kernel`, unless args.append is absent or usable: dense mode
// (no index lists), the RoPE frequencies, the writable caches and the same lengths as args.
void check_decode_append(const DecodeAttentionArgs& args, const char* kernel);
void decode_attention(const DecodeAttentionArgs& args, cudaStream_t stream);
// The split of a dense decode_attention call (no index lists) over rows of these lengths, one per
// (sequence, KV head) in order, each an upper bound over the call's life: the shortest chunk (a
// multiple of the 64-key tile) whose busy blocks, Σ ceil(length / chunk), fill the resident places
// the automatic split fills at most once. Rows of one length get the automatic split; ragged rows
// (compressed caches of several budgets, per-layer budgets) get more splits of the long rows where
// the automatic split, cut by the longest row, leaves the places of the short ones idle. 0 (the
// automatic split) for index lists, or for rows too many for one wave.
int dense_decode_chunk(const DecodeAttentionArgs& args, const int32_t* lengths, int rows);

}  // namespace kvb::cuda
