// The ggml tensor encodings the CPU kernels take, one row each in one table (block_formats.cc):
// the block geometry, the decoder of one block to f32 (behind kernels/cpu/dequantize.h) and the
// row dot products of the stored-weight matvec (behind kernels/cpu/quantized_matmul.h). Adding a
// type is its decoder and its row in block_formats.cc, and its scalar and AVX2 row dots
// (kernels/cpu/quantized_dot.h). Types are ggml type codes (the values of kvb::GgmlType);
// kernels are leaves, so they take the raw code. Block layouts: docs/engine.md §1.
#pragma once

#include <cstdint>

#include "kernels/cpu/quantized_dot.h"

namespace kvb::kernels {

struct BlockFormat {
  uint32_t type = 0;
  int64_t block_elements = 0;
  int64_t block_bytes = 0;
  // Reads exactly one block and writes exactly block_elements floats.
  void (*decode)(const uint8_t* block, float* out) = nullptr;
  // The blocking (32 or 256) of the activations the integer row dots read; 0 for the types whose
  // rows take f32 activations (f32, f16, bf16), through float_scalar / float_avx2.
  int activation_block = 0;
  row_dot::QuantizedRowDot scalar = nullptr, avx2 = nullptr;
  row_dot::FloatRowDot float_scalar = nullptr, float_avx2 = nullptr;
};

// The row of `type`; nullptr for a type the kernels do not take.
const BlockFormat* block_format(uint32_t type);

}  // namespace kvb::kernels
