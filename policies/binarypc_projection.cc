#include "policies/binarypc_projection.h"

#include <cblas.h>
#include <tbb/parallel_for.h>

#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

#include "common/errors.h"
#include "kernels/cpu/binary_hash.h"
#include "kernels/cpu/matmul.h"

namespace kvb {

using kernels::kBinaryHashBits;

void fit_binary_projections(std::vector<std::vector<float>>& keys, int64_t tokens,
                            const BinaryProjectionFit& fit, BinaryProjectionSet& set) {
  const int n_heads = set.n_layers * set.n_kv_heads;
  if (static_cast<int>(keys.size()) != n_heads)
    throw std::logic_error("fit_binary_projections: one key list per (layer, KV head) expected");
  const kernels::SingleThreadedBlas single_threaded_blas;
  tbb::parallel_for(0, n_heads, [&](int i) {
    BinaryProjectionFit head_fit = fit;
    head_fit.seed = fit.seed * 1000003u + static_cast<uint64_t>(i);
    fit_binary_projection(keys[i].data(), tokens, set.head_dim, head_fit,
                          set.mutable_head(i / set.n_kv_heads, i % set.n_kv_heads));
    std::vector<float>().swap(keys[i]);
  });
}

namespace {

constexpr char kMagic[8] = {'K', 'V', 'B', 'B', 'P', 'C', 'P', '\0'};
constexpr uint32_t kVersion = 1;

float torch_sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f); }

// u = sign(R v) for R [n, d].
void signs_of_projection(const std::vector<float>& residual, int64_t n, int d, const float* v,
                         std::vector<float>& u) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), d, 1.0f, residual.data(), d, v, 1,
              0.0f, u.data(), 1);
  for (float& x : u) x = torch_sign(x);
}

}  // namespace

void fit_binary_projection(const float* keys, int64_t n, int head_dim,
                           const BinaryProjectionFit& fit, float* projection) {
  if (n <= 0) throw InputError("BinaryPC projection: no keys to fit (empty prompt)");
  const int d = head_dim;
  std::vector<float> residual(keys, keys + n * d);
  std::vector<float> u(n);
  std::vector<float> v(d);
  std::mt19937_64 generator(fit.seed);
  std::normal_distribution<float> gaussian(0.0f, 1.0f);
  for (int bit = 0; bit < kBinaryHashBits; ++bit) {
    for (float& x : v) x = gaussian(generator);
    for (int iteration = 0; iteration < fit.iterations; ++iteration) {
      signs_of_projection(residual, n, d, v.data(), u);
      // v = R^T u
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(n), d, 1.0f, residual.data(), d,
                  u.data(), 1, 0.0f, v.data(), 1);
    }
    float* row = projection + static_cast<int64_t>(bit) * d;
    for (int i = 0; i < d; ++i) row[i] = v[i] / static_cast<float>(n);
    if (fit.iterations == 0) signs_of_projection(residual, n, d, v.data(), u);
    if (fit.recompute_signs) signs_of_projection(residual, n, d, row, u);
    // R <- R - u P[i]^T
    cblas_sger(CblasRowMajor, static_cast<int>(n), d, -1.0f, u.data(), 1, row, 1, residual.data(),
               d);
  }
}

BinaryProjectionSet::BinaryProjectionSet(int layers, int kv_heads, int dim)
    : n_layers(layers),
      n_kv_heads(kv_heads),
      head_dim(dim),
      rows(static_cast<size_t>(layers) * kv_heads * kBinaryHashBits * dim, 0.0f) {}

const float* BinaryProjectionSet::head(int layer, int kv_head) const {
  return rows.data() +
         (static_cast<int64_t>(layer) * n_kv_heads + kv_head) * kBinaryHashBits * head_dim;
}

float* BinaryProjectionSet::mutable_head(int layer, int kv_head) {
  return rows.data() +
         (static_cast<int64_t>(layer) * n_kv_heads + kv_head) * kBinaryHashBits * head_dim;
}

BinaryProjectionSet BinaryProjectionSet::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError("BinaryPC projection file '" + path.string() +
                     "' cannot be opened (create one with: kvbench calibrate --model M --data DIR "
                     "--out proj.bin)");
  char magic[8];
  uint32_t header[6];
  uint64_t tokens = 0;
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(header), sizeof header);
  in.read(reinterpret_cast<char*>(&tokens), sizeof tokens);
  if (!in || std::memcmp(magic, kMagic, sizeof magic) != 0)
    throw FormatError("'" + path.string() +
                      "' is not a kvbench BinaryPC projection file (bad magic)");
  if (header[0] != kVersion)
    throw FormatError("'" + path.string() + "': projection file version " +
                      std::to_string(header[0]) + " is not supported (expected " +
                      std::to_string(kVersion) + ")");
  if (header[3] != kBinaryHashBits)
    throw FormatError("'" + path.string() + "': projection has " + std::to_string(header[3]) +
                      " bits; BinaryPC supports 64");
  const uint32_t max_dim = 1u << 16;
  if (header[1] == 0 || header[2] == 0 || header[4] == 0 || header[1] > max_dim ||
      header[2] > max_dim || header[4] > max_dim)
    throw FormatError("'" + path.string() + "': implausible projection shape");
  BinaryProjectionSet set(static_cast<int>(header[1]), static_cast<int>(header[2]),
                          static_cast<int>(header[4]));
  set.calibration_tokens = tokens;
  in.read(reinterpret_cast<char*>(set.rows.data()),
          static_cast<std::streamsize>(set.rows.size() * sizeof(float)));
  if (!in)
    throw FormatError("'" + path.string() + "' is truncated: expected " +
                      std::to_string(set.rows.size()) + " floats after the header");
  return set;
}

void BinaryProjectionSet::save(const std::filesystem::path& path) const {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw InputError("cannot write projection file '" + path.string() + "'");
  const uint32_t header[6] = {kVersion,
                              static_cast<uint32_t>(n_layers),
                              static_cast<uint32_t>(n_kv_heads),
                              static_cast<uint32_t>(kBinaryHashBits),
                              static_cast<uint32_t>(head_dim),
                              0};
  out.write(kMagic, sizeof kMagic);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(&calibration_tokens), sizeof calibration_tokens);
  out.write(reinterpret_cast<const char*>(rows.data()),
            static_cast<std::streamsize>(rows.size() * sizeof(float)));
  if (!out) throw InputError("failed writing projection file '" + path.string() + "'");
}

}  // namespace kvb
