// Per-list top-k on the device, written in the index-list format decode_attention takes
// (kernels/cuda/attention.h). CPU twin: kernels/cpu/topk_select.h (the k largest, ties to the
// lower index, indices in increasing order). Used by the decode selectors' GPU paths (BinaryPC
// tokens, Quest pages, the EAS set). Tests: tests/cuda/backend_ops_test.cc (its rows:
// backend_ops_topk.h), tests/cuda/binarypc_kernels_test.cc. Benchmark:
// tests/benchmarks/cuda_sparse_decode_bench.cc (the BPC and Quest top-k columns).
//
// 16-bit keys (topk_select_keys16.cu): a histogram of all 65,536 key values, built in one read of
// the keys, gives the k-th largest key and how many of its ties to take; then an ordered compaction
// (a block scan) writes the chosen indices in increasing order from the keys held in registers.
// Short lists (or no workspace): a cluster of 1, 2, 4 or 8 blocks per list (one per 8K keys), the
// histograms merged through distributed shared memory, one kernel. Long lists with a workspace:
// blocks of up to 40K keys add their histograms into the workspace, then each block narrows from
// it, counts its chunk and writes at the offset the earlier chunks' counts give (a look-back).
// f32 scores, and 16-bit keys where k = 0, k = length or a list too long for those blocks without
// a workspace (topk_select.cu): a radix select with 11-bit digits over order-preserving keys (3
// passes for f32, 2 for 16-bit keys), then the same ordered compaction, re-reading the keys. Short
// lists: clusters as above, each block reading its part once per pass. Long lists with a
// workspace: blocks of 8K keys build each digit's histogram together (global atomics), count their
// chunk's keys above / at the threshold, then write their part at the offset the earlier chunks'
// counts give.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace kvb::cuda {

struct TopkSelectArgs {
  // Exactly one of the two key arrays: list l's n-th key at keys + l * key_stride + n.
  const uint16_t* keys16 = nullptr;  // larger is better (BinaryPC: score + 32768)
  const float* scores = nullptr;     // larger is better; +0 and -0 tie; no NaN
  int64_t key_stride = 0;
  int n_lists = 0;
  int length = 0;  // keys per list
  int k = 0;       // clamped to [0, length]
  // Forced tail: indices tail_begin .. tail_begin + tail_count - 1 follow the k chosen ones
  // (BinaryPC's decode tokens, never hashed, always attended).
  int tail_begin = 0;
  int tail_count = 0;
  // Optional (device, per list): list l's tail ends at tail_end[l] (exclusive) instead of
  // tail_begin + tail_count, e.g. the cache lengths, so that a captured decode step stays valid as
  // the cache grows; index_stride must leave room for the longest tail.
  const int32_t* tail_end = nullptr;
  int32_t* indices = nullptr;  // list l at indices + l * index_stride (k + tail_count entries)
  int64_t index_stride = 0;
  // Optional decode_attention bookkeeping: query head r of list l (r < heads_per_list) gets
  // index_offset[l * heads_per_list + r] = l * index_stride and index_count = k + tail_count.
  int heads_per_list = 1;
  int64_t* index_offset = nullptr;
  int32_t* index_count = nullptr;
  // Optional scratch of topk_select_workspace_bytes(n_lists, length, <these keys>) bytes: lets
  // long lists be split over many blocks (the result is the same with or without it).
  // workspace_bytes is its size, required with it: a workspace sized for f32 scores is too small
  // for the 16-bit path, and topk_select refuses it rather than write past it.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // A/B timing only (tests/benchmarks/cuda_sparse_decode_bench.cc): 16-bit keys through the radix
  // path (two 11-bit digit passes, then a count and a write kernel) instead of the one-pass
  // histogram. The same result.
  bool keys16_as_digits = false;
};
// The keys a workspace serves: the one-pass 16-bit path keeps a 65,536-bin histogram per list
// (~257 KB), the radix path for f32 scores a few KB per list; sized apart so that the f32
// selectors (exact scores, Quest, DropKV) do not hold the 16-bit path's histograms.
enum class TopkKeys { kF32, kU16 };
size_t topk_select_workspace_bytes(int n_lists, int length, TopkKeys keys);
void topk_select(const TopkSelectArgs& args, cudaStream_t stream);

}  // namespace kvb::cuda
