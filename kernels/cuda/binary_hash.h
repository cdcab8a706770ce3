// BinaryPC on the GPU (docs/methods.md §12). CPU twin: kernels/cpu/binary_hash.h (same bits,
// same integers); selection as policies/binarypc.cc. Test: tests/cuda/binarypc_kernels_test.cc.
//
// A "slot" is one (sequence, KV head) pair, slot = b * Hkv + h; each slot has its own projection
// P [64, d] (online BinaryPC fits one per prompt and KV head; OPC repeats the layer's rows).
// One decode step of one layer:
//   binary_score_keys     each block projects the group's queries (p = P q), takes one scale per
//                         slot and quantises p (round half to even, as the CPU/PyTorch path), then
//                         scores every hashed key with them (the CPU's XOR/AND/popcount integers,
//                         taken as an int8 tensor-core product), max over the group, written as
//                         16-bit keys (score + 32768; EAS tokens and sinks 0xFFFF);
//   topk_select           (kernels/cuda/topk_select.h) the k best per slot, ties to the lower
//                         index, then the decode tokens L..T-1 as a forced tail, in the index-list
//                         format of decode_attention with the group's query heads sharing a list;
//   decode_attention      (kernels/cuda/attention.h) over those lists.
// After prefill: binary_hash_keys over tokens [0, L) (optionally with reconstruction errors),
// topk_select over the errors (EAS set), binary_mark_tokens to turn that set into a bit mask.
// Tokens appended later are hashed as they arrive by binary_hash_keys over their range.
// binary_score_keys is launched with launch_overlapped (launch.cuh) and reads P, the codes and the
// mask before waiting for the previous kernel, the queries after: the kernel launched right before
// it must not write P, the codes or the mask (the decode step's predecessors write the queries).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvb::cuda {

inline constexpr int kSignCodeBits = 64;
inline constexpr uint16_t kSignCodeForced = 0xFFFF;
inline constexpr int kSignCodeScoreOffset = 32768;

// Algorithm 2 for tokens [begin, end) of every slot, bf16 keys, f32 residual: bit i of code j is 1
// when r . P[i] < 0; the residual moves by -sign(r . P[i]) P[i] only when the product is nonzero
// (PyTorch's sign(0) = 0). The product is taken in f32 and re-taken in f64 when its magnitude is
// within f32 rounding of zero, so the bit equals the CPU reference's (which sums in f64).
struct BinaryHashKeysArgs {
  const float* projection = nullptr;  // slot s: projection + s * 64 * head_dim
  const __nv_bfloat16* keys =
      nullptr;  // slot s, token j: keys + s * key_slot_stride + j * head_dim
  int64_t key_slot_stride = 0;
  int n_slots = 0;
  int head_dim = 0;  // 64 or 128
  int begin = 0, end = 0;
  uint64_t* codes = nullptr;  // slot s, token j: codes + s * code_slot_stride + j
  int64_t code_slot_stride = 0;
  // Optional, same layout as the codes: ||k - sum_i h_i P[i]|| with h from the packed bits (EAS).
  float* reconstruction_error = nullptr;
};
void binary_hash_keys(const BinaryHashKeysArgs& args, cudaStream_t stream);

// Score of tokens [0, length) of every slot: max over the group of sum_i p^_{a,i} h_{j,i}, with
// p^ the group's queries quantised as the CPU twin's binary_pack_queries does (bit for bit),
// stored as score + 32768; tokens flagged in `forced_mask` (bit j % 32 of word j / 32) and the
// first `sink_tokens` tokens get kSignCodeForced instead.
struct BinaryScoreKeysArgs {
  const float* projection = nullptr;  // as in BinaryHashKeysArgs, 16-byte aligned (float4 loads)
  const __nv_bfloat16* q = nullptr;   // [B, Hq, head_dim] with q_seq_stride between sequences
  int64_t q_seq_stride = 0;
  int head_dim = 0;  // 64 or 128
  const uint64_t* codes = nullptr;
  int64_t code_slot_stride = 0;
  const uint32_t* forced_mask = nullptr;  // optional: slot s at forced_mask + s * mask_slot_stride
  int64_t mask_slot_stride = 0;
  int sink_tokens = 0;
  int batch = 0, n_query_heads = 0, n_kv_heads = 0;  // group Hq / Hkv of 1..8
  int length = 0;
  uint16_t* keys = nullptr;  // slot s, token j: keys + s * key_slot_stride + j
  int64_t key_slot_stride = 0;
};
void binary_score_keys(const BinaryScoreKeysArgs& args, cudaStream_t stream);

// Algorithm 1, the projection fit, for every slot's keys [0, length) at once: the CPU twin's
// (kernels/cpu/binary_hash.h, binary_fit_projection) sums in the same order (r . v per key as
// binary_fit_dot; R^T u in f64 per block of kBinaryFitChunk keys in key order, then over the
// blocks in order), so the rows are the same bits. The residual lives in `workspace` as f32.
struct BinaryFitProjectionArgs {
  const __nv_bfloat16* const* keys = nullptr;  // device array: slot s, token j at keys[s] + j * d
  int n_slots = 0;
  int head_dim = 0;  // 64 or 128
  int length = 0;
  int iterations = 4;
  bool recompute_signs = false;
  const float* starts = nullptr;  // [n_slots, 64, head_dim] start vectors
  float* projection = nullptr;    // [n_slots, 64, head_dim] out
  void* workspace = nullptr;      // binary_fit_projection_workspace_bytes
};
inline constexpr int kBinaryFitChunk = 256;  // kernels/cpu/binary_hash.h's, the same order
size_t binary_fit_projection_workspace_bytes(int n_slots, int length, int head_dim);
void binary_fit_projection(const BinaryFitProjectionArgs& args, cudaStream_t stream);

// Sets bit j of slot s's mask for each of the `count` indices at indices + s * index_stride
// (the mask must be zeroed first; mask_slot_stride >= ceil(length / 32) words).
void binary_mark_tokens(const int32_t* indices, int64_t index_stride, int n_slots, int count,
                        uint32_t* mask, int64_t mask_slot_stride, cudaStream_t stream);

}  // namespace kvb::cuda
