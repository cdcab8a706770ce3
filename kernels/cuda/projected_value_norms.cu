#include <algorithm>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/projected_value_norms.h"

namespace kvb::cuda {
namespace {

// One warp per projected row: norms[j] += scale · Σ_o |projected[j, o]|.
__global__ void add_row_l1_kernel(const float* projected, int rows, int hidden, float scale,
                                  float* norms) {
  const int warps_per_block = blockDim.x / 32;
  const int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* x = projected + int64_t(row) * hidden;
  float sum = 0.f;
  for (int o = lane; o < hidden; o += 32) sum += fabsf(x[o]);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) norms[row] += sum * scale;
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed (cuBLAS status " +
                             std::to_string(int(status)) + ")");
}

}  // namespace

void projected_value_norms(cublasHandle_t handle, const ProjectedValueNormsArgs& a,
                           cudaStream_t stream) {
  if (a.length <= 0 || a.n_kv_heads <= 0) return;
  const int g = a.n_query_heads / a.n_kv_heads, inputs = a.n_query_heads * a.dim;
  check(cudaMemsetAsync(a.norms, 0, size_t(a.n_kv_heads) * a.length * 4, stream), "memset");
  check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
  const float one = 1.f, zero = 0.f;
  constexpr int kThreads = 256;
  for (int h = 0; h < a.n_kv_heads; ++h) {
    for (int first = 0; first < a.length; first += kProjectedRows) {
      const int rows = std::min(kProjectedRows, a.length - first);
      const __nv_bfloat16* v = a.values + h * a.head_stride + int64_t(first) * a.dim;
      for (int q = h * g; q < (h + 1) * g; ++q) {
        // Column-major: projected^T [hidden, rows] = (W_o^q)^T^T · v^T, where W_o's columns of
        // head q are a [dim, hidden] column-major matrix with leading dimension `inputs`.
        check_cublas(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, a.hidden, rows, a.dim, &one,
                                  a.output_projection + int64_t(q) * a.dim, CUDA_R_16BF, inputs, v,
                                  CUDA_R_16BF, a.dim, &zero, a.workspace, CUDA_R_32F, a.hidden,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "projected_value_norms GEMM");
        add_row_l1_kernel<<<(rows + kThreads / 32 - 1) / (kThreads / 32), kThreads, 0, stream>>>(
            a.workspace, rows, a.hidden, 1.f / float(g), a.norms + int64_t(h) * a.length + first);
        check(cudaGetLastError(), "add_row_l1_kernel");
      }
    }
  }
}

}  // namespace kvb::cuda
