#include "policies/binarypc_projection.h"

#include <tbb/parallel_for.h>

#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "common/errors.h"
#include "kernels/cpu/binary_hash.h"

namespace kvb {

using kernels::kBinaryHashBits;

void fit_binary_projections(std::vector<std::vector<float>>& keys, int64_t tokens,
                            const BinaryProjectionFit& fit, BinaryProjectionSet& set) {
  const int n_heads = set.n_layers * set.n_kv_heads;
  if (static_cast<int>(keys.size()) != n_heads)
    throw std::logic_error("fit_binary_projections: one key list per (layer, KV head) expected");
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

}  // namespace

void fit_binary_projection(const float* keys, int64_t n, int head_dim,
                           const BinaryProjectionFit& fit, float* projection) {
  if (n <= 0) throw InputError("BinaryPC projection: no keys to fit (empty prompt)");
  const std::vector<float> starts = kernels::binary_fit_starts(fit.seed, head_dim);
  kernels::binary_fit_projection(
      keys, n, head_dim, starts.data(),
      {.iterations = fit.iterations, .recompute_signs = fit.recompute_signs}, projection);
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
