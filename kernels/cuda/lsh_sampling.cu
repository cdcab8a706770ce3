// LSH sampling kernels: middle-key means, key and query codes, per-head sampled lists. Contracts
// and the pipeline: kernels/cuda/lsh_sampling.h; CPU twin: kernels/cpu/lsh_sampling.cc.
//
// Every kernel here is launched normally (not launch_overlapped): it reads what the kernel before
// it wrote only after that kernel has completed.
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/lsh_sampling.h"

namespace kvb::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr double kPi = 3.14159265358979323846;

void check_tables(int bits_per_table, int tables, const char* kernel) {
  if (bits_per_table < 0 || bits_per_table > 16 || tables < 1)
    throw std::invalid_argument(std::string(kernel) + ": K must be in [0, 16] and L >= 1; got K " +
                                std::to_string(bits_per_table) + ", L " + std::to_string(tables));
}

int group_of(int n_query_heads, int n_kv_heads, const char* kernel) {
  const int group = n_kv_heads > 0 ? n_query_heads / n_kv_heads : 0;
  if (group < 1 || group * n_kv_heads != n_query_heads || group > kLshMaxGroup)
    throw std::invalid_argument(std::string(kernel) +
                                ": Hq must be g * Hkv with g <= " + std::to_string(kLshMaxGroup));
  return group;
}

// ---- lsh_key_mean: thread (dim, row group), rows strided by the groups, f64 sums ----

constexpr int kMeanThreads = 256;

template <int D>
__global__ void __launch_bounds__(kMeanThreads) key_mean_kernel(LshKeyMeanArgs args) {
  constexpr int kGroups = kMeanThreads / D;
  __shared__ double partial[kGroups][D];
  const int slot = blockIdx.x, dim = threadIdx.x % D, row_group = threadIdx.x / D;
  const __nv_bfloat16* keys = args.keys + slot * args.key_slot_stride;
  double sum = 0.0;
  for (int j = args.begin + row_group; j < args.end; j += kGroups)
    sum += double(__bfloat162float(keys[int64_t(j) * D + dim]));
  partial[row_group][dim] = sum;
  __syncthreads();
  if (row_group != 0) return;
  for (int g = 1; g < kGroups; ++g) sum += partial[g][dim];
  const int n = args.end - args.begin;
  args.mean[int64_t(slot) * D + dim] = n > 0 ? float(sum / n) : 0.f;
}

// ---- lsh_hash_keys: 4 lanes per key, each holding every 4th float4 of its centred values in
// registers (one thread holding all 128 spilled them to local memory); rows broadcast from shared
// memory in tiles, conflict-free (the 4 lanes read 4 consecutive float4). A product is decided in
// f32 unless it lies within the f32 error bound of a D-term sum, |x . r| <= 2e-5 ||x|| ||r||
// (Cauchy-Schwarz over D * 2^-24 per term); then exact f64 products decide it, like the CPU's. ----

constexpr int kHashThreads = 128;
constexpr int kLanesPerKey = 4;
constexpr int kKeysPerBlock = kHashThreads / kLanesPerKey;
constexpr int kRowTile = 32;

template <int D>
__global__ void __launch_bounds__(kHashThreads) hash_keys_kernel(LshHashKeysArgs args) {
  constexpr int kVectors = D / 4 / kLanesPerKey;  // float4 per lane
  __shared__ __align__(16) float s_rows[kRowTile * D];
  __shared__ float s_row_norms[kRowTile];
  const int slot = blockIdx.y;
  const float* rows = args.projections[slot];
  const float* mean = args.mean + int64_t(slot) * D;
  const int lane = threadIdx.x % kLanesPerKey;
  const int key = args.begin + blockIdx.x * kKeysPerBlock + threadIdx.x / kLanesPerKey;
  const bool live = key < args.end;
  float4 c[kVectors];
  double squares = 0.0;
  {
    const __nv_bfloat16* k = args.keys + slot * args.key_slot_stride + int64_t(live ? key : 0) * D;
#pragma unroll
    for (int v = 0; v < kVectors; ++v) {
      const int t = 4 * (lane + kLanesPerKey * v);
      float x[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        x[i] = live ? __bfloat162float(k[t + i]) - mean[t + i] : 0.f;
        squares += double(x[i]) * double(x[i]);
      }
      c[v] = make_float4(x[0], x[1], x[2], x[3]);
    }
  }
#pragma unroll
  for (int off = kLanesPerKey / 2; off > 0; off /= 2)
    squares += __shfl_xor_sync(kFullMask, squares, off);
  const float norm = float(sqrt(squares));
  uint16_t* codes = args.codes + slot * args.code_slot_stride + (key - args.begin);
  const bool writes = live && lane == 0;
  if (writes) args.centred_norms[slot * args.norm_slot_stride + key - args.begin] = norm;
  const int K = args.bits_per_table, n_rows = K * args.tables;
  if (K == 0) {
    if (writes)
      for (int l = 0; l < args.tables; ++l) codes[l * args.code_table_stride] = 0;
    return;
  }
  uint32_t code = 0;
  for (int tile = 0; tile < n_rows; tile += kRowTile) {
    const int in_tile = min(kRowTile, n_rows - tile);
    __syncthreads();  // the previous tile is no longer read
    for (int i = threadIdx.x; i < in_tile * D; i += kHashThreads)
      s_rows[i] = rows[int64_t(tile) * D + i];
    __syncthreads();
    if (threadIdx.x < in_tile) {
      float sum = 0.f;
      for (int t = 0; t < D; ++t) sum += s_rows[threadIdx.x * D + t] * s_rows[threadIdx.x * D + t];
      s_row_norms[threadIdx.x] = sqrtf(sum);
    }
    __syncthreads();
    for (int r = 0; r < in_tile; ++r) {
      const float4* row = reinterpret_cast<const float4*>(s_rows + r * D);
      float dot = 0.f;
#pragma unroll
      for (int v = 0; v < kVectors; ++v) {
        const float4 w = row[lane + kLanesPerKey * v];
        dot += c[v].x * w.x + c[v].y * w.y + c[v].z * w.z + c[v].w * w.w;
      }
#pragma unroll
      for (int off = kLanesPerKey / 2; off > 0; off /= 2)
        dot += __shfl_xor_sync(kFullMask, dot, off);
      bool positive = dot > 0.f;
      const bool ambiguous = live && fabsf(dot) <= 2e-5f * norm * s_row_norms[r];
      if (__any_sync(kFullMask, ambiguous)) {
        double exact = 0.0;
#pragma unroll
        for (int v = 0; v < kVectors; ++v) {
          const float4 w = row[lane + kLanesPerKey * v];
          exact += double(c[v].x) * w.x + double(c[v].y) * w.y + double(c[v].z) * w.z +
                   double(c[v].w) * w.w;
        }
#pragma unroll
        for (int off = kLanesPerKey / 2; off > 0; off /= 2)
          exact += __shfl_xor_sync(kFullMask, exact, off);
        if (ambiguous) positive = exact > 0.0;
      }
      const int row_index = tile + r, bit = row_index % K;
      if (positive) code |= 1u << bit;
      if (bit == K - 1) {
        if (writes) codes[(row_index / K) * args.code_table_stride] = uint16_t(code);
        code = 0;
      }
    }
  }
}

// ---- lsh_hash_queries: one thread per row, the group's f64 sums in the CPU's order ----

constexpr int kQueryThreads = 128;

template <int D>
__global__ void __launch_bounds__(kQueryThreads)
    hash_queries_kernel(LshHashQueriesArgs args, int tables_per_block) {
  extern __shared__ float s_q[];  // [group][D], then the codes [group][tables_per_block]
  const int slot = blockIdx.y;
  const int b = slot / args.n_kv_heads, h = slot % args.n_kv_heads;
  const int group = args.n_query_heads / args.n_kv_heads;
  uint32_t* s_codes = reinterpret_cast<uint32_t*>(s_q + group * D);
  const __nv_bfloat16* q = args.q + b * args.q_seq_stride + int64_t(h) * group * D;
  for (int i = threadIdx.x; i < group * D; i += kQueryThreads) s_q[i] = __bfloat162float(q[i]);
  for (int i = threadIdx.x; i < group * tables_per_block; i += kQueryThreads) s_codes[i] = 0;
  __syncthreads();
  const int K = args.bits_per_table;
  const int first_table = blockIdx.x * tables_per_block;
  const int tables = min(tables_per_block, args.tables - first_table);
  if (K > 0 && threadIdx.x < tables * K) {
    const int local_table = threadIdx.x / K, bit = threadIdx.x % K;
    const float* row = args.projections[slot] + (int64_t(first_table) * K + threadIdx.x) * D;
    double sum[kLshMaxGroup];
#pragma unroll
    for (int g = 0; g < kLshMaxGroup; ++g) sum[g] = 0.0;
    for (int t = 0; t < D; ++t) {
      const double r = double(row[t]);
#pragma unroll
      for (int g = 0; g < kLshMaxGroup; ++g)
        if (g < group) sum[g] += double(s_q[g * D + t]) * r;
    }
#pragma unroll
    for (int g = 0; g < kLshMaxGroup; ++g)
      if (g < group && sum[g] > 0.0)
        atomicOr(&s_codes[g * tables_per_block + local_table], 1u << bit);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < group * tables; i += kQueryThreads) {
    const int g = i / tables, l = i % tables;
    args.codes[(int64_t(b) * args.n_query_heads + h * group + g) * args.tables + first_table + l] =
        uint16_t(s_codes[g * tables_per_block + l]);
  }
}

// ---- lsh_sample_lists, part 1: collisions of every hashed key with the group's query codes ----

constexpr int kCollideThreads = 256;

// P(at least t of L tables collide), each with probability p^K (kernels/cpu/lsh_sampling.cc).
__device__ double sampling_probability(double p, int K, int L, int t) {
  const double per_table = pow(p, double(K));
  double below = 0.0, binomial = 1.0;
  for (int c = 0; c < t; ++c) {
    below += binomial * pow(per_table, double(c)) * pow(1.0 - per_table, double(L - c));
    binomial = binomial * (L - c) / (c + 1);
  }
  return fmin(fmax(1.0 - below, 0.0), 1.0);
}

template <int D>
__global__ void __launch_bounds__(kCollideThreads) collide_kernel(LshSampleListsArgs args) {
  extern __shared__ float smem[];  // q [group][D], mean [D], q norms [group] (f64), codes
  const int slot = blockIdx.y;
  const int b = slot / args.n_kv_heads, h = slot % args.n_kv_heads;
  const int group = args.n_query_heads / args.n_kv_heads;
  const int L = args.tables;
  float* s_q = smem;
  float* s_mean = s_q + group * D;
  double* s_norm = reinterpret_cast<double*>(s_mean + D);  // 8-byte aligned: D is a multiple of 2
  uint16_t* s_codes = reinterpret_cast<uint16_t*>(s_norm + kLshMaxGroup);  // [group][L]
  const int head0 = h * group;
  const __nv_bfloat16* q = args.q + b * args.q_seq_stride + int64_t(head0) * D;
  for (int i = threadIdx.x; i < group * D; i += kCollideThreads) s_q[i] = __bfloat162float(q[i]);
  for (int i = threadIdx.x; i < D; i += kCollideThreads)
    s_mean[i] = args.mean[int64_t(slot) * D + i];
  for (int i = threadIdx.x; i < group * L; i += kCollideThreads)
    s_codes[i] = args.query_codes[(int64_t(b) * args.n_query_heads + head0) * L + i];
  __syncthreads();
  if (threadIdx.x < group) {  // the CPU's sequential f64 sum
    double sum = 0.0;
    for (int t = 0; t < D; ++t) sum += double(s_q[threadIdx.x * D + t]) * s_q[threadIdx.x * D + t];
    s_norm[threadIdx.x] = sqrt(sum);
  }
  __syncthreads();
  const int n = args.end - args.begin;
  const int m = blockIdx.x * kCollideThreads + threadIdx.x;
  const bool live = m < n;
  int together[kLshMaxGroup];
#pragma unroll
  for (int g = 0; g < kLshMaxGroup; ++g) together[g] = 0;
  if (live) {
    const uint16_t* codes = args.codes + slot * args.code_slot_stride + m;
    for (int l = 0; l < L; ++l) {
      const uint16_t code = codes[int64_t(l) * args.code_table_stride];
#pragma unroll
      for (int g = 0; g < kLshMaxGroup; ++g)
        if (g < group) together[g] += code == s_codes[g * L + l];
    }
  }
  const int words = (n + 31) / 32;
  const __nv_bfloat16* key = args.keys + slot * args.key_slot_stride + int64_t(args.begin + m) * D;
  const float centred_norm = live ? args.centred_norms[slot * args.norm_slot_stride + m] : 0.f;
#pragma unroll
  for (int g = 0; g < kLshMaxGroup; ++g) {
    if (g >= group) break;  // uniform over the block
    const bool sampled = live && together[g] >= args.min_collisions;
    const int64_t head = int64_t(b) * args.n_query_heads + head0 + g;
    const unsigned word = __ballot_sync(kFullMask, sampled);
    // Lane 0 holds the word's first key: the word exists when that key does.
    if (threadIdx.x % 32 == 0 && m < n) args.sampled_mask[head * words + m / 32] = word;
    if (!sampled) continue;
    double dot = 0.0;  // q . (k - mean), the CPU's order
    for (int t = 0; t < D; ++t)
      dot += double(s_q[g * D + t]) * double(__bfloat162float(key[t]) - s_mean[t]);
    const double denominator = s_norm[g] * double(centred_norm);
    const double cosine = denominator > 0.0 ? fmin(fmax(dot / denominator, -1.0), 1.0) : 0.0;
    const double p = 1.0 - acos(cosine) / kPi;
    const double u = sampling_probability(p, args.bits_per_table, L, args.min_collisions);
    args.sampled_bias[head * n + m] = float(-log(u + 1e-4));
  }
}

// ---- lsh_sample_lists, part 2: one block per query head writes its list in order ----

constexpr int kCompactThreads = 256;

__global__ void __launch_bounds__(kCompactThreads) compact_kernel(LshSampleListsArgs args) {
  __shared__ int s_warp_total[kCompactThreads / 32];
  const int head = blockIdx.x;  // b * Hq + a
  const int b = head / args.n_query_heads, a = head % args.n_query_heads;
  const int group = args.n_query_heads / args.n_kv_heads;
  const int slot = b * args.n_kv_heads + a / group;
  const int n = args.end - args.begin, words = (n + 31) / 32;
  int32_t* list = args.indices + int64_t(head) * args.index_stride;
  float* bias = args.logit_bias + int64_t(head) * args.index_stride;
  for (int j = threadIdx.x; j < args.begin; j += kCompactThreads) {
    list[j] = j;
    bias[j] = 0.f;
  }
  const uint32_t* mask = args.sampled_mask + int64_t(head) * words;
  const float* sampled_bias = args.sampled_bias + int64_t(head) * n;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int base = args.begin;
  for (int chunk = 0; chunk < words; chunk += kCompactThreads) {
    const int w = chunk + threadIdx.x;
    const uint32_t word = w < words ? mask[w] : 0u;
    const int count = __popc(word);
    int before = count;  // inclusive scan within the warp
    for (int off = 1; off < 32; off *= 2) {
      const int other = __shfl_up_sync(kFullMask, before, off);
      if (lane >= off) before += other;
    }
    if (lane == 31) s_warp_total[warp] = before;
    __syncthreads();
    int offset = base + before - count, total = 0;
    for (int i = 0; i < kCompactThreads / 32; ++i) {
      if (i < warp) offset += s_warp_total[i];
      total += s_warp_total[i];
    }
    for (uint32_t bits = word; bits != 0; bits &= bits - 1) {
      const int m = w * 32 + __ffs(bits) - 1;
      list[offset] = args.begin + m;
      bias[offset] = sampled_bias[m];
      ++offset;
    }
    base += total;
    __syncthreads();  // s_warp_total is rewritten by the next chunk
  }
  const int length = args.lengths[slot];
  for (int j = args.end + threadIdx.x; j < length; j += kCompactThreads) {
    list[base + j - args.end] = j;
    bias[base + j - args.end] = 0.f;
  }
  if (threadIdx.x == 0) {
    args.index_offset[head] = int64_t(head) * args.index_stride;
    args.index_count[head] = base + max(0, length - args.end);
  }
}

template <typename Fn>
void with_head_dim(int head_dim, const char* kernel, Fn&& fn) {
  with_constant<64, 128>(head_dim, (std::string(kernel) + ": head_dim").c_str(),
                         std::forward<Fn>(fn));
}

}  // namespace

void lsh_key_mean(const LshKeyMeanArgs& args, cudaStream_t stream) {
  if (args.n_slots <= 0) return;
  with_head_dim(args.head_dim, "lsh_key_mean", [&](auto dim) {
    key_mean_kernel<decltype(dim)::value><<<args.n_slots, kMeanThreads, 0, stream>>>(args);
  });
  check(cudaGetLastError(), "lsh_key_mean");
}

void lsh_hash_keys(const LshHashKeysArgs& args, cudaStream_t stream) {
  check_tables(args.bits_per_table, args.tables, "lsh_hash_keys");
  if (args.n_slots <= 0 || args.end <= args.begin) return;
  const dim3 grid((args.end - args.begin + kKeysPerBlock - 1) / kKeysPerBlock, args.n_slots);
  with_head_dim(args.head_dim, "lsh_hash_keys", [&](auto dim) {
    hash_keys_kernel<decltype(dim)::value><<<grid, kHashThreads, 0, stream>>>(args);
  });
  check(cudaGetLastError(), "lsh_hash_keys");
}

void lsh_hash_queries(const LshHashQueriesArgs& args, cudaStream_t stream) {
  check_tables(args.bits_per_table, args.tables, "lsh_hash_queries");
  const int group = group_of(args.n_query_heads, args.n_kv_heads, "lsh_hash_queries");
  if (args.batch <= 0) return;
  const int tables_per_block = std::max(1, kQueryThreads / std::max(1, args.bits_per_table));
  const dim3 grid((args.tables + tables_per_block - 1) / tables_per_block,
                  args.batch * args.n_kv_heads);
  const size_t shared = size_t(group) * (args.head_dim * 4 + tables_per_block * 4);
  with_head_dim(args.head_dim, "lsh_hash_queries", [&](auto dim) {
    hash_queries_kernel<decltype(dim)::value>
        <<<grid, kQueryThreads, shared, stream>>>(args, tables_per_block);
  });
  check(cudaGetLastError(), "lsh_hash_queries");
}

void lsh_sample_lists(const LshSampleListsArgs& args, cudaStream_t stream) {
  check_tables(args.bits_per_table, args.tables, "lsh_sample_lists");
  const int group = group_of(args.n_query_heads, args.n_kv_heads, "lsh_sample_lists");
  if (args.batch <= 0) return;
  const int n = args.end - args.begin;
  if (args.begin < 0 || n < 0 || args.index_stride < args.end)
    throw std::invalid_argument("lsh_sample_lists: needs 0 <= begin <= end <= index_stride");
  if (n > 0) {
    const size_t shared =
        size_t(group + 1) * args.head_dim * 4 + kLshMaxGroup * 8 + size_t(group) * args.tables * 2;
    if (shared > 48 * 1024)
      throw std::invalid_argument("lsh_sample_lists: " + std::to_string(args.tables) +
                                  " tables x a group of " + std::to_string(group) +
                                  " do not fit in shared memory (use fewer tables)");
    const dim3 grid((n + kCollideThreads - 1) / kCollideThreads, args.batch * args.n_kv_heads);
    with_head_dim(args.head_dim, "lsh_sample_lists", [&](auto dim) {
      collide_kernel<decltype(dim)::value><<<grid, kCollideThreads, shared, stream>>>(args);
    });
    check(cudaGetLastError(), "lsh_sample_lists (collisions)");
  }
  compact_kernel<<<args.batch * args.n_query_heads, kCompactThreads, 0, stream>>>(args);
  check(cudaGetLastError(), "lsh_sample_lists (lists)");
}

}  // namespace kvb::cuda
