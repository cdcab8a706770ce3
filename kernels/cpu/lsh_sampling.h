// Sampling by locality-sensitive hashing with importance weights (MagicPIG, docs/methods.md §11),
// CPU reference. CUDA twin: kernels/cuda/lsh_sampling.h (same names, same codes, same lists).
//
// A projection holds K * L rows of length d (K bits per table, L tables); bit i of table l of a
// vector x is 1 when x . row[l * K + i] > 0, the product summed in f64 so that a near-zero
// product does not depend on the summation order. Keys are hashed centred on a mean mu (the f64
// mean of a range of keys, rounded to f32; centred values k - mu in f32). A query's candidate is
// a hashed key whose code equals the query's in at least `min_collisions` tables; it is sampled
// with probability u = P(at least min_collisions of L tables collide) at per-table collision
// probability p^K, p = 1 - arccos(cos(q, k - mu)) / pi (cos in f64, clamped to [-1, 1], 0 when a
// norm is 0), and enters the softmax with the additive logit bias -log(u + 1e-4).
//
// Codes are table-major: code of table l for hashed key j at codes[l * code_table_stride + j].
#pragma once

#include <cstdint>
#include <vector>

namespace kvb::kernels {

// The largest K: codes are 16-bit.
inline constexpr int kLshMaxBitsPerTable = 16;

struct LshTables {
  const float* projection = nullptr;  // [bits_per_table * tables, head_dim]
  int bits_per_table = 0;             // K, 0 .. kLshMaxBitsPerTable (0: every code is 0)
  int tables = 0;                     // L
  int head_dim = 0;
};

// Mean of keys [begin, end) of `keys` ([.., head_dim] rows), summed in f64, rounded to f32; zeros
// for an empty range.
std::vector<float> lsh_key_mean(const float* keys, int begin, int end, int head_dim);

// Codes of keys [begin, end) centred on `mean`: hashed key j - begin of table l at
// codes[l * code_table_stride + j - begin]; centred_norms[j - begin] = ||k_j - mean|| (f64,
// rounded to f32).
void lsh_hash_keys(const LshTables& tables, const float* keys, int begin, int end,
                   const float* mean, uint16_t* codes, int64_t code_table_stride,
                   float* centred_norms);

// The L codes of each of `n` queries ([n, head_dim], not centred): codes[i * tables + l].
void lsh_hash_queries(const LshTables& tables, const float* queries, int n, uint16_t* codes);

// P(at least min_collisions of `tables` independent tables collide), each with probability
// p^bits_per_table; in [0, 1].
double lsh_sampling_probability(double p, int bits_per_table, int tables, int min_collisions);

// The lists of `n_queries` query heads over one KV head's cache of `length` entries, each: the
// exact entries [0, middle_begin) with bias 0, the query's sampled hashed entries of
// [middle_begin, middle_end) in increasing order with their biases, then the exact entries
// [middle_end, length) with bias 0.
struct LshSampleArgs {
  LshTables tables;
  int min_collisions = 2;
  const float* keys = nullptr;  // [length, head_dim]
  int middle_begin = 0, middle_end = 0, length = 0;
  const float* mean = nullptr;            // the mean the keys were hashed around
  const uint16_t* key_codes = nullptr;    // lsh_hash_keys over [middle_begin, middle_end)
  int64_t code_table_stride = 0;          // >= middle_end - middle_begin
  const float* centred_norms = nullptr;   // [middle_end - middle_begin]
  const float* queries = nullptr;         // [n_queries, head_dim]
  const uint16_t* query_codes = nullptr;  // lsh_hash_queries of `queries`
  int n_queries = 1;
};
// Writes indices[i] and logit_bias[i] for i < n_queries.
void lsh_sample_lists(const LshSampleArgs& args, std::vector<int32_t>* indices,
                      std::vector<float>* logit_bias);

}  // namespace kvb::kernels
