// BinaryPC's kernels (kernels/cuda/binary_hash.h) against their CPU twins
// (kernels/cpu/binary_hash.h): the inputs and the query planes on both sides, shared by the
// backend-ops test (backend_ops_selection.h) and BinaryPC's own (binarypc_kernels_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
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

// Runs binary_pack_queries and returns the planes [B*Hq, 8].
inline std::vector<uint64_t> gpu_planes(const std::vector<float>& projection,
                                        const std::vector<float>& q, int batch, int hq, int hkv,
                                        int d) {
  auto d_projection = test::to_device(projection);
  auto d_q = test::to_device_bf16(q);
  cuda::DeviceBuffer d_planes(size_t(batch) * hq * cuda::kSignCodePlanes * 8);
  cuda::BinaryPackQueriesArgs args;
  args.projection = d_projection.as<float>();
  args.q = d_q.as<__nv_bfloat16>();
  args.q_seq_stride = int64_t(hq) * d;
  args.batch = batch;
  args.n_query_heads = hq;
  args.n_kv_heads = hkv;
  args.head_dim = d;
  args.planes = d_planes.as<uint64_t>();
  cuda::binary_pack_queries(args, nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");
  std::vector<uint64_t> planes(size_t(batch) * hq * cuda::kSignCodePlanes);
  d_planes.download(planes.data(), planes.size() * 8);
  return planes;
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

inline void expect_planes_equal(const std::vector<uint64_t>& planes,
                                const std::vector<QuantizedQuery>& expected) {
  for (size_t row = 0; row < expected.size(); ++row) {
    EXPECT_EQ(planes[row * 8], expected[row].sign_plane) << "sign plane of head " << row;
    for (int m = 0; m < kernels::kQueryMagnitudePlanes; ++m)
      EXPECT_EQ(planes[row * 8 + 1 + m], expected[row].magnitude[m])
          << "plane " << m << " of head " << row;
  }
}

}  // namespace kvb::test
