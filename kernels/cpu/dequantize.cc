// Dequantisation written from the block layouts of docs/engine.md §1. Every block decoder
// reads exactly one block and writes exactly block_elements floats.
#include "kernels/cpu/dequantize.h"

#include <tbb/parallel_for.h>

#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kvb {
namespace {

constexpr int kQK = 32;     // elements of a Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 block
constexpr int kQK_K = 256;  // elements of a K-quant super-block

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q4_0: half d; uint8 qs[16]. Low nibbles are elements 0-15, high nibbles 16-31.
void block_q4_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: half d; half m; uint8 qs[16]. y = q*d + m.
void block_q4_1(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const float m = fp16_to_f32(load_u16(b + 2));
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The 5-bit quants of a Q5_0 / Q5_1 block: qs as in Q4_0 (low nibbles elements 0-15, high nibbles
// 16-31) and bit j of the little-endian uint32 qh the fifth bit of element j.
void five_bit_quants(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  const uint32_t qh = load_u32(qh_bytes);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    q[j + kQK / 2] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + kQK / 2)) & 1) << 4);
  }
}

// Q5_0: half d; uint8 qh[4]; uint8 qs[16]. y = (q - 16) * d.
void block_q5_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  int q[kQK];
  five_bit_quants(b + 2, b + 6, q);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
}

// Q5_1: half d; half m; uint8 qh[4]; uint8 qs[16]. y = q*d + m.
void block_q5_1(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const float m = fp16_to_f32(load_u16(b + 2));
  int q[kQK];
  five_bit_quants(b + 4, b + 8, q);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q[j]) * d + m;
}

// Q8_0: half d; int8 qs[32].
void block_q8_0(const uint8_t* b, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// Q4_K: half d; half dmin; uint8 scales[12]; uint8 qs[128]. Each 64-element chunk uses 32 bytes of
// qs: low nibbles for its first 32 outputs (sub-block 2c), high nibbles for the next 32 (2c + 1).
// Q5_K: half d; half dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]: the same plus a fifth bit
// per element, bit 2c of qh[l] for chunk c's low-nibble outputs and bit 2c + 1 for its high ones.
// `qh` is null for Q4_K.
void k_quant_4_or_5_bits(const uint8_t* b, const uint8_t* qh, const uint8_t* q, float* y) {
  const float d = fp16_to_f32(load_u16(b));
  const float dmin = fp16_to_f32(load_u16(b + 2));
  const uint8_t* scales = b + 4;
  for (int chunk = 0; chunk < kQK_K / 64; ++chunk) {
    uint8_t sc, m;
    k_quant_scale_min(2 * chunk, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    k_quant_scale_min(2 * chunk + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      const int high1 = qh ? ((qh[l] >> (2 * chunk)) & 1) << 4 : 0;
      const int high2 = qh ? ((qh[l] >> (2 * chunk + 1)) & 1) << 4 : 0;
      y[l] = d1 * static_cast<float>((q[l] & 0xF) | high1) - m1;
      y[32 + l] = d2 * static_cast<float>((q[l] >> 4) | high2) - m2;
    }
    q += 32;
    y += 64;
  }
}

void block_q4_k(const uint8_t* b, float* y) { k_quant_4_or_5_bits(b, nullptr, b + 16, y); }
void block_q5_k(const uint8_t* b, float* y) { k_quant_4_or_5_bits(b, b + 16, b + 48, y); }

// Q6_K: uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d (last). Two halves of 128 outputs.
void block_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = fp16_to_f32(load_u16(b + 208));
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is + 0] * static_cast<float>(q1);
      y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
      y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
      y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void block_f32(const uint8_t* b, float* y) { std::memcpy(y, b, 4); }
void block_f16(const uint8_t* b, float* y) { *y = fp16_to_f32(load_u16(b)); }
void block_bf16(const uint8_t* b, float* y) { *y = bf16_to_f32(load_u16(b)); }

struct Codec {
  int64_t block_elements;
  int64_t block_bytes;
  void (*decode)(const uint8_t*, float*);
};

const Codec* codec(uint32_t type) {
  static const Codec kF32{1, 4, block_f32}, kF16{1, 2, block_f16}, kBF16{1, 2, block_bf16},
      kQ4_0{32, 18, block_q4_0}, kQ4_1{32, 20, block_q4_1}, kQ5_0{32, 22, block_q5_0},
      kQ5_1{32, 24, block_q5_1}, kQ8_0{32, 34, block_q8_0}, kQ4_K{256, 144, block_q4_k},
      kQ5_K{256, 176, block_q5_k}, kQ6_K{256, 210, block_q6_k};
  switch (type) {
    case 0:
      return &kF32;
    case 1:
      return &kF16;
    case 2:
      return &kQ4_0;
    case 3:
      return &kQ4_1;
    case 6:
      return &kQ5_0;
    case 7:
      return &kQ5_1;
    case 8:
      return &kQ8_0;
    case 12:
      return &kQ4_K;
    case 13:
      return &kQ5_K;
    case 14:
      return &kQ6_K;
    case 30:
      return &kBF16;
    default:
      return nullptr;
  }
}

}  // namespace

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
  const Codec* c = codec(ggml_type);
  if (c == nullptr) return false;
  *block_elements = c->block_elements;
  *block_bytes = c->block_bytes;
  return true;
}

bool dequantize_supported(uint32_t ggml_type) { return codec(ggml_type) != nullptr; }

namespace {

// The codec of `ggml_type` after checking that `n` is a whole number of its blocks.
const Codec& checked_codec(uint32_t ggml_type, int64_t n) {
  const Codec* c = codec(ggml_type);
  if (c == nullptr)
    throw std::invalid_argument("dequantize: unsupported ggml type " + std::to_string(ggml_type));
  if (n < 0 || n % c->block_elements != 0)
    throw std::invalid_argument("dequantize: " + std::to_string(n) +
                                " elements is not a whole number of blocks");
  return *c;
}

void decode_blocks(const Codec& c, const uint8_t* src, float* dst, int64_t first, int64_t last) {
  for (int64_t i = first; i < last; ++i)
    c.decode(src + i * c.block_bytes, dst + i * c.block_elements);
}

}  // namespace

void dequantize(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n) {
  const Codec& c = checked_codec(ggml_type, n);
  // An empty tensor may come with null buffers; memcpy with a null pointer is undefined even for 0
  // bytes.
  if (n == 0) return;
  if (ggml_type == 0) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
  // ~64K elements per task keeps the task overhead negligible and small tensors single-threaded.
  const int64_t grain = std::max<int64_t>(1, 65536 / c.block_elements);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n / c.block_elements, grain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      decode_blocks(c, src, dst, r.begin(), r.end());
                    });
}

void dequantize_serial(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n) {
  const Codec& c = checked_codec(ggml_type, n);
  if (n == 0) return;
  if (ggml_type == 0) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    return;
  }
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

}  // namespace kvb
