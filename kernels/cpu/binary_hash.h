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

}  // namespace kvb::kernels
