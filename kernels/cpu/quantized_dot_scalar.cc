// Scalar row dot products of kernels/cpu/quantized_dot.h: the portable twins of the AVX2 ones.
// Each block's integer sum Σ q_w q_x is exact; the block's scales turn it into a float.
//   q4_0: Σ d_w d_x (q_w - 8) q_x      = d_w d_x (Σ q_w q_x - 8 Σ q_x)
//   q4_1: Σ (d_w q_w + m) d_x q_x      = d_w d_x Σ q_w q_x + m d_x Σ q_x
//   q5_0 / q5_1: the same with 5-bit q_w (offset 16 for q5_0)
//   q4_K / q5_K: Σ_j (d sc_j Σ q_w q_x - dmin m_j Σ q_x) over 32-element sub-blocks j, times d_x
//   q6_K: d d_x Σ_j sc_j (Σ q_w q_x - 32 Σ q_x) over 16-element sub-blocks j
#include <cstring>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantized_dot.h"

namespace kvb::kernels::row_dot {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float half(const uint8_t* p) { return fp16_to_f32(load_u16(p)); }

// Σ nibble(qs) q_x over one 32-element block of Q4_0/Q4_1 layout (low nibbles are elements 0-15).
int32_t nibble_dot(const uint8_t* qs, const int8_t* xq) {
  int32_t sum = 0;
  for (int j = 0; j < 16; ++j) sum += (qs[j] & 0xF) * xq[j] + (qs[j] >> 4) * xq[j + 16];
  return sum;
}

// The same with the fifth bit of element j in bit j of qh (Q5_0/Q5_1 layout).
int32_t five_bit_dot(const uint8_t* qh_bytes, const uint8_t* qs, const int8_t* xq) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  int32_t sum = 0;
  for (int j = 0; j < 16; ++j) {
    const int low = (qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
    const int high = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    sum += low * xq[j] + high * xq[j + 16];
  }
  return sum;
}

// Q4_K / Q5_K (qh null for Q4_K): d_x-free sum Σ_j (d sc_j Σ q_w q_x - dmin m_j Σ q_x).
float k_quant_4_or_5_block(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, const int8_t* xq,
                           const int32_t* group_sums) {
  const float d = half(b), dmin = half(b + 2);
  int32_t scaled = 0, mins = 0;
  for (int chunk = 0; chunk < 4; ++chunk) {
    uint8_t sc_low, m_low, sc_high, m_high;
    k_quant_scale_min(2 * chunk, b + 4, &sc_low, &m_low);
    k_quant_scale_min(2 * chunk + 1, b + 4, &sc_high, &m_high);
    int32_t low = 0, high = 0;
    for (int l = 0; l < 32; ++l) {
      const int bit_low = qh ? ((qh[l] >> (2 * chunk)) & 1) << 4 : 0;
      const int bit_high = qh ? ((qh[l] >> (2 * chunk + 1)) & 1) << 4 : 0;
      low += ((qs[l] & 0xF) | bit_low) * xq[64 * chunk + l];
      high += ((qs[l] >> 4) | bit_high) * xq[64 * chunk + 32 + l];
    }
    scaled += sc_low * low + sc_high * high;
    const int* g = group_sums + 4 * chunk;  // four 16-element groups per 64-element chunk
    mins += m_low * (g[0] + g[1]) + m_high * (g[2] + g[3]);
    qs += 32;
  }
  return d * static_cast<float>(scaled) - dmin * static_cast<float>(mins);
}

// Σ over the row's blocks of kBytes bytes of term(block, b), in block order.
template <int kBytes, class Term>
float sum_blocks(const uint8_t* row, int64_t blocks, Term term) {
  float sum = 0;
  for (int64_t b = 0; b < blocks; ++b) sum += term(row + b * kBytes, b);
  return sum;
}

// A block's term from its integer dot product q = Σ q_w q_x: d d_x q for the symmetric formats
// (Q4_0, Q5_0, Q8_0: d at the block's start), d_x (d q + m Σ q_x) for those with a minimum (Q4_1,
// Q5_1: d, then m).
float symmetric_term(const uint8_t* blk, const Activations& x, int64_t b, int32_t q) {
  return half(blk) * x.scales[b] * static_cast<float>(q);
}
float offset_term(const uint8_t* blk, const Activations& x, int64_t b, int32_t q) {
  return x.scales[b] *
         (half(blk) * static_cast<float>(q) + half(blk + 2) * static_cast<float>(x.sums[b]));
}

}  // namespace

float q4_0_scalar(const uint8_t* row, const Activations& x, int64_t blocks) {
  return sum_blocks<18>(row, blocks, [&](const uint8_t* blk, int64_t b) {
    return symmetric_term(blk, x, b, nibble_dot(blk + 2, x.values + b * 32) - 8 * x.sums[b]);
  });
}

float q4_1_scalar(const uint8_t* row, const Activations& x, int64_t blocks) {
  return sum_blocks<20>(row, blocks, [&](const uint8_t* blk, int64_t b) {
    return offset_term(blk, x, b, nibble_dot(blk + 4, x.values + b * 32));
  });
}

float q5_0_scalar(const uint8_t* row, const Activations& x, int64_t blocks) {
  return sum_blocks<22>(row, blocks, [&](const uint8_t* blk, int64_t b) {
    return symmetric_term(blk, x, b,
                          five_bit_dot(blk + 2, blk + 6, x.values + b * 32) - 16 * x.sums[b]);
  });
}

float q5_1_scalar(const uint8_t* row, const Activations& x, int64_t blocks) {
  return sum_blocks<24>(row, blocks, [&](const uint8_t* blk, int64_t b) {
    return offset_term(blk, x, b, five_bit_dot(blk + 4, blk + 8, x.values + b * 32));
  });
}

float q8_0_scalar(const uint8_t* row, const Activations& x, int64_t blocks) {
  return sum_blocks<34>(row, blocks, [&](const uint8_t* blk, int64_t b) {
    const auto* qs = reinterpret_cast<const int8_t*>(blk + 2);
    int32_t q = 0;
    for (int j = 0; j < 32; ++j) q += qs[j] * x.values[b * 32 + j];
    return symmetric_term(blk, x, b, q);
  });
}

float q4_k_scalar(const uint8_t* row, const Activations& x, int64_t blocks) {
  return sum_blocks<144>(row, blocks, [&](const uint8_t* blk, int64_t b) {
    return x.scales[b] *
           k_quant_4_or_5_block(blk, nullptr, blk + 16, x.values + b * 256, x.sums + b * 16);
  });
}

float q5_k_scalar(const uint8_t* row, const Activations& x, int64_t blocks) {
  return sum_blocks<176>(row, blocks, [&](const uint8_t* blk, int64_t b) {
    return x.scales[b] *
           k_quant_4_or_5_block(blk, blk + 16, blk + 48, x.values + b * 256, x.sums + b * 16);
  });
}

float q6_k_scalar(const uint8_t* row, const Activations& x, int64_t blocks) {
  float sum = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* ql = row + b * 210;
    const uint8_t* qh = ql + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(ql + 192);
    const int8_t* xq = x.values + b * 256;
    // Output o = 128 h + 32 k + l takes sub-block scale sc[o / 16]; q from ql's nibble and qh's
    // 2-bit field k.
    int32_t group[16] = {};
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t low0 = ql[64 * h + l], low1 = ql[64 * h + 32 + l], high = qh[32 * h + l];
        const int q[4] = {(low0 & 0xF) | ((high & 3) << 4), (low1 & 0xF) | (((high >> 2) & 3) << 4),
                          (low0 >> 4) | (((high >> 4) & 3) << 4), (low1 >> 4) | ((high >> 6) << 4)};
        for (int k = 0; k < 4; ++k) {
          const int o = 128 * h + 32 * k + l;
          group[o / 16] += q[k] * xq[o];
        }
      }
    int32_t total = 0;
    for (int g = 0; g < 16; ++g) total += sc[g] * (group[g] - 32 * x.sums[b * 16 + g]);
    sum += half(ql + 208) * x.scales[b] * static_cast<float>(total);
  }
  return sum;
}

float f32_scalar(const uint8_t* row, const float* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    float w;
    std::memcpy(&w, row + 4 * i, 4);
    sum += w * x[i];
  }
  return sum;
}

float f16_scalar(const uint8_t* row, const float* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += half(row + 2 * i) * x[i];
  return sum;
}

float bf16_scalar(const uint8_t* row, const float* x, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_f32(load_u16(row + 2 * i)) * x[i];
  return sum;
}

}  // namespace kvb::kernels::row_dot
