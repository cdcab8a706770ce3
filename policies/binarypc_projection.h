// BinaryPC projections (docs/methods.md §12, Algorithm 1 and OPC) and their file format.
//
// Algorithm 1 fits 64 rows P[i] (length d) to a set of keys K (n x d), greedily on the residual:
//   R <- K; for each bit i: v ~ N(0, I_d); repeat `iterations` times: u = sign(R v), v = R^T u;
//   P[i] = v / n;  [OPC only: u = sign(R P[i])];  R <- R - u P[i]^T
// with PyTorch's sign(0) = 0. Online BinaryPC fits per prompt, per (layer, KV head), over the
// prompt's keys; OPC fits once over calibration keys and recomputes u before the residual update.
// The official code runs this in bf16; the harness runs it in f32 with its sums in f64 in a fixed
// order (kernels/cpu/binary_hash.h, binary_fit_projection), so that the GPU engine's fit on the
// device gives the same rows.
//
// File format of `kvbench calibrate --out proj.bin` (little-endian):
//   offset 0   char[8]  magic "KVBBPCP\0"
//          8   uint32   version (1)
//         12   uint32   n_layers
//         16   uint32   n_kv_heads
//         20   uint32   bits (64)
//         24   uint32   head_dim d
//         28   uint32   reserved (0)
//         32   uint64   calibration tokens per KV head (0 when unknown)
//         40   float32  P[n_layers][n_kv_heads][64][d]
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace kvb {

struct BinaryProjectionFit {
  int iterations = 4;            // num_iters of the official code
  bool recompute_signs = false;  // OPC: u = sign(R P[i]) before the residual update
  uint64_t seed = 0;             // seeds the N(0, I) start vectors
};

// Fits P ([64, d], written to `projection`) to `n` keys ([n, d]).
void fit_binary_projection(const float* keys, int64_t n, int head_dim,
                           const BinaryProjectionFit& fit, float* projection);

struct BinaryProjectionSet;

// Fits every (layer, KV head) of `set` from keys[layer * n_kv_heads + head] ([tokens, d] each,
// freed as each head is done), one task per head. Head i's start vectors are seeded with
// fit.seed * 1000003 + i.
void fit_binary_projections(std::vector<std::vector<float>>& keys, int64_t tokens,
                            const BinaryProjectionFit& fit, BinaryProjectionSet& set);

// P for every (layer, KV head) of a model.
struct BinaryProjectionSet {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  uint64_t calibration_tokens = 0;
  std::vector<float> rows;  // [n_layers, n_kv_heads, 64, d]

  BinaryProjectionSet() = default;
  BinaryProjectionSet(int layers, int kv_heads, int dim);
  const float* head(int layer, int kv_head) const;
  float* mutable_head(int layer, int kv_head);

  // Throws InputError when the file is missing, FormatError when it is not a projection file.
  static BinaryProjectionSet load(const std::filesystem::path& path);
  void save(const std::filesystem::path& path) const;
};

}  // namespace kvb
