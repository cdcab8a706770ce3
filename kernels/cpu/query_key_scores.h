// The exact logits q.k of one query against a block of keys: the contract the CUDA kernel
// (kernels/cuda/query_key_scores.h) is checked against (tests/cuda/query_key_scores_test.cc), and
// what an exact top-k selection ranks.
//
//   scores[j] = Σ_i query[i] * keys[j * dim + i],  j < length
//
// Accumulated in f32 in dimension order, one fused multiply-add per term (so the device's sums
// are bit-equal).
#pragma once

namespace kvb::kernels {

void query_key_scores(const float* query, const float* keys, int length, int dim, float* scores);

}  // namespace kvb::kernels
