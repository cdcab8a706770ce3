// Per-list top-k: radix select of the k-th largest key, then an ordered compaction.
// Contract and CPU twin: kernels/cuda/topk_select.h.
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/topk_select.h"

namespace kvb::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kDigitBits = 11;
constexpr int kBins = 1 << kDigitBits;
constexpr int kBinsPerThread = kBins / kThreads;
constexpr int kPerThread = 8;  // contiguous keys per thread in the compaction

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

template <class KeyOf>
__global__ void __launch_bounds__(kThreads) topk_select_kernel(TopkSelectArgs args, KeyOf key) {
  const int list = blockIdx.x;
  key.p += list * args.key_stride;
  const int n = args.length;
  const int k = min(max(args.k, 0), n);
  int32_t* out = args.indices + list * args.index_stride;

  // Radix select, most significant digit first, with digits of up to 11 bits (16-bit keys: 2
  // passes, f32: 3): fine bins keep same-address shared atomics rare even when the scores bunch up
  // (BinaryPC's integer scores sit in a few hundred values). After the passes `prefix` is the k-th
  // largest key and `remaining` how many keys equal to it are taken (the lowest indices).
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int hist[kBins];
  __shared__ uint32_t s_digit;
  __shared__ int s_above;
  uint32_t prefix = 0, mask = 0;
  int remaining = k;
  if (k > 0 && k < n) {
    for (int shift = KeyOf::kBits; shift > 0;) {
      const int width = min(kDigitBits, shift);
      shift -= width;
      const uint32_t digit_mask = (1u << width) - 1;
      for (int i = threadIdx.x; i < kBins; i += kThreads) hist[i] = 0;
      __syncthreads();
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const uint32_t v = key(i);
        if ((v & mask) == prefix) atomicAdd(&hist[(v >> shift) & digit_mask], 1);
      }
      __syncthreads();
      // Thread t owns bins 2047-2t and 2046-2t (from the top); a block scan gives the counts above.
      const int top_bin = kBins - 1 - kBinsPerThread * threadIdx.x;
      int local = 0;
#pragma unroll
      for (int j = 0; j < kBinsPerThread; ++j) local += hist[top_bin - j];
      int above;
      Scan(scan_storage).ExclusiveSum(local, above);
      if (above < remaining && remaining <= above + local) {
        for (int j = 0; j < kBinsPerThread; ++j) {
          const int count = hist[top_bin - j];
          if (remaining <= above + count) {
            s_digit = top_bin - j;
            s_above = above;
            break;
          }
          above += count;
        }
      }
      __syncthreads();
      prefix |= s_digit << shift;
      mask |= digit_mask << shift;
      remaining -= s_above;
      __syncthreads();
    }
  }
  const uint32_t threshold = k < n ? prefix : 0u;  // k == n: every key passes
  const int need_equal = k < n ? remaining : n;

  // Ordered compaction: kept key i goes to (#greater before i) + min(#equal before i, need_equal).
  using PairScan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename PairScan::TempStorage pair_storage;
  int base_greater = 0, base_equal = 0;
  for (int tile = 0; k > 0 && tile < n; tile += kThreads * kPerThread) {
    if (base_greater + min(base_equal, need_equal) == k) break;  // uniform across the block
    const int first = tile + threadIdx.x * kPerThread;
    uint32_t v[kPerThread];
    uint32_t greater = 0, equal = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const bool live = first + j < n;
      v[j] = live ? key(first + j) : 0u;
      greater += live && v[j] > threshold;
      equal += live && v[j] == threshold;
    }
    uint32_t before, total;
    PairScan(pair_storage).ExclusiveSum((greater << 16) | equal, before, total);
    int g = base_greater + static_cast<int>(before >> 16);
    int e = base_equal + static_cast<int>(before & 0xffffu);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      if (first + j >= n) break;
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

  for (int i = threadIdx.x; i < args.tail_count; i += kThreads) out[k + i] = args.tail_begin + i;
  if (args.index_offset) {
    for (int r = threadIdx.x; r < args.heads_per_list; r += kThreads) {
      args.index_offset[list * args.heads_per_list + r] = list * args.index_stride;
      args.index_count[list * args.heads_per_list + r] = k + args.tail_count;
    }
  }
}

}  // namespace

void topk_select(const TopkSelectArgs& args, cudaStream_t stream) {
  if (args.n_lists <= 0) return;
  if ((args.keys16 == nullptr) == (args.scores == nullptr))
    throw std::invalid_argument("topk_select: give exactly one of keys16 and scores");
  if (args.index_offset && !args.index_count)
    throw std::invalid_argument("topk_select: index_offset needs index_count");
  if (args.keys16)
    topk_select_kernel<<<args.n_lists, kThreads, 0, stream>>>(args, Keys16{args.keys16});
  else
    topk_select_kernel<<<args.n_lists, kThreads, 0, stream>>>(args, KeysF32{args.scores});
  check(cudaGetLastError(), "topk_select_kernel launch");
}

}  // namespace kvb::cuda
