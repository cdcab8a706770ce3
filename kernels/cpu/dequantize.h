// Dequantisation of ggml tensor encodings to f32: the types of kernels/cpu/block_formats.h (F32,
// F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K).
// Block layouts: docs/engine.md §1 (ggml-common.h / ggml-quants.c). Types are the ggml type
// codes (the values of kvb::GgmlType); kernels are leaves, so they take the raw code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvb {

// Elements per block and bytes per block of a supported type; false for any other type.
bool dequantize_block_geometry(uint32_t ggml_type, int64_t* block_elements, int64_t* block_bytes);
bool dequantize_supported(uint32_t ggml_type);

// Decodes `n` elements (a multiple of the type's block size) from `src` into `dst`. The caller has
// checked that `src` holds n / block_elements * block_bytes bytes. Throws std::invalid_argument for
// an unsupported type or a partial block. Large inputs are split across threads (oneTBB).
void dequantize(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n);

// Decodes `n` elements on the calling thread only (for callers already inside a parallel task).
void dequantize_serial(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n);

// The 6-bit scale and min of sub-block j (0-7) of a Q4_K / Q5_K block, packed in its 12 bytes.
void k_quant_scale_min(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min);

// Scalar conversions (IEEE binary16 with subnormals, inf and NaN; bfloat16 = upper half of f32).
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);  // round to nearest even; used by tests and writers
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);  // round to nearest even
// bf16_to_f32(f32_to_bf16(x)): the value a bf16 tensor would hold (nearest, ties to even).
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
// x[i] = round_to_bf16(x[i]) for i < n: the values a bf16 buffer would hold.
void round_to_bf16(float* x, int64_t n);

}  // namespace kvb
