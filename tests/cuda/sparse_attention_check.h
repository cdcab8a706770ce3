// Shared check of a GPU decode selector (BinaryPC, Quest): runs decode_attention over the index
// lists the GPU selection wrote, then expects each query head's list to equal the CPU selector's
// and the attention output to match the CPU attention over the CPU's lists.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cache_policy.h"
#include "engine/kv_store.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "tests/cuda/cuda_test_util.h"

namespace kvb::test {

struct DeviceSelection {
  const cuda::DeviceBuffer* indices = nullptr;  // [n_lists, list_capacity] int32
  const cuda::DeviceBuffer* offset = nullptr;   // [hq] int64, start of each head's list
  const cuda::DeviceBuffer* count = nullptr;    // [hq] int32
  int n_lists = 0;
  int list_capacity = 0;
};

// One layer of random bf16-representable keys (scale 2) and values, both in the GPU layout
// [Hkv, capacity, d], and the CPU store the selectors read, filled one position at a time.
struct RandomLayerCache {
  RandomLayerCache(int n_kv_heads, int head_dim, int capacity, uint32_t key_seed)
      : k_all(random_bf16_values(size_t(n_kv_heads) * capacity * head_dim, key_seed, 2.0f)),
        v_all(random_bf16_values(size_t(n_kv_heads) * capacity * head_dim, key_seed + 1)),
        store(1, n_kv_heads, head_dim),
        hkv(n_kv_heads),
        d(head_dim),
        capacity(capacity) {
    store.reserve(capacity);
  }

  // Appends position j of every head to the store.
  void append(int j) {
    std::vector<float> k_row(size_t(hkv) * d), v_row(k_row.size());
    for (int h = 0; h < hkv; ++h) {
      std::copy_n(k_all.begin() + (int64_t(h) * capacity + j) * d, d, k_row.begin() + h * d);
      std::copy_n(v_all.begin() + (int64_t(h) * capacity + j) * d, d, v_row.begin() + h * d);
    }
    store.append(0, j, k_row.data(), v_row.data());
  }

  const std::vector<float> k_all, v_all;
  KvStore store;

 private:
  int hkv, d, capacity;
};

// One sequence; the cache holds `length` entries per KV head in rows of `capacity` (as `store`).
inline void expect_sparse_attention_matches_cpu(const std::vector<float>& q,
                                                const cuda::DeviceBuffer& d_q,
                                                const cuda::DeviceBuffer& d_k,
                                                const cuda::DeviceBuffer& d_v, const KvStore& store,
                                                int hq, int hkv, int d, int length, int capacity,
                                                const DeviceSelection& gpu, const Selection& cpu) {
  const int group = hq / hkv;
  std::vector<int64_t> kv_offset(hkv);
  for (int h = 0; h < hkv; ++h) kv_offset[h] = int64_t(h) * capacity;
  auto d_kv_offset = to_device(kv_offset);
  auto d_kv_length = to_device(std::vector<int32_t>(hkv, length));
  cuda::DeviceBuffer d_out(size_t(hq) * d * 2);
  cuda::DeviceBuffer workspace(
      cuda::decode_attention_workspace_floats(1, hq, d, gpu.list_capacity) * 4);
  cuda::DecodeAttentionArgs attention;
  attention.q = d_q.as<__nv_bfloat16>();
  attention.q_seq_stride = int64_t(hq) * d;
  attention.k = d_k.as<__nv_bfloat16>();
  attention.v = d_v.as<__nv_bfloat16>();
  attention.kv_offset = d_kv_offset.as<int64_t>();
  attention.kv_length = d_kv_length.as<int32_t>();
  attention.max_kv_length = gpu.list_capacity;
  attention.indices = gpu.indices->as<int32_t>();
  attention.index_offset = gpu.offset->as<int64_t>();
  attention.index_count = gpu.count->as<int32_t>();
  attention.out = d_out.as<__nv_bfloat16>();
  attention.out_seq_stride = int64_t(hq) * d;
  attention.batch = 1;
  attention.n_query_heads = hq;
  attention.n_kv_heads = hkv;
  attention.head_dim = d;
  attention.scale = 1.0f / std::sqrt(float(d));
  attention.workspace = workspace.as<float>();
  cuda::decode_attention(attention, nullptr);
  cuda::check(cudaDeviceSynchronize(), "sync");

  std::vector<int32_t> indices(size_t(gpu.n_lists) * gpu.list_capacity), counts(hq);
  std::vector<int64_t> offsets(hq);
  gpu.indices->download(indices.data(), indices.size() * 4);
  gpu.offset->download(offsets.data(), offsets.size() * 8);
  gpu.count->download(counts.data(), counts.size() * 4);
  const std::vector<float> got = from_device_bf16(d_out, size_t(hq) * d);
  std::vector<float> expected(size_t(hq) * d);
  for (int a = 0; a < hq; ++a) {
    const std::vector<int32_t> list(indices.begin() + offsets[a],
                                    indices.begin() + offsets[a] + counts[a]);
    EXPECT_EQ(list, cpu.indices[a]) << "query head " << a;
    kernels::DecodeAttentionArgs reference;
    reference.query = q.data() + int64_t(a) * d;
    reference.keys = store.keys(0, a / group);
    reference.values = store.values(0, a / group);
    reference.n_entries = length;
    reference.head_dim = d;
    reference.indices = cpu.indices[a].data();
    reference.n_indices = static_cast<int>(cpu.indices[a].size());
    reference.output = expected.data() + int64_t(a) * d;
    kernels::decode_attention(reference);
  }
  EXPECT_LT(max_abs_diff(got, expected), 1e-2);
}

}  // namespace kvb::test
