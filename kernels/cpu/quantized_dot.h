// The per-format row dot products behind kernels/cpu/quantized_matmul.h: one scalar and one AVX2
// function per ggml block format, computing the same integer sums (the float accumulation order
// differs). Block layouts: docs/engine.md §1 and kernels/cpu/block_formats.cc, whose table names
// each type's pair.
#pragma once

#include <cstdint>

namespace kvb::kernels::row_dot {

// Quantised activations of one whole row: per block a scale, per sum group the sum of the values.
struct Activations {
  const float* scales;
  const int32_t* sums;
  const int8_t* values;
};

// A dot product of one stored row of `blocks` blocks (32 or 256 elements each) with activations.
using QuantizedRowDot = float (*)(const uint8_t* row, const Activations& x, int64_t blocks);
// A dot product of one f16/bf16/f32 row of n elements with f32 activations.
using FloatRowDot = float (*)(const uint8_t* row, const float* x, int64_t n);

float q4_0_scalar(const uint8_t* row, const Activations& x, int64_t blocks);
float q4_1_scalar(const uint8_t* row, const Activations& x, int64_t blocks);
float q5_0_scalar(const uint8_t* row, const Activations& x, int64_t blocks);
float q5_1_scalar(const uint8_t* row, const Activations& x, int64_t blocks);
float q8_0_scalar(const uint8_t* row, const Activations& x, int64_t blocks);
float q4_k_scalar(const uint8_t* row, const Activations& x, int64_t blocks);
float q5_k_scalar(const uint8_t* row, const Activations& x, int64_t blocks);
float q6_k_scalar(const uint8_t* row, const Activations& x, int64_t blocks);
float f32_scalar(const uint8_t* row, const float* x, int64_t n);
float f16_scalar(const uint8_t* row, const float* x, int64_t n);
float bf16_scalar(const uint8_t* row, const float* x, int64_t n);

// Call only when the CPU has AVX2, FMA and F16C (quantized_matmul.cc checks at run time).
float q4_0_avx2(const uint8_t* row, const Activations& x, int64_t blocks);
float q4_1_avx2(const uint8_t* row, const Activations& x, int64_t blocks);
float q5_0_avx2(const uint8_t* row, const Activations& x, int64_t blocks);
float q5_1_avx2(const uint8_t* row, const Activations& x, int64_t blocks);
float q8_0_avx2(const uint8_t* row, const Activations& x, int64_t blocks);
float q4_k_avx2(const uint8_t* row, const Activations& x, int64_t blocks);
float q5_k_avx2(const uint8_t* row, const Activations& x, int64_t blocks);
float q6_k_avx2(const uint8_t* row, const Activations& x, int64_t blocks);
float f32_avx2(const uint8_t* row, const float* x, int64_t n);
float f16_avx2(const uint8_t* row, const float* x, int64_t n);
float bf16_avx2(const uint8_t* row, const float* x, int64_t n);

}  // namespace kvb::kernels::row_dot
