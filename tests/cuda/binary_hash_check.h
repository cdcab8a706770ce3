// BinaryPC's kernels (kernels/cuda/binary_hash.h) against their CPU twins
// (kernels/cpu/binary_hash.h): the inputs, and the scores on both sides (the GPU's with the
// queries packed inside binary_score_keys, the CPU's from binary_pack_queries), shared by the
// backend-ops test (backend_ops_selection.h) and BinaryPC's own (binarypc_kernels_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/binary_hash.h"
#include "kernels/cuda/binary_hash.h"
#include "policies/binarypc_projection.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

using kernels::kBinaryHashBits;
using kernels::QuantizedQuery;

// Keys [slots, length, d] with a few exactly-zero keys (every product 0: sign(0) handling).
inline std::vector<float> test_keys(int slots, int length, int d, uint32_t seed) {
  std::vector<float> keys = random_bf16_values(size_t(slots) * length * d, seed, 2.0f);
  for (int s = 0; s < slots; ++s)
    for (int j : {0, length / 2})
      std::fill_n(keys.begin() + (int64_t(s) * length + j) * d, d, 0.0f);
  return keys;
}

// A projection per slot fitted to the slot's keys with Algorithm 1 (realistic residual decay).
inline std::vector<float> fitted_projections(const std::vector<float>& keys, int slots, int length,
                                             int d) {
  std::vector<float> projection(size_t(slots) * kBinaryHashBits * d);
  for (int s = 0; s < slots; ++s) {
    BinaryProjectionFit fit;
    fit.seed = 17 + s;
    fit_binary_projection(keys.data() + int64_t(s) * length * d, length, d, fit,
                          projection.data() + int64_t(s) * kBinaryHashBits * d);
  }
  return projection;
}

// The CPU reference's quantised queries of every (sequence, query head).
inline std::vector<QuantizedQuery> cpu_quantized(const std::vector<float>& projection,
                                                 const std::vector<float>& q, int batch, int hq,
                                                 int hkv, int d) {
  const int group = hq / hkv;
  std::vector<QuantizedQuery> out(size_t(batch) * hq);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < hkv; ++h) {
      const int slot = b * hkv + h;
      kernels::binary_pack_queries(projection.data() + int64_t(slot) * kBinaryHashBits * d, d,
                                   q.data() + (int64_t(b) * hq + h * group) * d, group,
                                   out.data() + b * hq + h * group);
    }
  return out;
}

// One binary_score_keys call on the host side: projections [B * Hkv, 64, d], queries [B, Hq, d]
// and codes [B * Hkv, length]; tokens below `sinks` and `forced` (slot, token) pairs are forced.
// The gaps lengthen the device rows past what a slot or sequence holds: each slot's codes, mask
// words and keys, and each sequence's query row (past the two heads of the engine's QKV rows), so
// that rows start at every alignment the kernel must handle.
struct ScoreInputs {
  int batch = 1, hq = 1, hkv = 1, d = 64, length = 0;
  std::vector<float> projection{}, q{};
  std::vector<uint64_t> codes{};
  int sinks = 0;
  std::vector<std::pair<int, int>> forced{};
  int code_gap = 0, mask_gap = 0, key_gap = 0, q_gap = 0;
  int64_t key_stride() const { return length + key_gap; }
};

// What the gaps of the device rows hold: codes and mask words that would change scores or force
// keys if read as the slot's, and keys that no score or forced value equals (scores + 32768 lie
// in [24640, 40896]), so a key left unwritten or written past its slot's length shows.
inline constexpr uint64_t kGapCode = 0x5555555555555555ull;
inline constexpr uint32_t kGapMaskWord = 0xFFFFFFFFu;
inline constexpr uint16_t kUnwrittenKey = 0x5A5A;

// binary_score_keys's 16-bit keys [B * Hkv, length + key_gap], written over kUnwrittenKey. The
// queries sit in rows at least two heads longer than Hq * d (as in the engine's QKV rows), the gap
// holding values that would change every score if they were read; the forced pairs reach the
// kernel as a mask from binary_mark_tokens.
inline std::vector<uint16_t> gpu_score_keys(const ScoreInputs& in) {
  const int slots = in.batch * in.hkv, words = (in.length + 31) / 32;
  const int64_t q_seq_stride = int64_t(in.hq + 2) * in.d + in.q_gap;
  const int64_t code_stride = in.length + in.code_gap, mask_stride = words + in.mask_gap;
  std::vector<float> q_rows(size_t(in.batch) * q_seq_stride, 1024.0f);
  for (int b = 0; b < in.batch; ++b)
    std::copy_n(in.q.begin() + int64_t(b) * in.hq * in.d, int64_t(in.hq) * in.d,
                q_rows.begin() + b * q_seq_stride);
  std::vector<uint64_t> code_rows(size_t(slots) * code_stride, kGapCode);
  std::vector<uint32_t> mask_rows(size_t(slots) * mask_stride, kGapMaskWord);
  for (int s = 0; s < slots; ++s) {
    std::copy_n(in.codes.begin() + int64_t(s) * in.length, in.length,
                code_rows.begin() + s * code_stride);
    std::fill_n(mask_rows.begin() + s * mask_stride, words, 0u);
  }
  auto d_projection = to_device(in.projection);
  auto d_q = to_device_bf16(q_rows);
  auto d_codes = to_device(code_rows);
  auto d_mask = to_device(mask_rows);
  cuda::DeviceBuffer d_keys(size_t(slots) * in.key_stride() * 2);
  cuda::check(cudaMemset(d_keys.data(), kUnwrittenKey & 0xFF, d_keys.bytes()), "memset");
  for (const auto& [slot, token] : in.forced) {
    auto d_token = to_device(std::vector<int32_t>{token});
    cuda::binary_mark_tokens(d_token.as<int32_t>(), 1, 1, 1,
                             d_mask.as<uint32_t>() + slot * mask_stride, mask_stride, nullptr);
  }
  // binary_score_keys reads the mask before its PDL wait (binary_hash.h: the kernel launched right
  // before it must not write the mask), so the marks finish first; until now only d_token's
  // cudaFree synchronised them, implicitly.
  cuda::check(cudaDeviceSynchronize(), "binary_mark_tokens");
  cuda::binary_score_keys({.projection = d_projection.as<float>(),
                           .q = d_q.as<__nv_bfloat16>(),
                           .q_seq_stride = q_seq_stride,
                           .head_dim = in.d,
                           .codes = d_codes.as<uint64_t>(),
                           .code_slot_stride = code_stride,
                           .forced_mask = in.forced.empty() ? nullptr : d_mask.as<uint32_t>(),
                           .mask_slot_stride = mask_stride,
                           .sink_tokens = in.sinks,
                           .batch = in.batch,
                           .n_query_heads = in.hq,
                           .n_kv_heads = in.hkv,
                           .length = in.length,
                           .keys = d_keys.as<uint16_t>(),
                           .key_slot_stride = in.key_stride()},
                          nullptr);
  cuda::check(cudaDeviceSynchronize(), "binary_score_keys");
  return from_device<uint16_t>(d_keys, size_t(slots) * in.key_stride());
}

// The keys the CPU twin gives: binary_score_keys of its quantised queries, + 32768, or
// kSignCodeForced for the sinks and the forced pairs.
inline std::vector<uint16_t> cpu_score_keys(const ScoreInputs& in) {
  const int group = in.hq / in.hkv, slots = in.batch * in.hkv;
  const std::vector<QuantizedQuery> quantized =
      cpu_quantized(in.projection, in.q, in.batch, in.hq, in.hkv, in.d);
  std::vector<uint16_t> keys(size_t(slots) * in.length);
  std::vector<int> scores(in.length);
  for (int s = 0; s < slots; ++s) {
    kernels::binary_score_keys(quantized.data() + s * group, group,
                               in.codes.data() + int64_t(s) * in.length, in.length, scores.data());
    for (int j = 0; j < in.length; ++j)
      keys[int64_t(s) * in.length + j] =
          j < in.sinks ? cuda::kSignCodeForced : uint16_t(scores[j] + cuda::kSignCodeScoreOffset);
  }
  for (const auto& [slot, token] : in.forced)
    keys[int64_t(slot) * in.length + token] = cuda::kSignCodeForced;
  return keys;
}

// The GPU's keys equal the CPU twin's everywhere, and the gap past each slot's length is left as
// it was (mismatches counted per slot, the first named).
inline void expect_score_keys_equal(const ScoreInputs& in) {
  const std::vector<uint16_t> got = gpu_score_keys(in), want = cpu_score_keys(in);
  for (int s = 0; s < in.batch * in.hkv; ++s) {
    int mismatches = 0, first = 0;
    uint16_t got_first = 0, want_first = 0;
    for (int64_t j = in.key_stride() - 1; j >= 0; --j) {
      const uint16_t expected = j < in.length ? want[int64_t(s) * in.length + j] : kUnwrittenKey;
      const uint16_t actual = got[int64_t(s) * in.key_stride() + j];
      if (actual != expected) {
        ++mismatches;
        first = int(j);
        got_first = actual;
        want_first = expected;
      }
    }
    EXPECT_EQ(mismatches, 0) << "slot " << s << "; the first at token " << first << ": "
                             << got_first << " against " << want_first
                             << (first < in.length ? " (the CPU's)" : " (past the length)");
  }
}

}  // namespace kvb::test
