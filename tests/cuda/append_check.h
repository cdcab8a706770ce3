// The decode step's in-kernel append (DecodeAppend) against its reference, shared by the dense
// kernel's test (attention_test.cc) and the ART walk's (early_exit_decode_test.cc): the step done
// the separate way, and the comparison of the two runs, bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/transformer_ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

// The reference step: `qkv_row` (the step's rows) biased and rotated in place, its K/V appended at
// `lengths`, the lengths advanced (rope_append_kv_decode); the caller then runs the attention
// without an append.
inline void append_separately(cuda::RopeArgs rope, cuda::DeviceBuffer& qkv_row,
                              const cuda::DeviceBuffer& offsets, cuda::DeviceBuffer& lengths,
                              cuda::DeviceBuffer& k, cuda::DeviceBuffer& v) {
  rope.qkv = qkv_row.as<__nv_bfloat16>();
  cuda::rope_append_kv_decode(rope, offsets.as<int64_t>(), lengths.as<int32_t>(),
                              k.as<__nv_bfloat16>(), v.as<__nv_bfloat16>(), nullptr);
}

struct AppendedRun {
  std::vector<int32_t> lengths;
  std::vector<float> outputs;
};

// The fused and the separate run (each with `lengths`, `k`, `v` and `out` buffers) end with the
// same lengths, caches and outputs, bit for bit; returns the fused run's lengths and outputs.
template <typename Run>
AppendedRun expect_same_appends(const Run& fused, const Run& separate, size_t n_lengths,
                                size_t cache_values, size_t outputs) {
  AppendedRun result{std::vector<int32_t>(n_lengths), from_device_bf16(fused.out, outputs)};
  std::vector<int32_t> want(n_lengths);
  fused.lengths.download(result.lengths.data(), n_lengths * 4);
  separate.lengths.download(want.data(), n_lengths * 4);
  EXPECT_EQ(result.lengths, want);
  EXPECT_EQ(from_device_bf16(fused.k, cache_values), from_device_bf16(separate.k, cache_values));
  EXPECT_EQ(from_device_bf16(fused.v, cache_values), from_device_bf16(separate.v, cache_values));
  EXPECT_EQ(result.outputs, from_device_bf16(separate.out, outputs));
  return result;
}

}  // namespace kvb::test
