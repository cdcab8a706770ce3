// CriticalKV's output-aware value norm of every cached token of one KV head h (docs/methods.md §7):
// the contract the CUDA kernel (kernels/cuda/projected_value_norms.h, all heads at once) is checked
// against (tests/cuda/projected_value_norms_test.cc).
//
//   norms[j] = (1/g) Σ_{a ∈ group(h)} Σ_o |Σ_i values[j, i] · W_o[o, a·dim + i]|
//
// W_o is the layer's output projection, [hidden, n_query_heads·dim] row-major (out x in); query
// head a (of g per KV head) feeds columns a·dim .. a·dim + dim − 1. Products in f32 (BLAS).
#pragma once

#include <cstdint>

namespace kvb::kernels {

struct ProjectedValueNormsArgs {
  const float* values = nullptr;             // KV head kv_head's [length, dim]
  const float* output_projection = nullptr;  // [hidden, n_query_heads * dim]
  int n_query_heads = 0, n_kv_heads = 0, kv_head = 0, length = 0, dim = 0, hidden = 0;
  float* norms = nullptr;  // [length]
};

void projected_value_norms(const ProjectedValueNormsArgs& args);

}  // namespace kvb::kernels
