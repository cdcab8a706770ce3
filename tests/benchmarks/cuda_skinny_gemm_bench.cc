// The decode step's products at a sweep's batch sizes (5–16 rows: a sample's cells decoded
// together) — the engine's product (cuda::matmul: the GEMV up to four rows, cuBLAS's default
// algorithm beyond) against every algorithm cuBLASLt's heuristic offers for the same shape, each
// timed over enough copies of the weight that it streams from HBM (not L2), and set against its
// weight bytes at the read bandwidth measured in the same run. It answers whether a per-shape
// algorithm choice would close the gap results/gpu-kernel-tuning.md §10 measures. Run on the GPU
// machine: ./cuda_skinny_gemm_bench [rows...]   (default 5 10 16)
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/transformer_ops.h"
#include "tests/benchmarks/cuda_timing.h"

namespace kvb {
namespace {

using bf16 = __nv_bfloat16;

struct Shape {
  const char* name;
  int in_features, out_features;
};
// Llama-3.1-8B's products (qkv, o, gate/up, down, LM head).
constexpr Shape kShapes[] = {{"qkv", 4096, 6144},
                             {"o", 4096, 4096},
                             {"gate_up", 4096, 28672},
                             {"down", 14336, 4096},
                             {"lm head", 4096, 128256}};
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // the engine's cuBLAS workspace

void check_lt(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s failed: %d\n", what, int(status));
    std::exit(1);
  }
}

void run_shape(const Shape& shape, int rows, double bandwidth_gbs, cublasHandle_t cublas,
               cublasLtHandle_t lt, const cuda::DeviceBuffer& workspace, cudaStream_t stream) {
  const size_t weight_elems = size_t(shape.in_features) * shape.out_features;
  const int copies = std::max(2, int((size_t(768) << 20) / (weight_elems * 2)));  // ≫ L2
  std::vector<cuda::DeviceBuffer> weights;
  for (int c = 0; c < copies; ++c) {
    weights.emplace_back(weight_elems * 2, "weights");
    cuda::fill_random_bf16(weights.back().as<bf16>(), weight_elems, 7 + c, 0.02f, stream);
  }
  cuda::DeviceBuffer x(size_t(rows) * shape.in_features * 2, "x"),
      y(size_t(rows) * shape.out_features * 2, "y");
  cuda::fill_random_bf16(x.as<bf16>(), size_t(rows) * shape.in_features, 3, 1.f, stream);
  const double floor_us = weight_elems * 2.0 / (bandwidth_gbs * 1e3);
  const float one = 1.f, zero = 0.f;
  const double default_us = bench::graph_median_us(
      [&](int c, cudaStream_t s) {
        cuda::matmul(cublas, x.as<bf16>(), weights[c].as<bf16>(), y.as<bf16>(), rows,
                     shape.in_features, shape.out_features, s);
      },
      copies, stream);

  // The same product through cuBLASLt: Yᵀ[out, n] = Wᵀ'[out, in] · Xᵀ[in, n], column-major.
  cublasLtMatmulDesc_t desc;
  check_lt(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  const cublasOperation_t transpose = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                          sizeof(transpose)),
           "transpose A");
  check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)),
           "transpose B");
  cublasLtMatrixLayout_t a_layout, b_layout, c_layout;
  check_lt(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_16BF, shape.in_features, shape.out_features,
                                      shape.in_features),
           "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_16BF, shape.in_features, rows,
                                      shape.in_features),
           "layout B");
  check_lt(cublasLtMatrixLayoutCreate(&c_layout, CUDA_R_16BF, shape.out_features, rows,
                                      shape.out_features),
           "layout C");
  cublasLtMatmulPreference_t preference;
  check_lt(cublasLtMatmulPreferenceCreate(&preference), "preference");
  check_lt(
      cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &kWorkspaceBytes, sizeof(kWorkspaceBytes)),
      "workspace preference");
  constexpr int kWanted = 32;
  cublasLtMatmulHeuristicResult_t results[kWanted];
  int found = 0;
  check_lt(cublasLtMatmulAlgoGetHeuristic(lt, desc, a_layout, b_layout, c_layout, c_layout,
                                          preference, kWanted, results, &found),
           "heuristic");
  double best_us = 0, first_us = 0;
  int best = -1, first = -1;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const double us = bench::graph_median_us(
        [&](int c, cudaStream_t s) {
          check_lt(cublasLtMatmul(lt, desc, &one, weights[c].data(), a_layout, x.data(), b_layout,
                                  &zero, y.data(), c_layout, y.data(), c_layout, &results[i].algo,
                                  workspace.data(), kWorkspaceBytes, s),
                   "cublasLtMatmul");
        },
        copies, stream);
    if (first < 0) first = i, first_us = us;
    if (best < 0 || us < best_us) best = i, best_us = us;
  }
  if (best < 0) {
    std::printf("%-8s rows %2d  floor %7.2f us  default %7.2f (%.3f)  no cuBLASLt algorithm\n",
                shape.name, rows, floor_us, default_us, default_us / floor_us);
  } else {
    std::printf(
        "%-8s rows %2d  floor %7.2f us  default %7.2f (%.3f)  Lt first %7.2f (%.3f)  "
        "Lt best #%d of %d %7.2f (%.3f)  best/default %.3f\n",
        shape.name, rows, floor_us, default_us, default_us / floor_us, first_us,
        first_us / floor_us, best, found, best_us, best_us / floor_us, best_us / default_us);
  }
  cublasLtMatmulPreferenceDestroy(preference);
  cublasLtMatrixLayoutDestroy(a_layout);
  cublasLtMatrixLayoutDestroy(b_layout);
  cublasLtMatrixLayoutDestroy(c_layout);
  cublasLtMatmulDescDestroy(desc);
}

int run(const std::vector<int>& batches) {
  if (!cuda::device_available()) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  const double bandwidth_gbs = cuda::measure_read_bandwidth_gbs(size_t(4) << 30, 10);
  std::printf("measured read bandwidth %.0f GB/s; ratios are to the weight bytes at it\n",
              bandwidth_gbs);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cublasHandle_t cublas;
  cublasCreate(&cublas);
  cuda::DeviceBuffer workspace(kWorkspaceBytes, "cuBLAS workspace");
  cublasSetWorkspace(cublas, workspace.data(), kWorkspaceBytes);
  cublasSetStream(cublas, stream);
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  for (int rows : batches)
    for (const Shape& shape : kShapes)
      run_shape(shape, rows, bandwidth_gbs, cublas, lt, workspace, stream);
  cublasLtDestroy(lt);
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace kvb

int main(int argc, char** argv) {
  std::vector<int> batches;
  for (int i = 1; i < argc; ++i) {
    const int rows = std::atoi(argv[i]);
    if (rows < 1) {
      std::fprintf(stderr, "usage: %s [rows >= 1 ...]   (default 5 10 16)\n", argv[0]);
      return 2;
    }
    batches.push_back(rows);
  }
  if (batches.empty()) batches = {5, 10, 16};
  return kvb::run(batches);
}
