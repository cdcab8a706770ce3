// Dequantisation through the block decoders of kernels/cpu/block_formats.cc (one table of types).
#include "kernels/cpu/dequantize.h"

#include <tbb/parallel_for.h>

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/block_formats.h"

namespace kvb {

using kernels::block_format;
using kernels::BlockFormat;

void k_quant_scale_min(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

bool dequantize_block_geometry(uint32_t ggml_type, int64_t* block_elements, int64_t* block_bytes) {
  const BlockFormat* format = block_format(ggml_type);
  if (format == nullptr) return false;
  *block_elements = format->block_elements;
  *block_bytes = format->block_bytes;
  return true;
}

bool dequantize_supported(uint32_t ggml_type) { return block_format(ggml_type) != nullptr; }

namespace {

// The format of `ggml_type` after checking that `n` is a whole number of its blocks.
const BlockFormat& checked_format(uint32_t ggml_type, int64_t n) {
  const BlockFormat* c = block_format(ggml_type);
  if (c == nullptr)
    throw std::invalid_argument("dequantize: unsupported ggml type " + std::to_string(ggml_type));
  if (n < 0 || n % c->block_elements != 0)
    throw std::invalid_argument("dequantize: " + std::to_string(n) +
                                " elements is not a whole number of blocks");
  return *c;
}

// Does what needs no block decoding and says whether that was all: an empty tensor (it may come
// with null buffers, and memcpy with a null pointer is undefined even for 0 bytes), or an f32 one,
// copied as it is.
bool decoded_without_blocks(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n) {
  if (n == 0) return true;
  if (ggml_type != 0) return false;
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  return true;
}

void decode_blocks(const BlockFormat& c, const uint8_t* src, float* dst, int64_t first,
                   int64_t last) {
  for (int64_t i = first; i < last; ++i)
    c.decode(src + i * c.block_bytes, dst + i * c.block_elements);
}

}  // namespace

void dequantize(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n) {
  const BlockFormat& c = checked_format(ggml_type, n);
  if (decoded_without_blocks(ggml_type, src, dst, n)) return;
  // ~64K elements per task keeps the task overhead negligible and small tensors single-threaded.
  const int64_t grain = std::max<int64_t>(1, 65536 / c.block_elements);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n / c.block_elements, grain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      decode_blocks(c, src, dst, r.begin(), r.end());
                    });
}

void dequantize_serial(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n) {
  const BlockFormat& c = checked_format(ggml_type, n);
  if (decoded_without_blocks(ggml_type, src, dst, n)) return;
  decode_blocks(c, src, dst, 0, n / c.block_elements);
}

float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  uint32_t mantissa = h & 0x3FF;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // inf / NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: value = mantissa * 2^-24; normalise it.
    int shift = 0;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3FF;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) return sign | 0x7E00;   // NaN
  if (abs >= 0x477FF000) return sign | 0x7C00;  // overflow (rounds to >= 65520) -> inf
  if (abs < 0x33000001) return sign;            // below half the smallest subnormal -> 0
  const int exponent = static_cast<int>(abs >> 23);
  uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
  int shift;  // right shift that turns the 24-bit mantissa into the fp16 field
  uint32_t base;
  if (exponent < 113) {  // fp16 subnormal
    shift = 126 - exponent;
    base = 0;
  } else {
    shift = 13;
    base = static_cast<uint32_t>(exponent - 112) << 10;
    mantissa &= 0x7FFFFF;
  }
  uint32_t result = base + (mantissa >> shift);
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (result & 1)))
    ++result;  // carries into exponent
  return sign | static_cast<uint16_t>(result);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

// f32_to_bf16's two cases as a select instead of a branch, so that the loop vectorises (the bf16
// forward and the reference-cast pooling round whole rows); the same bits for every input.
void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[i]);
    const uint32_t rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
    const uint32_t quiet_nan = (bits | 0x400000u) & 0xFFFF0000u;
    x[i] = std::bit_cast<float>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
  }
}

}  // namespace kvb
