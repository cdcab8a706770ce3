// The CPU twins of the forward pass's data ops of kernels/cuda/transformer_ops.h that the CPU
// engine runs too: the greedy pick of the next token. (The f32 <-> bf16 conversions' twins are the
// scalar f32_to_bf16 / bf16_to_f32 of kernels/cpu/dequantize.h.) Test: tests/kernels and, against
// the device, tests/cuda/backend_ops_test.cc.
#pragma once

#include <cstdint>

namespace kvb::kernels {

// next[r] = argmax_j logits[r * vocab + j], the lowest index on ties (0 for a row of -inf).
void argmax_rows(const float* logits, int rows, int vocab, int32_t* next);

}  // namespace kvb::kernels
