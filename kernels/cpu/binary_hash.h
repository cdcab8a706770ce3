// BinaryPC hashing and scoring (docs/methods.md §12, Algorithms 2 and 3), CPU reference.
//
// A projection P holds 64 rows of length d. A key k is hashed greedily against the rows:
//   r <- k;  for i = 0..63:  h_i = sign(r . P[i]) with sign(0) = +1;  r <- r - s_i * P[i]
// where the residual update uses s_i = sign(r . P[i]) with sign(0) = 0 (the official PyTorch path:
// an exact zero leaves r unchanged). Bit i of the packed 64-bit code is 1 exactly when h_i = -1,
// least-significant bit first.
//
// A query is projected (p = P q, 64 values), quantised with one scale per KV-head group
// (sigma = 127 / max|p| over the group, max clamped to >= 1e-6, round half to even) into a sign
// plane and 7 magnitude bit-planes. Its score against a code is the integer dot product sum_i p^_i
// h_i, computed with XOR/AND/popcount:
//   w = sign_plane XOR code;  c = sum_b 2^(b-1) (popc(m_b & ~w) - popc(m_b & w)).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace kvb::kernels {

inline constexpr int kBinaryHashBits = 64;
inline constexpr int kQueryMagnitudePlanes = 7;

// Algorithm 2 for one key: returns the packed code; when `residual_norms` is given, writes ||r||
// before the first bit and after every bit ([65] values).
uint64_t binary_hash_key(const float* projection, int head_dim, const float* key,
                         float* residual_norms);

// Packs Algorithm 2's bits for `n` keys ([n, d], row-major) into `codes[n]`. P is [64, d].
void binary_hash_keys(const float* projection, int head_dim, const float* keys, int n,
                      uint64_t* codes);

// Reconstruction error ||k - sum_i h_i P[i]||_2 with h decoded from the packed code (EAS).
float binary_hash_reconstruction_error(const float* projection, int head_dim, const float* key,
                                       uint64_t code);

// A query quantised to sign + 7 magnitude planes; `values` keeps the integers for checking.
struct QuantizedQuery {
  uint64_t sign_plane = 0;                                  // bit i = 1 when p^_i < 0
  std::array<uint64_t, kQueryMagnitudePlanes> magnitude{};  // plane b holds bit b of |p^_i|
  std::array<int8_t, kBinaryHashBits> values{};             // p^_i in [-127, 127]
};

// p = P q for each of `n_heads` queries ([n_heads, d]) -> projected [n_heads, 64].
void binary_project_queries(const float* projection, int head_dim, const float* queries,
                            int n_heads, float* projected);

// Quantises the group's projected queries with one shared scale (Algorithm 3 step 2).
void quantize_query_group(const float* projected, int n_heads, QuantizedQuery* out);
// Both for one KV head's group of `n_heads` queries ([n_heads, d]) against its projection: the
// group's query planes. The CUDA twin has no op of its own for this: binary_score_keys
// (kernels/cuda/binary_hash.h) quantises the queries the same way, bit for bit, inside each block.
void binary_pack_queries(const float* projection, int head_dim, const float* queries, int n_heads,
                         QuantizedQuery* out);

// Score of one quantised query against one code: the integer dot product sum_i p^_i h_i.
inline int binary_hash_score(const QuantizedQuery& query, uint64_t code) {
  const uint64_t negative = query.sign_plane ^ code;  // p^_i * h_i < 0
  int score = 0;
  for (int b = 0; b < kQueryMagnitudePlanes; ++b) {
    const uint64_t plane = query.magnitude[b];
    score += (__builtin_popcountll(plane & ~negative) - __builtin_popcountll(plane & negative))
             << b;
  }
  return score;
}

// Group score per token: max over the group's queries of binary_hash_score (Algorithm 3 step 4).
void binary_score_keys(const QuantizedQuery* queries, int n_heads, const uint64_t* codes, int n,
                       int* scores);

// The blocks of keys the fit's R^T u sums over (binary_fit_projection below; the device twin's).
inline constexpr int kBinaryFitChunk = 256;

// r . v in f64 (each product exact) as eight running sums, sum l over the indices j = l mod 8 in
// order, added as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)): a fixed order that a device
// thread repeats, with eight independent chains instead of one.
inline double binary_fit_dot(const float* r, const float* v, int n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int j = 0;
  for (; j + 8 <= n; j += 8)  // written out so that the compiler keeps the lanes in vectors
    for (int l = 0; l < 8; ++l) s[l] += static_cast<double>(r[j + l]) * v[j + l];
  for (; j < n; ++j) s[j % 8] += static_cast<double>(r[j]) * v[j];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// Algorithm 1, the projection fit (docs/methods.md §12), for one set of keys K [n, d]:
//   R <- K;  for bit i:  v <- start[i];  `iterations` times:  u = sign(R v), v = R^T u;
//   P[i] = v / n;  [recompute_signs (OPC): u = sign(R P[i])];  R <- R - u P[i]^T
// with sign(0) = 0 (and u = sign(R start[i]) when iterations is 0). The order of every sum is
// fixed so that the device twin (kernels/cuda/binary_hash.h) gets the same bits: each r . v is a
// binary_fit_dot; each R^T u sums in f64 over blocks of kBinaryFitChunk keys in key order, then
// over the blocks in order; v and P are those sums rounded to f32.
struct BinaryFitOptions {
  int iterations = 4;            // num_iters of the official code
  bool recompute_signs = false;  // OPC
};
void binary_fit_projection(const float* keys, int64_t n, int head_dim, const float* start,
                           const BinaryFitOptions& options, float* projection);

// The start vectors [64, d] of a fit seeded with `seed`: N(0, 1) draws of std::normal_distribution
// over std::mt19937_64, bit after bit (the seeds of policies/binarypc_projection.h).
std::vector<float> binary_fit_starts(uint64_t seed, int head_dim);

}  // namespace kvb::kernels
