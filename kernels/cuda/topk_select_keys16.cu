// Top-k of 16-bit keys (BinaryPC's integer scores + 32768) in one histogram pass. Contract and CPU
// twin: kernels/cuda/topk_select.h; the dispatch and the radix path for other keys:
// topk_select.cu.
//
// Why one bin per key value: BinaryPC's scores sit in a few hundred distinct values, so the radix
// path's first 11-bit digit (key bits 15..5) puts nearly every key in a handful of bins, a warp's
// 32 shared atomics serialise on one to three addresses, and a second histogram pass over the
// chosen digit follows. A histogram of all 65,536 key values spreads the atomics over as many
// addresses as there are distinct values and gives the k-th largest key after one read. Its bins
// are 16-bit counters, two to a 32-bit word: 128 KB of dynamic shared memory (one 1,024-thread
// block per SM), so a block counts fewer than 65,536 keys (kMaxBlockGroups) and no counter carries
// into its neighbour.
//
// Narrowing: the 256 counts of the keys' high byte (summed from the fine bins), then the 256 fine
// bins of the chosen high byte; two warp scans of 256 bins find the same key as a scan of all
// 65,536 and read only 512 counts, so each block can narrow from a histogram in global memory or in
// the other blocks of its cluster.
//
// Keys are read as 16-byte groups of 8, vector loads whatever the list's alignment: group g holds
// keys 8g - skew .. 8g - skew + 7, where skew puts group 0 on the 16-byte boundary at or before key
// 0; keys outside [0, length) are skipped, and the (at most two) groups cut by the list's ends are
// read key by key, so nothing outside the list is touched. A thread holds consecutive groups in
// registers (thread order is index order), so the compaction's block scan counts and writes from
// registers: no second read of a block's keys.
//
// Two forms, both awaiting measurement against the radix path (cuda_sparse_decode_bench's
// "BPC top-k (old)" column, TopkSelectArgs::keys16_as_digits):
// - cluster (lists of up to kClusterChunks chunks, or no workspace): one kernel, C blocks per list
//   as the radix path's clusters; the high-byte counts, then the chosen high byte's fine bins, are
//   summed over the cluster through distributed shared memory. Against the radix cluster kernel:
//   one histogram pass instead of two, no separate count pass (the scan that orders the writes
//   counts), the keys read once instead of three or four times.
// - split (longer lists with a workspace): a memset, topk16_histogram_kernel (each block adds its
//   nonzero fine bins and its high-byte counts to the list's histogram in the workspace) and
//   topk16_write_kernel (each block narrows from that histogram, counts its chunk, adds the earlier
//   chunks' counts by a decoupled look-back, writes). Against the radix split form: 2 kernels
//   instead of 4 after the memset, the keys read twice instead of four times, and no replay of the
//   narrowing in the later kernels. The memset is larger (a bin for every value: 257 KB a list,
//   against 24 KB).
#include <cooperative_groups.h>

#include <algorithm>
#include <cub/block/block_scan.cuh>
#include <cuda/atomic>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/topk_select_common.cuh"

namespace kvb::cuda::topk {
namespace {

namespace cg = cooperative_groups;

constexpr int kGroupKeys = 8;  // one 16-byte load
constexpr int kValues = 1 << 16;
constexpr int kHistWords = kValues / 2;  // two 16-bit counters a word
constexpr size_t kHistBytes = kHistWords * sizeof(uint32_t);
constexpr int kHighBins = 256;  // the keys' high byte
constexpr int kLaneBins = kHighBins / 32;
constexpr int kWarps = kThreads / 32;
// Groups a thread holds: 4 (32K keys a block) and one more, so that the group a list spans extra
// when it does not start on a 16-byte boundary does not take a block more.
constexpr int kMaxThreadGroups = 5;
constexpr int kMaxBlockGroups = kMaxThreadGroups * kThreads;
static_assert(kMaxBlockGroups * kGroupKeys < 65536, "16-bit counters must not carry");
static_assert(kHighBins == kLaneBins * 32 && kHighBins % kWarps == 0, "warp-wide bins");

using PairScan = cub::BlockScan<uint32_t, kThreads>;

// One list's keys as 16-byte groups (see the top of the file).
struct KeyGroups {
  const uint16_t* keys;  // key 0 of the list
  int length;
  int skew;  // 0..7

  __device__ int first_key(int group) const { return group * kGroupKeys - skew; }
  __device__ int groups() const { return (length + skew + kGroupKeys - 1) / kGroupKeys; }
  __device__ bool holds(int key) const { return key >= 0 && key < length; }

  __device__ uint4 load(int group) const {
    const int first = first_key(group);
    if (first >= 0 && first + kGroupKeys <= length)
      return *reinterpret_cast<const uint4*>(keys + first);  // 16-byte aligned by the skew
    uint32_t word[4] = {0, 0, 0, 0};
#pragma unroll
    for (int e = 0; e < kGroupKeys; ++e)
      if (holds(first + e)) word[e / 2] |= uint32_t(keys[first + e]) << (16 * (e % 2));
    return make_uint4(word[0], word[1], word[2], word[3]);
  }
};

__device__ KeyGroups key_groups(const TopkSelectArgs& args, int list) {
  const uint16_t* keys = args.keys16 + list * args.key_stride;
  const int skew = int(reinterpret_cast<uintptr_t>(keys) / sizeof(uint16_t) % kGroupKeys);
  return {keys, args.length, skew};
}

// Key e (0..7) of a group.
__device__ __forceinline__ uint32_t key_of(const uint4& group, int e) {
  const uint32_t word = e < 2 ? group.x : e < 4 ? group.y : e < 6 ? group.z : group.w;
  return (word >> (16 * (e % 2))) & 0xffffu;
}

// A 16-bit counter of the histogram (or of another block's, through its mapped address).
__device__ __forceinline__ int counter_of(const uint32_t* hist, uint32_t value) {
  return int((hist[value / 2] >> (16 * (value % 2))) & 0xffffu);
}

// Thread t's share of groups [begin, end): consecutive groups in thread order, the first
// (end - begin) % kThreads threads taking one more.
struct ThreadGroups {
  int first = 0, count = 0;
};
__device__ ThreadGroups thread_groups(int begin, int end) {
  const int total = max(0, end - begin), each = total / kThreads, extra = total % kThreads;
  const int t = threadIdx.x;
  return {begin + t * each + min(t, extra), each + (t < extra ? 1 : 0)};
}

// The thread's groups, loaded all at once (their loads in flight together).
struct HeldKeys {
  uint4 group[kMaxThreadGroups];
  ThreadGroups range;
};
__device__ void load_keys(const KeyGroups& list, ThreadGroups range, HeldKeys& held) {
  held.range = range;
#pragma unroll
  for (int j = 0; j < kMaxThreadGroups; ++j)
    held.group[j] = j < range.count ? list.load(range.first + j) : make_uint4(0, 0, 0, 0);
}

// Calls f(index, key) for the thread's keys of the list, in index order.
template <class F>
__device__ __forceinline__ void for_each_key(const KeyGroups& list, const HeldKeys& held, F f) {
#pragma unroll
  for (int j = 0; j < kMaxThreadGroups; ++j) {
    if (j >= held.range.count) break;
    const int first = list.first_key(held.range.first + j);
#pragma unroll
    for (int e = 0; e < kGroupKeys; ++e)
      if (list.holds(first + e)) f(first + e, key_of(held.group[j], e));
  }
}

__device__ void clear_histogram(uint32_t* hist) {
  uint4* words = reinterpret_cast<uint4*>(hist);
  for (int i = threadIdx.x; i < kHistWords / 4; i += kThreads) words[i] = make_uint4(0, 0, 0, 0);
}

__device__ void add_to_histogram(const KeyGroups& list, const HeldKeys& held, uint32_t* hist) {
  for_each_key(list, held,
               [&](int, uint32_t key) { atomicAdd(&hist[key / 2], 1u << (16 * (key % 2))); });
}

__device__ __forceinline__ int warp_sum(int x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Walks the block's histogram by high byte: warp w reads high bytes w, w + 32, ... (each lane 8
// consecutive fine bins: one 16-byte load, conflict-free), calls fine(value, count) for each fine
// bin and, on lane 0, high(high_byte, count of the high byte).
template <class Fine, class High>
__device__ void walk_histogram(const uint32_t* hist, Fine fine, High high) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int step = 0; step < kHighBins / kWarps; ++step) {
    const int high_byte = step * kWarps + warp;
    const int first = high_byte * 256 + lane * kGroupKeys;
    const uint4 counts = reinterpret_cast<const uint4*>(hist)[first / kGroupKeys];
    int sum = 0;
#pragma unroll
    for (int e = 0; e < kGroupKeys; ++e) {
      const int count = int(key_of(counts, e));
      fine(first + e, count);
      sum += count;
    }
    sum = warp_sum(sum);
    if (lane == 0) high(high_byte, sum);
  }
}

struct BinChoice {
  int bin;    // 0..255
  int above;  // keys in the higher bins
};

// Warp-wide: of 256 bins, lane l holding counts[j] of bin 255 - 8 l - j (descending), the bin that
// holds the rank-th largest key, 1 <= rank <= the bins' total.
__device__ BinChoice choose_bin(const int (&counts)[kLaneBins], int rank) {
  const int lane = threadIdx.x % 32;
  int local = 0;
#pragma unroll
  for (int j = 0; j < kLaneBins; ++j) local += counts[j];
  int inclusive = local;
  for (int offset = 1; offset < 32; offset *= 2) {
    const int lower = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += lower;
  }
  int above = inclusive - local, bin = 0;
  const bool holds_rank = above < rank && rank <= inclusive;
  if (holds_rank) {
    for (int j = 0; j < kLaneBins; ++j) {
      if (rank <= above + counts[j]) {
        bin = kHighBins - 1 - kLaneBins * lane - j;
        break;
      }
      above += counts[j];
    }
  }
  const int owner = __ffs(__ballot_sync(0xffffffffu, holds_rank)) - 1;
  return {__shfl_sync(0xffffffffu, bin, owner), __shfl_sync(0xffffffffu, above, owner)};
}

struct Threshold {
  uint32_t key;    // the k-th largest key
  int take_equal;  // how many keys equal to it are chosen (the lowest indices)
};

// Warp-wide: the k-th largest key (1 <= k <= the list's length) from high(h), the count of keys
// whose high byte is h, and fine(v), the count of keys equal to v.
template <class High, class Fine>
__device__ Threshold find_threshold(High high, Fine fine, int k) {
  const int top = kHighBins - 1 - kLaneBins * (threadIdx.x % 32);
  int counts[kLaneBins];
#pragma unroll
  for (int j = 0; j < kLaneBins; ++j) counts[j] = high(top - j);
  const BinChoice h = choose_bin(counts, k);
#pragma unroll
  for (int j = 0; j < kLaneBins; ++j) counts[j] = fine(uint32_t(h.bin * 256 + top - j));
  const BinChoice f = choose_bin(counts, k - h.above);
  return {uint32_t(h.bin * 256 + f.bin), k - h.above - f.above};
}

// The thread's keys above / equal to the threshold, packed as (above << 16) | equal: a block holds
// fewer than 65,536 keys, so block sums of the packed form do not carry.
__device__ uint32_t count_against(const KeyGroups& list, const HeldKeys& held, uint32_t threshold) {
  uint32_t above = 0, equal = 0;
  for_each_key(list, held, [&](int, uint32_t key) {
    above += key > threshold;
    equal += key == threshold;
  });
  return (above << 16) | equal;
}

// Ordered compaction of the thread's keys: a chosen key goes to (#above before it) +
// min(#equal before it, take_equal); the counts start from the keys before the thread's first.
__device__ void write_chosen(const KeyGroups& list, const HeldKeys& held, Threshold t, int above,
                             int equal, int32_t* out) {
  for_each_key(list, held, [&](int index, uint32_t key) {
    if (key > t.key) {
      out[above + min(equal, t.take_equal)] = index;
      ++above;
    } else if (key == t.key) {
      if (equal < t.take_equal) out[above + equal] = index;
      ++equal;
    }
  });
}

__device__ __forceinline__ int above_of(uint32_t packed) { return int(packed >> 16); }
__device__ __forceinline__ int equal_of(uint32_t packed) { return int(packed & 0xffffu); }

// ---- Cluster form ----

template <int C>
__device__ __forceinline__ void cluster_sync() {
  if constexpr (C > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::this_cluster().sync();
#endif
  } else {
    __syncthreads();
  }
}

// `p` (shared memory of this block) in the block of the cluster's rank `rank`.
template <int C, class T>
__device__ __forceinline__ T* in_rank(T* p, int rank) {
  if constexpr (C > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cg::this_cluster().map_shared_rank(p, rank);
#endif
  }
  return p;
}

struct ClusterScratch {
  typename PairScan::TempStorage scan;
  int high[kHighBins];
  Threshold threshold;
  uint32_t total;  // this block's packed counts
  int above_before, equal_before;
};

// One list per cluster of C blocks (grid (C, lists); C = 1: one block per list, no cluster).
// Block rank r takes the r-th of C equal runs of the list's groups.
template <int C>
__global__ void __launch_bounds__(kThreads) topk16_cluster_kernel(TopkSelectArgs args) {
  extern __shared__ uint4 dynamic_shared[];
  uint32_t* hist = reinterpret_cast<uint32_t*>(dynamic_shared);
  __shared__ ClusterScratch s;
  wait_for_predecessor();
  allow_successor_launch();
  const int rank = blockIdx.x, list = blockIdx.y;
  const KeyGroups keys = key_groups(args, list);
  const int per_rank = ceil_div(keys.groups(), C);
  HeldKeys held;
  load_keys(keys, thread_groups(rank * per_rank, min(keys.groups(), (rank + 1) * per_rank)), held);
  clear_histogram(hist);
  __syncthreads();
  add_to_histogram(keys, held, hist);
  __syncthreads();
  walk_histogram(
      hist, [](int, int) {}, [&](int high_byte, int count) { s.high[high_byte] = count; });
  cluster_sync<C>();  // every block's histogram and high-byte counts are complete
  if (threadIdx.x < 32) {
    const Threshold t = find_threshold(
        [&](int high_byte) {
          int sum = 0;
          for (int r = 0; r < C; ++r) sum += in_rank<C>(s.high, r)[high_byte];
          return sum;
        },
        [&](uint32_t value) {
          int sum = 0;
          for (int r = 0; r < C; ++r) sum += counter_of(in_rank<C>(hist, r), value);
          return sum;
        },
        args.k);
    if (threadIdx.x == 0) s.threshold = t;
  }
  __syncthreads();
  const Threshold t = s.threshold;
  uint32_t before, total;
  PairScan(s.scan).ExclusiveSum(count_against(keys, held, t.key), before, total);
  if (threadIdx.x == 0) s.total = total;
  cluster_sync<C>();  // every block's total is visible
  if (threadIdx.x == 0) {
    int above = 0, equal = 0;
    for (int r = 0; r < rank; ++r) {
      const uint32_t lower = *in_rank<C>(&s.total, r);
      above += above_of(lower);
      equal += equal_of(lower);
    }
    s.above_before = above;
    s.equal_before = equal;
  }
  cluster_sync<C>();  // no block leaves while another may still read its shared memory
  int32_t* out = args.indices + list * args.index_stride;
  write_chosen(keys, held, t, s.above_before + above_of(before), s.equal_before + equal_of(before),
               out);
  if (rank == 0) finish_list(args, list, args.k, out);
}

// ---- Split form ----

// Workspace, zeroed by the memset before each call: per list the fine bins (int, one per key value)
// and the high-byte counts that topk16_histogram_kernel adds up, per chunk the write kernel's
// status word (kReady | packed counts), and the ticket counter that orders the write kernel's
// blocks.
struct SplitWorkspace {
  int* fine;         // [lists][kValues]
  int* high;         // [lists][kHighBins]
  uint64_t* status;  // [lists][chunks]
  int* tickets;      // [lists]
  int chunks;        // blocks per list
};
constexpr uint64_t kReady = uint64_t(1) << 32;
using StatusWord = ::cuda::atomic_ref<uint64_t, ::cuda::thread_scope_device>;

size_t split_workspace_bytes(int n_lists, int chunks) {
  return size_t(n_lists) *
         ((kValues + kHighBins) * sizeof(int) + chunks * sizeof(uint64_t) + sizeof(int));
}

SplitWorkspace split_workspace(void* workspace, int n_lists, int chunks) {
  SplitWorkspace w;
  w.fine = static_cast<int*>(workspace);
  w.high = w.fine + size_t(n_lists) * kValues;
  w.status = reinterpret_cast<uint64_t*>(w.high + size_t(n_lists) * kHighBins);  // 8-byte aligned
  w.tickets = reinterpret_cast<int*>(w.status + size_t(n_lists) * chunks);
  w.chunks = chunks;
  return w;
}

// Block (chunk, list): the chunk's groups [chunk * chunk_groups, ...) of the list.
__global__ void __launch_bounds__(kThreads)
    topk16_histogram_kernel(TopkSelectArgs args, SplitWorkspace w, int chunk_groups) {
  extern __shared__ uint4 dynamic_shared[];
  uint32_t* hist = reinterpret_cast<uint32_t*>(dynamic_shared);
  wait_for_predecessor();
  allow_successor_launch();
  const int list = blockIdx.y;
  const KeyGroups keys = key_groups(args, list);
  const int begin = blockIdx.x * chunk_groups;
  if (begin >= keys.groups()) return;  // past this list's end (its skew spans fewer groups)
  HeldKeys held;
  load_keys(keys, thread_groups(begin, min(keys.groups(), begin + chunk_groups)), held);
  clear_histogram(hist);
  __syncthreads();
  add_to_histogram(keys, held, hist);
  __syncthreads();
  int* fine = w.fine + size_t(list) * kValues;
  int* high = w.high + list * kHighBins;
  walk_histogram(
      hist,
      [&](int value, int count) {
        if (count) atomicAdd(&fine[value], count);
      },
      [&](int high_byte, int count) {
        if (count) atomicAdd(&high[high_byte], count);
      });
}

struct WriteScratch {
  typename PairScan::TempStorage scan;
  int chunk;
  Threshold threshold;
  int above_before, equal_before;
};

// Sums the status words of chunks [0, chunk) of a list (warp-wide; each is published by its block
// before that block waits on anything, and every earlier chunk's block has started, holding an
// earlier ticket, so the wait ends). The counts travel in the flagged word itself: relaxed
// atomics order all that is needed.
__device__ void look_back(uint64_t* status, int chunk, int& above, int& equal) {
  above = 0;
  equal = 0;
  for (int c = threadIdx.x % 32; c < chunk; c += 32) {
    const StatusWord word(status[c]);
    uint64_t value;
    while (!((value = word.load(::cuda::memory_order_relaxed)) & kReady)) __nanosleep(32);
    above += above_of(uint32_t(value));
    equal += equal_of(uint32_t(value));
  }
  above = warp_sum(above);
  equal = warp_sum(equal);
}

// Block (x, list); a ticket, not blockIdx.x, names its chunk, so that chunks start in order and the
// look-back cannot wait on a block that has no SM.
__global__ void __launch_bounds__(kThreads)
    topk16_write_kernel(TopkSelectArgs args, SplitWorkspace w, int chunk_groups) {
  __shared__ WriteScratch s;
  wait_for_predecessor();
  allow_successor_launch();
  const int list = blockIdx.y;
  uint64_t* status = w.status + size_t(list) * w.chunks;
  if (threadIdx.x == 32) s.chunk = atomicAdd(&w.tickets[list], 1);
  if (threadIdx.x < 32) {
    const int* fine = w.fine + size_t(list) * kValues;
    const int* high = w.high + list * kHighBins;
    const Threshold t = find_threshold([&](int high_byte) { return high[high_byte]; },
                                       [&](uint32_t value) { return fine[value]; }, args.k);
    if (threadIdx.x == 0) s.threshold = t;
  }
  __syncthreads();
  const int chunk = s.chunk;
  const Threshold t = s.threshold;
  const KeyGroups keys = key_groups(args, list);
  const int begin = chunk * chunk_groups;
  HeldKeys held;
  load_keys(keys, thread_groups(begin, min(keys.groups(), begin + chunk_groups)), held);
  uint32_t before, total;
  PairScan(s.scan).ExclusiveSum(count_against(keys, held, t.key), before, total);
  if (threadIdx.x == 0) {
    StatusWord(status[chunk]).store(kReady | total, ::cuda::memory_order_relaxed);
  }
  if (threadIdx.x < 32) {
    int above, equal;
    look_back(status, chunk, above, equal);
    if (threadIdx.x == 0) {
      s.above_before = above;
      s.equal_before = equal;
    }
  }
  __syncthreads();
  int32_t* out = args.indices + list * args.index_stride;
  write_chosen(keys, held, t, s.above_before + above_of(before), s.equal_before + equal_of(before),
               out);
  if (chunk == 0) finish_list(args, list, args.k, out);
}

// ---- Host side ----

// Groups of a list of `length` keys, whatever its skew.
int most_groups(int length) { return ceil_div(length + kGroupKeys - 1, kGroupKeys); }

// Blocks per list of the split form: one wave of the GPU's SMs (its histogram kernel holds an SM
// per block), within kMaxThreadGroups groups and at least one group per thread.
int split_chunks_for(int length, int n_lists) {
  const int groups = most_groups(length);
  const int fewest = ceil_div(groups, kMaxBlockGroups), most = ceil_div(groups, kThreads);
  return std::clamp(sm_count() / n_lists, fewest, std::max(fewest, most));
}

template <int C>
void launch_cluster(const TopkSelectArgs& args, cudaStream_t stream) {
  static const bool ready =
      (allow_dynamic_shared_memory(topk16_cluster_kernel<C>, kHistBytes, "topk16_cluster_kernel"),
       true);
  (void)ready;
  launch_overlapped_clusters(topk16_cluster_kernel<C>, dim3(C, args.n_lists), kThreads, kHistBytes,
                             stream, "topk16_cluster_kernel", C, args);
}

void launch_split(const TopkSelectArgs& args, cudaStream_t stream) {
  static const bool ready =
      (allow_dynamic_shared_memory(topk16_histogram_kernel, kHistBytes, "topk16_histogram_kernel"),
       true);
  (void)ready;
  const int groups = most_groups(args.length);
  const int chunk_groups = ceil_div(groups, split_chunks_for(args.length, args.n_lists));
  const int chunks = ceil_div(groups, chunk_groups);
  const SplitWorkspace w = split_workspace(args.workspace, args.n_lists, chunks);
  check(cudaMemsetAsync(args.workspace, 0, split_workspace_bytes(args.n_lists, chunks), stream),
        "topk16 memset");
  const dim3 grid(chunks, args.n_lists);
  // The histogram kernel follows the memset (not a kernel): a plain launch.
  topk16_histogram_kernel<<<grid, kThreads, kHistBytes, stream>>>(args, w, chunk_groups);
  check(cudaGetLastError(), "topk16_histogram_kernel launch");
  launch_overlapped(topk16_write_kernel, grid, kThreads, 0, stream, "topk16_write_kernel", args, w,
                    chunk_groups);
}

bool split_takes(const TopkSelectArgs& args) {
  return args.workspace && chunks_for(args.length) > kClusterChunks;
}

}  // namespace

bool keys16_one_pass_takes(const TopkSelectArgs& args) {
  if (!args.keys16 || args.keys16_as_digits || args.k <= 0 || args.k >= args.length) return false;
  if (split_takes(args)) return true;
  const int blocks = cluster_blocks_for(args.length, args.n_lists);
  return ceil_div(most_groups(args.length), blocks) <= kMaxBlockGroups;
}

void keys16_one_pass(const TopkSelectArgs& args, cudaStream_t stream) {
  if (split_takes(args)) return launch_split(args, stream);
  with_cluster_blocks(args.length, args.n_lists,
                      [&](auto blocks) { launch_cluster<decltype(blocks)::value>(args, stream); });
}

size_t keys16_workspace_bytes(int n_lists, int length) {
  return split_workspace_bytes(n_lists,
                               ceil_div(most_groups(length), kThreads));  // the most chunks
}

}  // namespace kvb::cuda::topk
