#include "kernels/cpu/kv_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/block_formats.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/matmul.h"

#define KVB_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kvb::kernels {
namespace {

void check_type(uint32_t type) {
  if (!kv_type_supported(type))
    throw std::invalid_argument("KV rows: ggml type " + std::to_string(type) +
                                " is not a cache type (0 f32, 1 f16, 30 bf16)");
}

bool use_avx2(DotPath path) { return path == DotPath::kAvx2 && cpu_has_avx2_fma_f16c(); }

uint16_t load_u16(const void* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + 2 * i, 2);
  return v;
}

float decode_one(uint32_t type, const void* row, int64_t i) {
  return type == kKvF16 ? fp16_to_f32(load_u16(row, i)) : bf16_to_f32(load_u16(row, i));
}

// Scalar twins.
void encode_scalar(uint32_t type, const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = type == kKvF16 ? f32_to_fp16(src[i]) : f32_to_bf16(src[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void decode_scalar(uint32_t type, const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = decode_one(type, src, i);
}

template <uint32_t kType>
void axpy_scalar(float a, const uint8_t* row, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * decode_one(kType, row, i);
}

// AVX2: eight lanes at a time, the scalar twin for the tail.
KVB_AVX2 inline __m256 load8(uint32_t type, const void* row, int64_t i) {
  const __m128i bits =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(row) + 2 * i));
  if (type == kKvF16) return _mm256_cvtph_ps(bits);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

// bf16 round to nearest even, NaN kept quiet: kernels/cpu/dequantize.cc's f32_to_bf16 per lane.
KVB_AVX2 inline __m128i bf16_of(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  const __m256i bits = _mm256_blendv_epi8(rounded, quiet, nan);
  // Pack the eight 32-bit lanes' low halves (all < 65536) into eight uint16.
  const __m128i low = _mm256_castsi256_si128(bits), high = _mm256_extracti128_si256(bits, 1);
  return _mm_packus_epi32(low, high);
}

KVB_AVX2 void encode_avx2(uint32_t type, const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m128i h = type == kKvF16 ? _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT) : bf16_of(v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  encode_scalar(type, src + i, out + 2 * i, n - i);
}

KVB_AVX2 void decode_avx2(uint32_t type, const void* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(type, src, i));
  decode_scalar(type, static_cast<const uint8_t*>(src) + 2 * i, dst + i, n - i);
}

template <uint32_t kType>
KVB_AVX2 void axpy_avx2(float a, const uint8_t* row, float* y, int64_t n) {
  const __m256 scale = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(scale, load8(kType, row, i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * decode_one(kType, row, i);
}

// f32 rows: the engine's reference arithmetic (kernels/cpu/matmul.h's dot, a plain loop).
float dot_f32(const uint8_t* row, const float* x, int64_t n) {
  return dot(x, reinterpret_cast<const float*>(row), n);
}
void axpy_f32(float a, const uint8_t* row, float* y, int64_t n) {
  const auto* v = reinterpret_cast<const float*>(row);
  for (int64_t i = 0; i < n; ++i) y[i] += a * v[i];
}

// Encoding and decoding alike: f32 rows are copied, 16-bit ones converted on the path asked for.
template <typename Src, typename Dst>
void convert_rows(uint32_t type, const Src* src, Dst* dst, int64_t n, DotPath path,
                  void (*avx2)(uint32_t, const Src*, Dst*, int64_t),
                  void (*scalar)(uint32_t, const Src*, Dst*, int64_t)) {
  check_type(type);
  if (type == kKvF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    (use_avx2(path) ? avx2 : scalar)(type, src, dst, n);
  }
}

}  // namespace

bool kv_type_supported(uint32_t type) {
  return type == kKvF32 || type == kKvF16 || type == kKvBf16;
}

int kv_element_bytes(uint32_t type) {
  check_type(type);
  return type == kKvF32 ? 4 : 2;
}

void encode_kv_rows(uint32_t type, const float* src, void* dst, int64_t n, DotPath path) {
  convert_rows(type, src, dst, n, path, encode_avx2, encode_scalar);
}

void decode_kv_rows(uint32_t type, const void* src, float* dst, int64_t n, DotPath path) {
  convert_rows(type, src, dst, n, path, decode_avx2, decode_scalar);
}

void round_kv_rows(uint32_t type, const float* src, float* dst, int64_t n, DotPath path) {
  check_type(type);
  if (type == kKvF32) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  constexpr int64_t kChunk = 256;  // through a small buffer, so that dst may alias src
  uint16_t encoded[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    encode_kv_rows(type, src + i, encoded, m, path);
    decode_kv_rows(type, encoded, dst + i, m, path);
  }
}

KvRowOps kv_row_ops(uint32_t type, DotPath path) {
  check_type(type);
  const bool avx2 = use_avx2(path);
  if (type == kKvF32) return {dot_f32, axpy_f32};
  // f16 and bf16 rows are dotted by the weight matvec's row dots of the same encodings.
  const BlockFormat& f = *block_format(type);
  const row_dot::FloatRowDot row_dot = avx2 ? f.float_avx2 : f.float_scalar;
  if (type == kKvF16) return {row_dot, avx2 ? axpy_avx2<kKvF16> : axpy_scalar<kKvF16>};
  return {row_dot, avx2 ? axpy_avx2<kKvBf16> : axpy_scalar<kKvBf16>};
}

}  // namespace kvb::kernels
