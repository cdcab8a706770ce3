// A PrefillView over owned random tensors, for policy tests and benchmarks.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/cache_policy.h"

namespace kvb::test {

struct SyntheticPrefill {
  int n_layers, n_query_heads, n_kv_heads, length, head_dim, window;
  // Per layer: queries [Hq, w, d], keys/values per KV head [L, d], column sums [Hq, L], W_o.
  std::vector<std::vector<float>> queries, column_sums, output_projection;
  std::vector<std::vector<std::vector<float>>> keys, values;
  PrefillView view;

  SyntheticPrefill(int layers, int hq, int hkv, int L, int d, int w, uint32_t seed,
                   float key_scale = 1.0f)
      : n_layers(layers), n_query_heads(hq), n_kv_heads(hkv), length(L), head_dim(d), window(w) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, size_t n, float scale) {
      v.resize(n);
      for (auto& x : v) x = normal(rng) * scale;
    };
    queries.resize(layers);
    keys.assign(layers, std::vector<std::vector<float>>(hkv));
    values.assign(layers, std::vector<std::vector<float>>(hkv));
    column_sums.resize(layers);
    output_projection.resize(layers);
    for (int l = 0; l < layers; ++l) {
      fill(queries[l], size_t(hq) * w * d, key_scale);
      for (int h = 0; h < hkv; ++h) {
        fill(keys[l][h], size_t(L) * d, key_scale);
        fill(values[l][h], size_t(L) * d, 1.0f);
      }
      fill(output_projection[l], size_t(hq * d) * (hq * d), 0.1f);
      column_sums[l].assign(size_t(hq) * L, 0.0f);
    }
    rebuild_view();
  }

  void rebuild_view() {
    view.layers.clear();
    for (int l = 0; l < n_layers; ++l) {
      LayerPrefillView layer;
      layer.layer = l;
      layer.length = length;
      layer.n_query_heads = n_query_heads;
      layer.n_kv_heads = n_kv_heads;
      layer.head_dim = head_dim;
      layer.d_model = n_query_heads * head_dim;
      layer.window = window;
      layer.query_window = queries[l].data();
      for (int h = 0; h < n_kv_heads; ++h) {
        layer.keys.push_back(keys[l][h].data());
        layer.values.push_back(values[l][h].data());
      }
      layer.column_sums = column_sums[l].data();
      layer.output_projection = output_projection[l].data();
      view.layers.push_back(layer);
    }
  }
};

}  // namespace kvb::test
