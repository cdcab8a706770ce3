// The ggml block formats of kernels/cpu/block_formats.h: each one's decoder, written from the block
// layouts of docs/engine.md §1, and the table that names everything the kernels do with a type.
#include "kernels/cpu/block_formats.h"

#include <array>
#include <cstring>

#include "kernels/cpu/dequantize.h"

namespace kvb::kernels {
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

// A type whose rows are dotted with activations quantised in blocks of its own size, and one whose
// rows take f32 activations.
constexpr BlockFormat quantized(uint32_t type, int64_t elements, int64_t bytes,
                                void (*decode)(const uint8_t*, float*),
                                row_dot::QuantizedRowDot scalar, row_dot::QuantizedRowDot avx2) {
  return {.type = type,
          .block_elements = elements,
          .block_bytes = bytes,
          .decode = decode,
          .activation_block = static_cast<int>(elements),
          .scalar = scalar,
          .avx2 = avx2};
}
constexpr BlockFormat floating(uint32_t type, int64_t bytes, void (*decode)(const uint8_t*, float*),
                               row_dot::FloatRowDot scalar, row_dot::FloatRowDot avx2) {
  return {.type = type,
          .block_elements = 1,
          .block_bytes = bytes,
          .decode = decode,
          .float_scalar = scalar,
          .float_avx2 = avx2};
}

// The table: one row per type (ggml code, elements and bytes per block, decoder, row dots).
namespace dot = row_dot;
constexpr BlockFormat kFormats[] = {
    floating(0, 4, block_f32, dot::f32_scalar, dot::f32_avx2),
    floating(1, 2, block_f16, dot::f16_scalar, dot::f16_avx2),
    quantized(2, 32, 18, block_q4_0, dot::q4_0_scalar, dot::q4_0_avx2),
    quantized(3, 32, 20, block_q4_1, dot::q4_1_scalar, dot::q4_1_avx2),
    quantized(6, 32, 22, block_q5_0, dot::q5_0_scalar, dot::q5_0_avx2),
    quantized(7, 32, 24, block_q5_1, dot::q5_1_scalar, dot::q5_1_avx2),
    quantized(8, 32, 34, block_q8_0, dot::q8_0_scalar, dot::q8_0_avx2),
    quantized(12, 256, 144, block_q4_k, dot::q4_k_scalar, dot::q4_k_avx2),
    quantized(13, 256, 176, block_q5_k, dot::q5_k_scalar, dot::q5_k_avx2),
    quantized(14, 256, 210, block_q6_k, dot::q6_k_scalar, dot::q6_k_avx2),
    floating(30, 2, block_bf16, dot::bf16_scalar, dot::bf16_avx2),
};

}  // namespace

const BlockFormat* block_format(uint32_t type) {
  // Indexed by code: the stored-weight matvec asks once per row.
  static const std::array<const BlockFormat*, 64> by_type = [] {
    std::array<const BlockFormat*, 64> formats{};
    for (const BlockFormat& format : kFormats) formats[format.type] = &format;
    return formats;
  }();
  return type < by_type.size() ? by_type[type] : nullptr;
}

}  // namespace kvb::kernels
