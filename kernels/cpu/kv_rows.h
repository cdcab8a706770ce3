// Key and value rows of a KV cache held in f32, f16 or bf16 (ggml type codes 0, 1 and 30, as the
// other kernels take them; kernels are leaves): f32 rows encoded into the cache's type (round to
// nearest even, as kernels/cpu/dequantize.h's scalar conversions), decoded back, and the two row
// operations decode attention needs, q·k and y += p·v. Each has an AVX2/F16C path, taken when the
// CPU has it (kernels/cpu/cpu_features.h), and a scalar twin; the paths agree exactly on encoding
// and decoding and to float rounding on the row operations (tests/kernels/kv_rows_test.cc).
//
// f32 rows go through the same arithmetic as before 16-bit caches existed (kernels/cpu/matmul.h's
// dot and a plain loop), so an f32 cache gives the engine's reference results bit for bit.
#pragma once

#include <cstdint>

#include "kernels/cpu/quantized_dot.h"
#include "kernels/cpu/quantized_matmul.h"

namespace kvb::kernels {

constexpr uint32_t kKvF32 = 0;
constexpr uint32_t kKvF16 = 1;
constexpr uint32_t kKvBf16 = 30;

bool kv_type_supported(uint32_t type);
int kv_element_bytes(uint32_t type);  // 4, 2 or 2; invalid_argument for another type

// dst[0, n) in `type` from src; `dst` holds n * kv_element_bytes(type) bytes.
void encode_kv_rows(uint32_t type, const float* src, void* dst, int64_t n,
                    DotPath path = best_dot_path());
// dst[0, n) as f32 from `src` in `type`.
void decode_kv_rows(uint32_t type, const void* src, float* dst, int64_t n,
                    DotPath path = best_dot_path());
// dst = decode(encode(src)): the values an f32 copy of a `type` cache holds. dst may be src.
void round_kv_rows(uint32_t type, const float* src, float* dst, int64_t n,
                   DotPath path = best_dot_path());

// The row operations of one type, resolved once per call site (no per-row dispatch).
struct KvRowOps {
  row_dot::FloatRowDot dot = nullptr;                                        // Σ row[i]·x[i]
  void (*axpy)(float a, const uint8_t* row, float* y, int64_t n) = nullptr;  // y += a·row
};
KvRowOps kv_row_ops(uint32_t type, DotPath path = best_dot_path());

}  // namespace kvb::kernels
