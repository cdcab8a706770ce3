// Matrix products on weights kept in their stored encoding (ggml's block formats, f16, bf16 or
// f32), with no dequantised copy of the matrix. Weights are row-major [rows, cols] (y = W x); every
// row is cols / block_elements whole blocks, so row r starts at r * row_bytes(type, cols).
//
// Decode (matvec): the activation vector is quantised once per call to 8-bit blocks with a float
// scale (32 elements per block for q4_0, q4_1, q5_0, q5_1 and q8_0; 256 per block, with the sums
// of every 16 values, for q4_K, q5_K and q6_K), and each row is an integer dot product over the
// blocks: AVX2 (maddubs/madd) where the CPU has it, else the scalar twin; both compute the same
// integer sums. f16/bf16/f32 rows take the activation in f32.
// Prefill (matmul): tiles of rows are dequantised to f32 on the fly and multiplied by sgemm.
// Tests: tests/kernels/quantized_matmul_test.cc. Benchmark:
// tests/benchmarks/quantized_matmul_bench.cc.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvb::kernels {

// A weight matrix as stored; `type` is a ggml type code (0 f32, 1 f16, 2 q4_0, 3 q4_1, 6 q5_0,
// 7 q5_1, 8 q8_0, 12 q4_K, 13 q5_K, 14 q6_K, 30 bf16).
struct WeightView {
  uint32_t type = 0;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Whether matvec/matmul take this type, and whether `cols` is a whole number of its blocks.
bool stored_matmul_supported(uint32_t type);
bool stored_matmul_supported(uint32_t type, int64_t cols);
// Bytes of one row of `cols` elements (cols a whole number of blocks).
int64_t stored_row_bytes(uint32_t type, int64_t cols);

// The activation side of an integer dot product: `values` quantised per block of `block`
// elements (32 or 256) with scale `scales[b]` (x ≈ scale * q, |q| <= 127), and the sums of the
// quantised values per `sum_group` elements (32 for 32-blocks, 16 for 256-blocks).
struct QuantizedActivations {
  int block = 32;
  int sum_group = 32;
  int64_t n = 0;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  std::vector<int8_t> values;
};

// The activation blocking a weight type's integer dot product reads (32 or 256); 0 for the types
// whose rows take f32 activations (f32, f16, bf16).
int activation_block_for(uint32_t type);
// Quantises x[0, n) (n a multiple of `block`) to blocks of `block` (32 or 256) elements.
void quantize_activations(const float* x, int64_t n, int block, QuantizedActivations& out);

enum class DotPath { kScalar, kAvx2 };
// The path matvec uses on this CPU (AVX2 when it has AVX2, FMA and F16C).
DotPath best_dot_path();
bool dot_path_available(DotPath path);

// Row `row` of `w` dotted with quantised activations (quantised types) through `path`.
float stored_row_dot(const WeightView& w, int64_t row, const QuantizedActivations& x, DotPath path);
// Row `row` of `w` (f32, f16 or bf16) dotted with f32 activations through `path`.
float stored_row_dot(const WeightView& w, int64_t row, const float* x, DotPath path);

// y[rows] = W · x (+ bias). Rows are split across TBB worker threads.
void matvec(const WeightView& w, const float* x, const float* bias, float* y);

// Several products of one input (Q, K and V; gate and up): y_i = W_i · x (+ bias_i), every W_i
// with x's length as its columns, all rows in one parallel loop (one synchronisation, and x
// quantised once per activation blocking).
struct MatvecTarget {
  WeightView w;
  const float* bias = nullptr;
  float* y = nullptr;
};
void matvec(std::span<const MatvecTarget> targets, const float* x);
// y[n, rows] = x[n, cols] · W^T (+ bias): f32 weights go straight to sgemm; others in dequantised
// tiles of rows, one tile per TBB task.
void matmul(const float* x, int64_t n, const WeightView& w, const float* bias, float* y);

}  // namespace kvb::kernels
