// What the two top-k forms share: the radix select over digits of any key (topk_select.cu, also
// the dispatch) and the one-pass form for 16-bit keys (topk_select_keys16.cu). Contract and CPU
// twin: kernels/cuda/topk_select.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/topk_select.h"

namespace kvb::cuda::topk {

constexpr int kThreads = 1024;
// Keys per block of the radix path's split form and of either path's clusters (one block per
// kChunk keys). Lists of up to kClusterChunks chunks take a cluster, longer ones (with a workspace)
// the split form: on the radix path clusters beat one block per list at 32K keys and lost to the
// split form at 128K and beyond (results/gpu-kernel-tuning.md §6.2); the one-pass path keeps the
// bound until it is measured there.
constexpr int kChunk = 8 * kThreads;
constexpr int kClusterChunks = 4;

__host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
inline int chunks_for(int length) { return ceil_div(length, kChunk); }

// The number of SMs of the current device (asked once per thread).
int sm_count();

// Blocks per list of the cluster forms: one per kChunk keys, a power of two up to 8 (the portable
// cluster size), and all the lists' blocks within half the SMs: a 1,024-thread block fills an SM,
// and a cluster needs its SMs free in one GPC at once (Quest's 32 lists in clusters of 4 measured
// far slower than in clusters of 2: results/gpu-kernel-tuning.md §6.3). 1 where the device has no
// clusters.
int cluster_blocks_for(int length, int n_lists);

// fn(std::integral_constant<int, C>) for C = cluster_blocks_for(length, n_lists).
template <typename Fn>
decltype(auto) with_cluster_blocks(int length, int n_lists, Fn&& fn) {
  return with_constant<1, 2, 4, 8>(cluster_blocks_for(length, n_lists),
                                   "topk_select: cluster blocks", std::forward<Fn>(fn));
}

// The forced tail and decode_attention's offsets / counts of one list (one block per list calls
// it).
__device__ inline void finish_list(const TopkSelectArgs& args, int list, int k, int32_t* out) {
  const int tail = args.tail_end ? max(0, args.tail_end[list] - args.tail_begin) : args.tail_count;
  for (int i = threadIdx.x; i < tail; i += kThreads) out[k + i] = args.tail_begin + i;
  if (args.index_offset) {
    for (int r = threadIdx.x; r < args.heads_per_list; r += kThreads) {
      args.index_offset[list * args.heads_per_list + r] = list * args.index_stride;
      args.index_count[list * args.heads_per_list + r] = k + tail;
    }
  }
}

// The one-pass form for 16-bit keys (topk_select_keys16.cu). keys16_one_pass_takes: whether it
// serves this call (keys16 given, 0 < k < length, and the list fits its blocks' 16-bit counters
// and registers: a workspace for long lists); the others take the radix path.
bool keys16_one_pass_takes(const TopkSelectArgs& args);
void keys16_one_pass(const TopkSelectArgs& args, cudaStream_t stream);
size_t keys16_workspace_bytes(int n_lists, int length);

}  // namespace kvb::cuda::topk
