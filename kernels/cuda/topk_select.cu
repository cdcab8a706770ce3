// Per-list top-k: radix select of the k-th largest key, then an ordered compaction; and the
// dispatch between it and the one-pass form for 16-bit keys (topk_select_keys16.cu).
// Contract and CPU twin: kernels/cuda/topk_select.h.
#include <cooperative_groups.h>

#include <algorithm>
#include <cub/block/block_scan.cuh>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/topk_select.h"
#include "kernels/cuda/topk_select_common.cuh"

namespace kvb::cuda {

namespace topk {

int sm_count() {
  static thread_local const int count = device_info().sm_count;
  return count;
}

int cluster_blocks_for(int length, int n_lists) {
  if (!cluster_launch_available()) return 1;
  int blocks = 1;
  while (blocks < 8 && blocks * kChunk < length && n_lists * blocks * 2 <= sm_count() / 2)
    blocks *= 2;
  return blocks;
}

}  // namespace topk

namespace {

namespace cg = cooperative_groups;
using topk::chunks_for;
using topk::finish_list;
using topk::kChunk;
using topk::kClusterChunks;
using topk::kThreads;
using topk::with_cluster_blocks;

constexpr int kDigitBits = 11;
constexpr int kBins = 1 << kDigitBits;
constexpr int kBinsPerThread = kBins / kThreads;
// Contiguous keys per thread in the compaction: a tile is one kChunk, so that in the split path a
// 128K-key list spreads over 16 blocks (a decode step's 8 lists then fill the GPU).
constexpr int kPerThread = kChunk / kThreads;
constexpr int kMaxLevels = 3;

using Scan = cub::BlockScan<int, kThreads>;
using PairScan = cub::BlockScan<uint32_t, kThreads>;

struct Keys16 {
  static constexpr int kBits = 16;
  const uint16_t* p;
  __device__ uint32_t operator()(int64_t i) const { return p[i]; }
};

// Order-preserving map of a float to an unsigned key (-0 folded onto +0 so that they tie, as the
// CPU's float comparison does).
struct KeysF32 {
  static constexpr int kBits = 32;
  const float* p;
  __device__ uint32_t operator()(int64_t i) const {
    float f = p[i];
    if (f == 0.f) f = 0.f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
};

__host__ __device__ constexpr int levels_for(int bits) {
  return (bits + kDigitBits - 1) / kDigitBits;
}

// Digits of up to 11 bits, most significant first (16-bit keys: 11 + 5; f32: 11 + 11 + 10): fine
// bins keep same-address shared atomics rare even when scores bunch up (BinaryPC's integer scores
// sit in a few hundred values).
__device__ inline void digit_of_level(int bits, int level, int& shift, uint32_t& digit_mask) {
  shift = bits;
  int width = 0;
  for (int l = 0; l <= level; ++l) {
    width = min(kDigitBits, shift);
    shift -= width;
  }
  digit_mask = (1u << width) - 1;
}

struct RadixState {
  uint32_t prefix = 0, mask = 0;
  int remaining = 0;  // keys equal to the final prefix still to take
};

struct SharedScratch {
  typename Scan::TempStorage scan;
  typename PairScan::TempStorage pair_scan;
  int hist[kBins];
  uint32_t digit;
  int above;
  int sums[2];
};

// Whole block: the digit bin holding the remaining-th largest key of `hist` and the count above it.
__device__ void narrow(const int* hist, int shift, uint32_t digit_mask, RadixState& state,
                       SharedScratch& s) {
  const int top_bin = kBins - 1 - kBinsPerThread * threadIdx.x;
  int counts[kBinsPerThread];
  int local = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    counts[j] = hist[top_bin - j];
    local += counts[j];
  }
  int above;
  Scan(s.scan).ExclusiveSum(local, above);
  if (above < state.remaining && state.remaining <= above + local) {
    for (int j = 0; j < kBinsPerThread; ++j) {
      if (state.remaining <= above + counts[j]) {
        s.digit = top_bin - j;
        s.above = above;
        break;
      }
      above += counts[j];
    }
  }
  __syncthreads();
  state.prefix |= s.digit << shift;
  state.mask |= digit_mask << shift;
  state.remaining -= s.above;
  __syncthreads();
}

// Replays the narrowing from the global histograms of levels 0 .. levels-1 of one list.
template <int kBits>
__device__ RadixState replay(const int* hists, int levels, int k, SharedScratch& s) {
  RadixState state;
  state.remaining = k;
  for (int level = 0; level < levels; ++level) {
    int shift;
    uint32_t digit_mask;
    digit_of_level(kBits, level, shift, digit_mask);
    narrow(hists + level * kBins, shift, digit_mask, state, s);
  }
  return state;
}

// Ordered compaction of keys [begin, end): kept key i goes to (#greater before i) +
// min(#equal before i, need_equal); the bases count the keys before `begin`.
template <class KeyOf>
__device__ void compact(const KeyOf& key, int begin, int end, uint32_t threshold, int need_equal,
                        int k, int base_greater, int base_equal, int32_t* out, SharedScratch& s) {
  for (int tile = begin; tile < end; tile += kThreads * kPerThread) {
    if (base_greater + min(base_equal, need_equal) == k) break;  // uniform across the block
    const int first = tile + threadIdx.x * kPerThread;
    uint32_t v[kPerThread];
    uint32_t greater = 0, equal = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const bool live = first + j < end;
      v[j] = live ? key(first + j) : 0u;
      greater += live && v[j] > threshold;
      equal += live && v[j] == threshold;
    }
    uint32_t before, total;
    PairScan(s.pair_scan).ExclusiveSum((greater << 16) | equal, before, total);
    int g = base_greater + static_cast<int>(before >> 16);
    int e = base_equal + static_cast<int>(before & 0xffffu);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      if (first + j >= end) break;
      if (v[j] > threshold) {
        out[g + min(e, need_equal)] = first + j;
        ++g;
      } else if (v[j] == threshold) {
        if (e < need_equal) out[g + e] = first + j;
        ++e;
      }
    }
    base_greater += static_cast<int>(total >> 16);
    base_equal += static_cast<int>(total & 0xffffu);
    __syncthreads();
  }
}

// Adds the keys of [begin, end) that match the state's prefix to `hist` (shared) on `level`'s
// digit.
template <class KeyOf>
__device__ void histogram(const KeyOf& key, int begin, int end, const RadixState& state, int level,
                          int* hist) {
  int shift;
  uint32_t digit_mask;
  digit_of_level(KeyOf::kBits, level, shift, digit_mask);
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    const uint32_t v = key(i);
    if ((v & state.mask) == state.prefix) atomicAdd(&hist[(v >> shift) & digit_mask], 1);
  }
}

// The cluster's merged histogram in every block's `hist` (C = 1: the block's own). Distributed
// shared memory: each block sums its bins over the cluster's blocks.
template <int C>
__device__ void merge_cluster_histogram(int* hist) {
  if constexpr (C > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's histogram is complete
    int merged[kBinsPerThread];
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int bin = threadIdx.x * kBinsPerThread + j;
      merged[j] = 0;
      for (int rank = 0; rank < C; ++rank) merged[j] += cluster.map_shared_rank(hist, rank)[bin];
    }
    cluster.sync();  // every block has read every histogram before any is overwritten
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) hist[threadIdx.x * kBinsPerThread + j] = merged[j];
#endif
  }
  __syncthreads();
}

// Keys of [begin, end) above / equal to `threshold`, summed over the block into s.sums (zeroed
// and synchronised here).
template <class KeyOf>
__device__ void count_against(const KeyOf& key, int begin, int end, uint32_t threshold,
                              SharedScratch& s) {
  if (threadIdx.x < 2) s.sums[threadIdx.x] = 0;
  __syncthreads();
  int greater = 0, equal = 0;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    const uint32_t v = key(i);
    greater += v > threshold;
    equal += v == threshold;
  }
  for (int off = 16; off > 0; off /= 2) {
    greater += __shfl_xor_sync(0xffffffffu, greater, off);
    equal += __shfl_xor_sync(0xffffffffu, equal, off);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&s.sums[0], greater);
    atomicAdd(&s.sums[1], equal);
  }
  __syncthreads();
}

// What every top-k kernel does first: waits for the kernel before it (they are launched with
// launch_overlapped, so nothing is read before this), lets the next one launch, and points `key`
// at its list, blockIdx.y, which it returns.
template <class KeyOf>
__device__ __forceinline__ int begin_list(const TopkSelectArgs& args, KeyOf& key) {
  wait_for_predecessor();
  allow_successor_launch();
  const int list = blockIdx.y;
  key.p += list * args.key_stride;
  return list;
}

// One list per cluster of C blocks (grid (C, lists); C = 1: one block per list, no cluster).
// Block rank r takes the r-th contiguous part of the list; the levels' histograms merge through
// distributed shared memory, so cluster barriers stand in for the split path's launches; every
// block narrows the merged histogram itself and compacts its part at the offset the lower ranks'
// counts give.
template <class KeyOf, int C>
__global__ void __launch_bounds__(kThreads) topk_list_kernel(TopkSelectArgs args, KeyOf key) {
  __shared__ SharedScratch s;
  const int rank = blockIdx.x;  // the cluster spans gridDim.x = C
  const int list = begin_list(args, key);
  const int n = args.length;
  const int k = min(max(args.k, 0), n);
  const int part = (n + C - 1) / C;
  const int begin = min(n, rank * part), end = min(n, begin + part);
  int32_t* out = args.indices + list * args.index_stride;
  RadixState state;
  state.remaining = k;
  const bool narrowing = k > 0 && k < n;
  if (narrowing) {
    for (int level = 0; level < levels_for(KeyOf::kBits); ++level) {
      for (int i = threadIdx.x; i < kBins; i += kThreads) s.hist[i] = 0;
      __syncthreads();
      histogram(key, begin, end, state, level, s.hist);
      merge_cluster_histogram<C>(s.hist);
      int shift;
      uint32_t digit_mask;
      digit_of_level(KeyOf::kBits, level, shift, digit_mask);
      narrow(s.hist, shift, digit_mask, state, s);
    }
  }
  // Keys above / at the threshold in the lower ranks' parts (every key passes: begin of them).
  int base_greater = narrowing ? 0 : begin, base_equal = 0;
  if constexpr (C > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    if (narrowing) {
      count_against(key, begin, end, state.prefix, s);
      cluster.sync();
      for (int lower = 0; lower < rank; ++lower) {
        const int* sums = cluster.map_shared_rank(s.sums, lower);
        base_greater += sums[0];
        base_equal += sums[1];
      }
    }
    cluster.sync();  // no block leaves while another may still read its shared memory
#endif
  }
  if (k > 0) {
    if (narrowing)
      compact(key, begin, end, state.prefix, state.remaining, k, base_greater, base_equal, out, s);
    else
      compact(key, begin, end, 0u, n, k, base_greater, 0, out, s);  // every key passes
  }
  if (rank == 0) finish_list(args, list, k, out);
}

// Split path: block (chunk, list). hists: [lists][kMaxLevels][kBins]; states: [lists][3], the
// final radix state, which the count kernel's first block of each list stores so that the write
// kernel reads it instead of replaying every level (faster; a last-block-done narrowing in the
// histogram kernels instead was slower, its serial tail outweighing the replays it saved:
// results/gpu-kernel-tuning.md §6.1);
// counts: [lists][chunks][2].
struct SplitWorkspace {
  int* hists;
  int* states;
  int* counts;
};
constexpr int kStateWords = 3;

template <class KeyOf>
__global__ void __launch_bounds__(kThreads)
    topk_hist_kernel(TopkSelectArgs args, KeyOf key, int level, SplitWorkspace w) {
  __shared__ SharedScratch s;
  const int list = begin_list(args, key);
  int* list_hists = w.hists + list * kMaxLevels * kBins;
  const RadixState state = replay<KeyOf::kBits>(list_hists, level, args.k, s);
  for (int i = threadIdx.x; i < kBins; i += kThreads) s.hist[i] = 0;
  __syncthreads();
  const int begin = blockIdx.x * kChunk;
  histogram(key, begin, min(args.length, begin + kChunk), state, level, s.hist);
  __syncthreads();
  for (int i = threadIdx.x; i < kBins; i += kThreads)
    if (s.hist[i]) atomicAdd(&list_hists[level * kBins + i], s.hist[i]);
}

template <class KeyOf>
__global__ void __launch_bounds__(kThreads)
    topk_count_kernel(TopkSelectArgs args, KeyOf key, SplitWorkspace w) {
  __shared__ SharedScratch s;
  const int list = begin_list(args, key);
  const RadixState state = replay<KeyOf::kBits>(w.hists + list * kMaxLevels * kBins,
                                                levels_for(KeyOf::kBits), args.k, s);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    int* word = w.states + list * kStateWords;
    word[0] = static_cast<int>(state.prefix);
    word[1] = static_cast<int>(state.mask);
    word[2] = state.remaining;
  }
  const int begin = blockIdx.x * kChunk, end = min(args.length, begin + kChunk);
  count_against(key, begin, end, state.prefix, s);
  if (threadIdx.x < 2)
    w.counts[(list * gridDim.x + blockIdx.x) * 2 + threadIdx.x] = s.sums[threadIdx.x];
}

template <class KeyOf>
__global__ void __launch_bounds__(kThreads)
    topk_write_kernel(TopkSelectArgs args, KeyOf key, SplitWorkspace w) {
  __shared__ SharedScratch s;
  const int list = begin_list(args, key);
  RadixState state;
  const int* word = w.states + list * kStateWords;
  state.prefix = static_cast<uint32_t>(word[0]);
  state.mask = static_cast<uint32_t>(word[1]);
  state.remaining = word[2];
  if (threadIdx.x < 2) s.sums[threadIdx.x] = 0;
  __syncthreads();
  for (int c = threadIdx.x; c < int(blockIdx.x); c += kThreads) {
    atomicAdd(&s.sums[0], w.counts[(list * gridDim.x + c) * 2]);
    atomicAdd(&s.sums[1], w.counts[(list * gridDim.x + c) * 2 + 1]);
  }
  __syncthreads();
  int32_t* out = args.indices + list * args.index_stride;
  const int begin = blockIdx.x * kChunk, end = min(args.length, begin + kChunk);
  compact(key, begin, end, state.prefix, state.remaining, args.k, s.sums[0], s.sums[1], out, s);
  if (blockIdx.x == 0) finish_list(args, list, args.k, out);
}

// The histograms (zeroed by every call), the final states, the per-chunk counts.
size_t zeroed_bytes(int n_lists) { return size_t(n_lists) * kMaxLevels * kBins * sizeof(int); }

SplitWorkspace split_workspace(void* workspace, int n_lists) {
  SplitWorkspace w;
  w.hists = static_cast<int*>(workspace);
  w.states = w.hists + size_t(n_lists) * kMaxLevels * kBins;
  w.counts = w.states + size_t(n_lists) * kStateWords;
  return w;
}

template <class KeyOf, int C>
void launch_list(const TopkSelectArgs& args, KeyOf key, cudaStream_t stream) {
  launch_overlapped_clusters(topk_list_kernel<KeyOf, C>, dim3(C, args.n_lists), kThreads, 0, stream,
                             "topk_list_kernel", C, args, key);
}

template <class KeyOf>
void launch(const TopkSelectArgs& args, KeyOf key, cudaStream_t stream) {
  const int k = std::min(std::max(args.k, 0), args.length);
  const int chunks = chunks_for(args.length);
  if (!args.workspace || chunks <= kClusterChunks || k == 0 || k == args.length) {
    return with_cluster_blocks(args.length, args.n_lists, [&](auto blocks) {
      launch_list<KeyOf, decltype(blocks)::value>(args, key, stream);
    });
  }
  TopkSelectArgs a = args;
  a.k = k;
  const SplitWorkspace w = split_workspace(args.workspace, args.n_lists);
  check(cudaMemsetAsync(w.hists, 0, zeroed_bytes(args.n_lists), stream), "topk memset");
  const dim3 grid(chunks, args.n_lists);
  // The first histogram follows the memset (not a kernel): a plain launch.
  topk_hist_kernel<<<grid, kThreads, 0, stream>>>(a, key, 0, w);
  check(cudaGetLastError(), "topk_hist_kernel launch");
  for (int level = 1; level < levels_for(KeyOf::kBits); ++level)
    launch_overlapped(topk_hist_kernel<KeyOf>, grid, kThreads, 0, stream, "topk_hist_kernel", a,
                      key, level, w);
  launch_overlapped(topk_count_kernel<KeyOf>, grid, kThreads, 0, stream, "topk_count_kernel", a,
                    key, w);
  launch_overlapped(topk_write_kernel<KeyOf>, grid, kThreads, 0, stream, "topk_write_kernel", a,
                    key, w);
}

}  // namespace

// Both paths lay their scratch out from the workspace's start and clear what they use; a 16-bit
// workspace also serves the radix path (16-bit keys that fall back to it, keys16_as_digits).
size_t topk_select_workspace_bytes(int n_lists, int length, TopkKeys keys) {
  const size_t radix = zeroed_bytes(n_lists) +
                       size_t(n_lists) * (kStateWords + chunks_for(length) * 2) * sizeof(int);
  if (keys == TopkKeys::kF32) return radix;
  return std::max(radix, topk::keys16_workspace_bytes(n_lists, length));
}

void topk_select(const TopkSelectArgs& args, cudaStream_t stream) {
  if (args.n_lists <= 0) return;
  if ((args.keys16 == nullptr) == (args.scores == nullptr))
    throw std::invalid_argument("topk_select: give exactly one of keys16 and scores");
  if (args.index_offset && !args.index_count)
    throw std::invalid_argument("topk_select: index_offset needs index_count");
  if (args.workspace) {
    const TopkKeys keys = args.keys16 && !args.keys16_as_digits ? TopkKeys::kU16 : TopkKeys::kF32;
    const size_t needed = topk_select_workspace_bytes(args.n_lists, args.length, keys);
    if (args.workspace_bytes < needed)
      throw std::invalid_argument(
          "topk_select: the workspace holds " + std::to_string(args.workspace_bytes) +
          " bytes, these lists need " + std::to_string(needed) +
          " (size it with topk_select_workspace_bytes for these keys and set workspace_bytes)");
  }
  if (topk::keys16_one_pass_takes(args))
    topk::keys16_one_pass(args, stream);
  else if (args.keys16)
    launch(args, Keys16{args.keys16}, stream);
  else
    launch(args, KeysF32{args.scores}, stream);
}

}  // namespace kvb::cuda
