// RMSNorm kernels; contract: kernels/cuda/rmsnorm.h. A decode step's few rows take one block of
// 1,024 threads per row; prefill's many rows a vectorised kernel.
#include <stdexcept>
#include <string>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rmsnorm.h"

namespace kvb::cuda {
namespace {

// One block per row holding the row in registers, so each element is read once and the loads of a
// row all leave before the first use (a decode step's rows are single blocks: latency, not
// bandwidth, sets their time).
constexpr int kNormThreads = 1024;
constexpr int kNormMaxPerThread = 16;

__global__ void __launch_bounds__(kNormThreads)
    add_rmsnorm_kernel(float* residual, const __nv_bfloat16* delta, const __nv_bfloat16* weight,
                       int d_model, float eps, __nv_bfloat16* out) {
  float scales[kNormMaxPerThread];  // the weights: constant, so read before the wait
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int j = threadIdx.x + k * kNormThreads;
    scales[k] = j < d_model ? __bfloat162float(weight[j]) : 0.f;
  }
  wait_for_predecessor();
  allow_successor_launch();
  const int64_t row = blockIdx.x;
  float* x = residual + row * d_model;
  float values[kNormMaxPerThread];
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int j = threadIdx.x + k * kNormThreads;
    values[k] = 0.f;
    if (j < d_model) {
      float value = x[j];
      if (delta) {
        value += __bfloat162float(delta[row * d_model + j]);
        x[j] = value;
      }
      values[k] = value;
      sum_sq += value * value;
    }
  }
  const float inv = rsqrtf(block_sum(sum_sq) / d_model + eps);
#pragma unroll
  for (int k = 0; k < kNormMaxPerThread; ++k) {
    const int j = threadIdx.x + k * kNormThreads;
    if (j < d_model) out[row * d_model + j] = __float2bfloat16(values[k] * inv * scales[k]);
  }
}

// Prefill's many rows: 256 threads per row, 4 consecutive values per access (16-byte residual,
// 8-byte delta and output), so a 32K-row norm streams at the memory's rate instead of one scalar
// per thread.
constexpr int kRowsNormThreads = 256;
constexpr int kRowsNormMaxChunks = 8;  // d_model <= 256 * 4 * 8 = 8,192
constexpr int kRowsNormMinRows = 16;

struct Bf16x4 {
  __nv_bfloat162 lo, hi;
};

__global__ void __launch_bounds__(kRowsNormThreads)
    add_rmsnorm_rows_kernel(float* residual, const __nv_bfloat16* delta,
                            const __nv_bfloat16* weight, int d_model, float eps,
                            __nv_bfloat16* out) {
  wait_for_predecessor();
  allow_successor_launch();
  const int64_t row = blockIdx.x;
  const int chunks = d_model / 4;
  auto* x = reinterpret_cast<float4*>(residual + row * d_model);
  float4 values[kRowsNormMaxChunks];
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < kRowsNormMaxChunks; ++k) {
    const int c = threadIdx.x + k * kRowsNormThreads;
    values[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < chunks) {
      float4 value = x[c];
      if (delta) {
        const Bf16x4 d = reinterpret_cast<const Bf16x4*>(delta + row * d_model)[c];
        const float2 lo = __bfloat1622float2(d.lo), hi = __bfloat1622float2(d.hi);
        value = make_float4(value.x + lo.x, value.y + lo.y, value.z + hi.x, value.w + hi.y);
        x[c] = value;
      }
      values[k] = value;
      sum_sq += value.x * value.x + value.y * value.y + value.z * value.z + value.w * value.w;
    }
  }
  const float inv = rsqrtf(block_sum(sum_sq) / d_model + eps);
#pragma unroll
  for (int k = 0; k < kRowsNormMaxChunks; ++k) {
    const int c = threadIdx.x + k * kRowsNormThreads;
    if (c < chunks) {
      const Bf16x4 w = reinterpret_cast<const Bf16x4*>(weight)[c];
      const float2 wlo = __bfloat1622float2(w.lo), whi = __bfloat1622float2(w.hi);
      const float4 v = values[k];
      Bf16x4 o;
      o.lo = __floats2bfloat162_rn(v.x * inv * wlo.x, v.y * inv * wlo.y);
      o.hi = __floats2bfloat162_rn(v.z * inv * whi.x, v.w * inv * whi.y);
      reinterpret_cast<Bf16x4*>(out + row * d_model)[c] = o;
    }
  }
}

bool rows_norm_applies(int n, int d_model, const void* residual, const void* delta,
                       const void* weight, const void* out) {
  return n >= kRowsNormMinRows && d_model % 4 == 0 &&
         d_model <= kRowsNormThreads * 4 * kRowsNormMaxChunks && aligned_to(16, residual) &&
         aligned_to(8, delta, weight, out);
}

}  // namespace

void add_rmsnorm(float* residual, const __nv_bfloat16* delta, const __nv_bfloat16* weight, int n,
                 int d_model, float eps, __nv_bfloat16* out, cudaStream_t stream) {
  if (n == 0) return;
  if (d_model > kNormThreads * kNormMaxPerThread)
    throw std::invalid_argument("add_rmsnorm: d_model " + std::to_string(d_model) + " exceeds " +
                                std::to_string(kNormThreads * kNormMaxPerThread));
  if (rows_norm_applies(n, d_model, residual, delta, weight, out))
    launch_overlapped(add_rmsnorm_rows_kernel, n, kRowsNormThreads, 0, stream,
                      "add_rmsnorm_rows_kernel", residual, delta, weight, d_model, eps, out);
  else
    launch_overlapped(add_rmsnorm_kernel, n, kNormThreads, 0, stream, "add_rmsnorm_kernel",
                      residual, delta, weight, d_model, eps, out);
}

}  // namespace kvb::cuda
