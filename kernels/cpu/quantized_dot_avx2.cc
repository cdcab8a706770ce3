// AVX2 row dot products of kernels/cpu/quantized_dot.h. Weight quants are unsigned bytes (the
// format's offset is taken out through the activation sums, as in the scalar twins) and the
// activations signed: _mm256_maddubs_epi16 multiplies and adds pairs into int16 (never saturating
// here: at most 2 · 63 · 127), _mm256_madd_epi16 widens to int32 (times a sub-block scale where the
// format has one). Compiled for AVX2/FMA/F16C by function attribute, so the rest of the build keeps
// its baseline; quantized_matmul.cc calls these only after checking the CPU at run time.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quantized_dot.h"

#define KVB_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kvb::kernels::row_dot {
namespace {

KVB_AVX2 inline float half(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

KVB_AVX2 inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

KVB_AVX2 inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Eight int32 sums of adjacent products u[i] * s[i] (u unsigned, s signed bytes), each pair-sum
// multiplied by `scale` (16-bit lanes).
KVB_AVX2 inline __m256i scaled_dot(__m256i u, __m256i s, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}

KVB_AVX2 inline __m256i ones16() { return _mm256_set1_epi16(1); }

// The 32 nibbles of a Q4_0/Q4_1/Q5_x block's 16 bytes in element order (low nibbles first).
KVB_AVX2 inline __m256i nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Byte j = 16 where bit j of the little-endian uint32 at `qh_bytes` is set, else 0.
KVB_AVX2 inline __m256i fifth_bits(const uint8_t* qh_bytes) {
  int32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i byte_of_bit =
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(qh), byte_of_bit);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The 32-element formats: block_dot(weights as unsigned bytes, activations) scaled by d_w d_x,
// plus offset_scale(blk) * d_x * Σ q_x (the format's minimum, or minus its offset times d_w).
template <int kBlockBytes, typename Quants, typename Offset>
KVB_AVX2 inline float dot_32(const uint8_t* row, const Activations& x, int64_t blocks,
                             Quants quants, Offset offset) {
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * kBlockBytes;
    const __m256i q = scaled_dot(quants(blk), load32(x.values + b * 32), ones16());
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(half(blk) * x.scales[b]), acc);
    offsets += offset(blk) * x.scales[b] * static_cast<float>(x.sums[b]);
  }
  return horizontal_sum(acc) + offsets;
}

}  // namespace

KVB_AVX2 float q4_0_avx2(const uint8_t* row, const Activations& x, int64_t blocks) {
  return dot_32<18>(
      row, x, blocks, [](const uint8_t* blk) KVB_AVX2 { return nibbles(blk + 2); },
      [](const uint8_t* blk) KVB_AVX2 { return -8 * half(blk); });
}

KVB_AVX2 float q4_1_avx2(const uint8_t* row, const Activations& x, int64_t blocks) {
  return dot_32<20>(
      row, x, blocks, [](const uint8_t* blk) KVB_AVX2 { return nibbles(blk + 4); },
      [](const uint8_t* blk) KVB_AVX2 { return half(blk + 2); });
}

KVB_AVX2 float q5_0_avx2(const uint8_t* row, const Activations& x, int64_t blocks) {
  return dot_32<22>(
      row, x, blocks,
      [](const uint8_t* blk)
          KVB_AVX2 { return _mm256_or_si256(nibbles(blk + 6), fifth_bits(blk + 2)); },
      [](const uint8_t* blk) KVB_AVX2 { return -16 * half(blk); });
}

KVB_AVX2 float q5_1_avx2(const uint8_t* row, const Activations& x, int64_t blocks) {
  return dot_32<24>(
      row, x, blocks,
      [](const uint8_t* blk)
          KVB_AVX2 { return _mm256_or_si256(nibbles(blk + 8), fifth_bits(blk + 4)); },
      [](const uint8_t* blk) KVB_AVX2 { return half(blk + 2); });
}

// Signed weights: |w| as the unsigned operand and the activation carrying w's sign.
KVB_AVX2 float q8_0_avx2(const uint8_t* row, const Activations& x, int64_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * 34;
    const __m256i w = load32(blk + 2);
    const __m256i q = scaled_dot(_mm256_sign_epi8(w, w),
                                 _mm256_sign_epi8(load32(x.values + b * 32), w), ones16());
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(half(blk) * x.scales[b]), acc);
  }
  return horizontal_sum(acc);
}

namespace {

// Q4_K (qh null) and Q5_K: 256 elements in four 64-element chunks of two scaled sub-blocks.
KVB_AVX2 inline float k_quant_4_or_5(const uint8_t* row, const Activations& x, int64_t blocks,
                                     int block_bytes, bool five_bits) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = row + b * block_bytes;
    const uint8_t* qs = blk + (five_bits ? 48 : 16);
    const __m256i qh = five_bits ? load32(blk + 16) : _mm256_setzero_si256();
    const int8_t* xq = x.values + b * 256;
    const int32_t* g = x.sums + b * 16;
    __m256i sum = _mm256_setzero_si256();
    int32_t min_sum = 0;
    for (int chunk = 0; chunk < 4; ++chunk) {
      uint8_t sc_low, m_low, sc_high, m_high;
      k_quant_scale_min(2 * chunk, blk + 4, &sc_low, &m_low);
      k_quant_scale_min(2 * chunk + 1, blk + 4, &sc_high, &m_high);
      const __m256i packed = load32(qs + 32 * chunk);
      __m256i low = _mm256_and_si256(packed, low_mask);
      __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
      if (five_bits) {
        const __m128i shift_low = _mm_cvtsi32_si128(2 * chunk);
        const __m128i shift_high = _mm_cvtsi32_si128(2 * chunk + 1);
        low = _mm256_or_si256(
            low, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, shift_low), one), 4));
        high = _mm256_or_si256(
            high, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, shift_high), one), 4));
      }
      sum = _mm256_add_epi32(sum,
                             scaled_dot(low, load32(xq + 64 * chunk), _mm256_set1_epi16(sc_low)));
      sum = _mm256_add_epi32(
          sum, scaled_dot(high, load32(xq + 64 * chunk + 32), _mm256_set1_epi16(sc_high)));
      min_sum += m_low * (g[4 * chunk] + g[4 * chunk + 1]) +
                 m_high * (g[4 * chunk + 2] + g[4 * chunk + 3]);
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(half(blk) * x.scales[b]), acc);
    mins += half(blk + 2) * x.scales[b] * static_cast<float>(min_sum);
  }
  return horizontal_sum(acc) - mins;
}

}  // namespace

KVB_AVX2 float q4_k_avx2(const uint8_t* row, const Activations& x, int64_t blocks) {
  return k_quant_4_or_5(row, x, blocks, 144, false);
}

KVB_AVX2 float q5_k_avx2(const uint8_t* row, const Activations& x, int64_t blocks) {
  return k_quant_4_or_5(row, x, blocks, 176, true);
}

// Q6_K: per half of 128 outputs, 32 bytes of low nibbles cover outputs l and l + 64, the next 32
// outputs l + 32 and l + 96, and qh's four 2-bit fields the high bits of k = 0..3. Each 32-output
// run spans two 16-element sub-blocks: their scales go to the low and high 128-bit lanes.
KVB_AVX2 float q6_k_avx2(const uint8_t* row, const Activations& x, int64_t blocks) {
  const __m256i low_mask = _mm256_set1_epi8(0x0F), two_bits = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* ql = row + b * 210;
    const uint8_t* qh = ql + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(ql + 192);
    const int8_t* xq = x.values + b * 256;
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i low0 = load32(ql + 64 * h), low1 = load32(ql + 64 * h + 32);
      const __m256i high = load32(qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(low0, low_mask),
                          _mm256_slli_epi16(_mm256_and_si256(high, two_bits), 4)),
          _mm256_or_si256(
              _mm256_and_si256(low1, low_mask),
              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2), two_bits), 4)),
          _mm256_or_si256(
              _mm256_and_si256(_mm256_srli_epi16(low0, 4), low_mask),
              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 4), two_bits), 4)),
          _mm256_or_si256(
              _mm256_and_si256(_mm256_srli_epi16(low1, 4), low_mask),
              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 6), two_bits), 4))};
      for (int k = 0; k < 4; ++k) {
        const int group = 8 * h + 2 * k;
        const __m256i scale =
            _mm256_set_m128i(_mm_set1_epi16(sc[group + 1]), _mm_set1_epi16(sc[group]));
        sum = _mm256_add_epi32(sum, scaled_dot(q[k], load32(xq + 128 * h + 32 * k), scale));
      }
    }
    int32_t offset = 0;
    for (int g = 0; g < 16; ++g) offset += sc[g] * x.sums[b * 16 + g];
    const float d = half(ql + 208) * x.scales[b];
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d), acc);
    offsets += 32 * d * static_cast<float>(offset);
  }
  return horizontal_sum(acc) - offsets;
}

namespace {

// Two accumulators of eight lanes over n floats from `load(i)`, the tail in scalar.
template <typename Load, typename Scalar>
KVB_AVX2 inline float float_dot(const float* x, int64_t n, Load load, Scalar scalar) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load(i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(load(i + 8), _mm256_loadu_ps(x + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load(i), _mm256_loadu_ps(x + i), acc0);
  float sum = horizontal_sum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += scalar(i) * x[i];
  return sum;
}

}  // namespace

KVB_AVX2 float f32_avx2(const uint8_t* row, const float* x, int64_t n) {
  const auto* w = reinterpret_cast<const float*>(row);
  return float_dot(
      x, n, [w](int64_t i) KVB_AVX2 { return _mm256_loadu_ps(w + i); },
      [w](int64_t i) { return w[i]; });
}

KVB_AVX2 float f16_avx2(const uint8_t* row, const float* x, int64_t n) {
  return float_dot(
      x, n,
      [row](int64_t i) KVB_AVX2 {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
      },
      [row](int64_t i) KVB_AVX2 { return half(row + 2 * i); });
}

KVB_AVX2 float bf16_avx2(const uint8_t* row, const float* x, int64_t n) {
  return float_dot(
      x, n,
      [row](int64_t i) KVB_AVX2 {
        const __m256i bits =
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
      },
      [row](int64_t i) {
        uint16_t v;
        std::memcpy(&v, row + 2 * i, 2);
        return bf16_to_f32(v);
      });
}

}  // namespace kvb::kernels::row_dot
