#include <cfloat>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/dropkv_scores.h"
#include "kernels/cuda/mma_tiles.cuh"

namespace kvb::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTileKeys = 64;
constexpr int kRowsPerPass = 64;  // 4 warps x 16 rows

__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

// Loads rows r0.. of the (query head, window row) matrix of KV head h: row r = a_local * W + t.
template <int D>
__device__ void load_rows(__nv_bfloat16* smem, const __nv_bfloat16* base, const DropKvScoreArgs& a,
                          int head0, int r0, int rows) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kRowsPerPass * kChunks; i += blockDim.x) {
    const int row = i / kChunks, chunk = i % kChunks;
    const int r = r0 + row;
    const bool valid = r < rows;
    const int head = head0 + (valid ? r / a.window : 0);
    const int t = valid ? r % a.window : 0;
    cp_async_16(smem + swizzled<D>(row, chunk * 8), base + t * a.row_stride + head * D + chunk * 8,
                valid);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) dropkv_score_kernel(DropKvScoreArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* s_y = s_q + kRowsPerPass * D;
  __nv_bfloat16* s_k = s_y + kRowsPerPass * D;
  __nv_bfloat16* s_v = s_k + kTileKeys * D;
  __shared__ float s_lse2[kRowsPerPass], s_ynorm[kRowsPerPass], s_vnorm[kTileKeys];
  __shared__ float s_acc[4][kTileKeys];

  const int h = blockIdx.y;
  const int key0 = blockIdx.x * kTileKeys;
  const int group = a.n_query_heads / a.n_kv_heads;
  const int head0 = h * group;
  const int rows = group * a.window;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int valid_keys = min(kTileKeys, a.length - key0);
  load_tile<D>(s_k, a.keys + h * a.head_stride + int64_t(key0) * D, D, kTileKeys, valid_keys);
  load_tile<D>(s_v, a.values + h * a.head_stride + int64_t(key0) * D, D, kTileKeys, valid_keys);
  for (int i = threadIdx.x; i < 4 * kTileKeys; i += kThreads) (&s_acc[0][0])[i] = 0.f;
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(D));

  for (int r0 = 0; r0 < rows; r0 += kRowsPerPass) {
    load_rows<D>(s_q, a.queries, a, head0, r0, rows);
    load_rows<D>(s_y, a.outputs, a, head0, r0, rows);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    if (threadIdx.x < kRowsPerPass) {
      const int r = r0 + threadIdx.x;
      float norm = 0.f;
      for (int i = 0; i < D; ++i) {
        const float y = __bfloat162float(s_y[swizzled<D>(threadIdx.x, i)]);
        norm += y * y;
      }
      s_ynorm[threadIdx.x] = norm;
      s_lse2[threadIdx.x] =
          r < rows ? a.lse[(head0 + r / a.window) * a.window + r % a.window] * 1.4426950408889634f
                   : 0.f;
    } else if (r0 == 0 && threadIdx.x - kRowsPerPass < kTileKeys) {
      const int key = threadIdx.x - kRowsPerPass;
      float norm = 0.f;
      for (int i = 0; i < D; ++i) {
        const float v = __bfloat162float(s_v[swizzled<D>(key, i)]);
        norm += v * v;
      }
      s_vnorm[key] = norm;
    }
    __syncthreads();

    // S = Q K^T and G = Y V^T for this warp's 16 rows and the tile's 64 keys.
    constexpr int kSteps = D / 16;
    float s[8][4], gy[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = gy[i][e] = 0.f;
    const int j8 = lane / 8;
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      uint32_t qa[4], ya[4];
      ldmatrix_x4(qa, s_q + swizzled<D>(warp * 16 + (lane % 16), ks * 16 + (lane / 16) * 8));
      ldmatrix_x4(ya, s_y + swizzled<D>(warp * 16 + (lane % 16), ks * 16 + (lane / 16) * 8));
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t kb[4], vb[4];
        ldmatrix_x4(kb,
                    s_k + swizzled<D>(np * 16 + (j8 / 2) * 8 + (lane % 8), ks * 16 + (j8 % 2) * 8));
        ldmatrix_x4(vb,
                    s_v + swizzled<D>(np * 16 + (j8 / 2) * 8 + (lane % 8), ks * 16 + (j8 % 2) * 8));
        mma_bf16(s[2 * np], qa, kb[0], kb[1]);
        mma_bf16(s[2 * np + 1], qa, kb[2], kb[3]);
        mma_bf16(gy[2 * np], ya, vb[0], vb[1]);
        mma_bf16(gy[2 * np + 1], ya, vb[2], vb[3]);
      }
    }
    // Per element: ω · max(0, ‖y‖² + ‖v‖² − 2⟨y,v⟩), summed over this thread's two rows.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      float column[2] = {0.f, 0.f};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local_row = warp * 16 + g + 8 * (e >> 1);
        const int r = r0 + local_row;
        const int key_local = nt * 8 + 2 * t + (e & 1);
        const int key = key0 + key_local;
        if (r >= rows || key >= a.length || key > a.length - a.window + r % a.window) continue;
        float p = exp2f(s[nt][e] * scale_log2 - s_lse2[local_row]);
        p = fminf(fmaxf(p, 0.f), 1.f);
        if (a.round_p_to_bf16) p = round_bf16(p);
        const float w = p / (1.f - p + 1e-6f);
        const float dist = fmaxf(0.f, s_ynorm[local_row] + s_vnorm[key_local] - 2.f * gy[nt][e]);
        column[e & 1] += w * w * dist;
      }
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        column[c] += __shfl_xor_sync(0xffffffff, column[c], 4);
        column[c] += __shfl_xor_sync(0xffffffff, column[c], 8);
        column[c] += __shfl_xor_sync(0xffffffff, column[c], 16);
      }
      if (g == 0) {
        s_acc[warp][nt * 8 + 2 * t] += column[0];
        s_acc[warp][nt * 8 + 2 * t + 1] += column[1];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x < valid_keys) {
    const int k = threadIdx.x;
    a.scores[int64_t(h) * a.length + key0 + k] =
        (s_acc[0][k] + s_acc[1][k] + s_acc[2][k] + s_acc[3][k]) / group;
  }
}

__global__ void pool_kernel(const float* raw, float* pooled, int length, int kernel,
                            bool max_pool) {
  const int h = blockIdx.y;
  const int half = kernel / 2;
  const float* in = raw + int64_t(h) * length;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < length; j += gridDim.x * blockDim.x) {
    float acc = max_pool ? -INFINITY : 0.f;
    for (int o = -half; o <= half; ++o) {
      const int i = j + o;
      if (i < 0 || i >= length) continue;  // max: -inf padding; avg: zero padding
      acc = max_pool ? fmaxf(acc, in[i]) : acc + in[i];
    }
    pooled[int64_t(h) * length + j] = max_pool ? acc : acc / kernel;
  }
}

__global__ void protect_kernel(float* pooled, int length, int protect) {
  const int h = blockIdx.x;
  float* row = pooled + int64_t(h) * length;
  float best = -INFINITY;
  for (int j = threadIdx.x; j < length; j += blockDim.x) best = fmaxf(best, row[j]);
  __shared__ float s_best[32];
  for (int off = 16; off > 0; off /= 2) best = fmaxf(best, __shfl_xor_sync(0xffffffff, best, off));
  if (threadIdx.x % 32 == 0) s_best[threadIdx.x / 32] = best;
  __syncthreads();
  best = -INFINITY;
  for (int w = 0; w < int(blockDim.x / 32); ++w) best = fmaxf(best, s_best[w]);
  for (int j = max(0, length - protect) + threadIdx.x; j < length; j += blockDim.x)
    row[j] = best + 1.f;
}

// Materialising baseline: P [rows, L] then D [rows, L, d] = y - v, then the weighted norms.
__global__ void naive_probs_kernel(DropKvScoreArgs a, int h, float* probs) {
  const int group = a.n_query_heads / a.n_kv_heads;
  const int rows = group * a.window;
  const int64_t total = int64_t(rows) * a.length;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int r = int(i / a.length), j = int(i % a.length);
    const int head = h * group + r / a.window, t = r % a.window;
    float p = 0.f;
    if (j <= a.length - a.window + t) {
      float dot = 0.f;
      for (int k = 0; k < a.head_dim; ++k)
        dot += __bfloat162float(a.queries[t * a.row_stride + head * a.head_dim + k]) *
               __bfloat162float(a.keys[h * a.head_stride + int64_t(j) * a.head_dim + k]);
      p = fminf(fmaxf(expf(dot / sqrtf(float(a.head_dim)) - a.lse[head * a.window + t]), 0.f), 1.f);
      if (a.round_p_to_bf16) p = round_bf16(p);
    }
    probs[i] = p;
  }
}
__global__ void naive_diff_kernel(DropKvScoreArgs a, int h, float* diff) {
  const int group = a.n_query_heads / a.n_kv_heads;
  const int rows = group * a.window;
  const int64_t total = int64_t(rows) * a.length * a.head_dim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int k = int(i % a.head_dim);
    const int64_t rj = i / a.head_dim;
    const int r = int(rj / a.length), j = int(rj % a.length);
    const int head = h * group + r / a.window, t = r % a.window;
    diff[i] = __bfloat162float(a.outputs[t * a.row_stride + head * a.head_dim + k]) -
              __bfloat162float(a.values[h * a.head_stride + int64_t(j) * a.head_dim + k]);
  }
}
__global__ void naive_reduce_kernel(DropKvScoreArgs a, int h, const float* probs,
                                    const float* diff) {
  const int group = a.n_query_heads / a.n_kv_heads;
  const int rows = group * a.window;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < a.length; j += gridDim.x * blockDim.x) {
    float total = 0.f;
    for (int r = 0; r < rows; ++r) {
      const float p = probs[int64_t(r) * a.length + j];
      const float w = p / (1.f - p + 1e-6f);
      float norm = 0.f;
      const float* dd = diff + (int64_t(r) * a.length + j) * a.head_dim;
      for (int k = 0; k < a.head_dim; ++k) norm += dd[k] * dd[k];
      total += w * w * norm;
    }
    a.scores[int64_t(h) * a.length + j] = total / group;
  }
}

template <int D>
void launch_scores(const DropKvScoreArgs& args, cudaStream_t stream) {
  const size_t smem = size_t(2 * kRowsPerPass + 2 * kTileKeys) * D * sizeof(__nv_bfloat16);
  check(cudaFuncSetAttribute(dropkv_score_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(smem)),
        "cudaFuncSetAttribute(dropkv_score_kernel)");
  dim3 grid((args.length + kTileKeys - 1) / kTileKeys, args.n_kv_heads);
  dropkv_score_kernel<D><<<grid, kThreads, smem, stream>>>(args);
  check(cudaGetLastError(), "dropkv_score_kernel");
}

}  // namespace

void dropkv_scores(const DropKvScoreArgs& args, cudaStream_t stream) {
  if (args.length <= 0) return;
  switch (args.head_dim) {
    case 64:
      launch_scores<64>(args, stream);
      break;
    case 128:
      launch_scores<128>(args, stream);
      break;
    default:
      throw std::invalid_argument("dropkv_scores: head_dim must be 64 or 128");
  }
}

void pool_and_protect(const float* raw, float* pooled, int n_heads, int length, int kernel,
                      bool max_pool, int protect, cudaStream_t stream) {
  pool_kernel<<<dim3((length + 255) / 256, n_heads), 256, 0, stream>>>(raw, pooled, length, kernel,
                                                                       max_pool);
  check(cudaGetLastError(), "pool_kernel");
  protect_kernel<<<n_heads, 1024, 0, stream>>>(pooled, length, protect);
  check(cudaGetLastError(), "protect_kernel");
}

size_t dropkv_scores_materialised(const DropKvScoreArgs& args, cudaStream_t stream) {
  const int rows = args.n_query_heads / args.n_kv_heads * args.window;
  DeviceBuffer probs(size_t(rows) * args.length * 4, "naive probs");
  DeviceBuffer diff(size_t(rows) * args.length * args.head_dim * 4, "naive differences");
  for (int h = 0; h < args.n_kv_heads; ++h) {
    naive_probs_kernel<<<2048, 256, 0, stream>>>(args, h, probs.as<float>());
    naive_diff_kernel<<<4096, 256, 0, stream>>>(args, h, diff.as<float>());
    naive_reduce_kernel<<<(args.length + 255) / 256, 256, 0, stream>>>(args, h, probs.as<float>(),
                                                                       diff.as<float>());
  }
  check(cudaGetLastError(), "dropkv_scores_materialised");
  check(cudaStreamSynchronize(stream), "dropkv_scores_materialised");
  return probs.bytes() + diff.bytes();
}

}  // namespace kvb::cuda
