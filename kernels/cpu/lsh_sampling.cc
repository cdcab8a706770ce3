#include "kernels/cpu/lsh_sampling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/cpu/exact_dot.h"

namespace kvb::kernels {
namespace {

// The L codes of x against the rows (x already centred where it should be).
void table_codes(const LshTables& tables, const float* x, uint16_t* codes, int64_t stride) {
  const int d = tables.head_dim;
  for (int l = 0; l < tables.tables; ++l) {
    uint32_t code = 0;
    for (int i = 0; i < tables.bits_per_table; ++i) {
      const float* row =
          tables.projection + (static_cast<int64_t>(l) * tables.bits_per_table + i) * d;
      if (exact_dot(x, row, d) > 0) code |= uint32_t{1} << i;
    }
    codes[l * stride] = static_cast<uint16_t>(code);
  }
}

}  // namespace

std::vector<float> lsh_key_mean(const float* keys, int begin, int end, int head_dim) {
  std::vector<double> sum(head_dim, 0.0);
  for (int j = begin; j < end; ++j)
    for (int t = 0; t < head_dim; ++t) sum[t] += keys[static_cast<int64_t>(j) * head_dim + t];
  std::vector<float> mean(head_dim, 0.0f);
  if (end > begin)
    for (int t = 0; t < head_dim; ++t) mean[t] = static_cast<float>(sum[t] / (end - begin));
  return mean;
}

void lsh_hash_keys(const LshTables& tables, const float* keys, int begin, int end,
                   const float* mean, uint16_t* codes, int64_t code_table_stride,
                   float* centred_norms) {
  const int d = tables.head_dim;
  std::vector<float> centred(d);
  for (int j = begin; j < end; ++j) {
    const float* k = keys + static_cast<int64_t>(j) * d;
    for (int t = 0; t < d; ++t) centred[t] = k[t] - mean[t];
    centred_norms[j - begin] =
        static_cast<float>(std::sqrt(exact_dot(centred.data(), centred.data(), d)));
    table_codes(tables, centred.data(), codes + (j - begin), code_table_stride);
  }
}

void lsh_hash_queries(const LshTables& tables, const float* queries, int n, uint16_t* codes) {
  for (int i = 0; i < n; ++i)
    table_codes(tables, queries + static_cast<int64_t>(i) * tables.head_dim,
                codes + static_cast<int64_t>(i) * tables.tables, 1);
}

double lsh_sampling_probability(double p, int bits_per_table, int tables, int min_collisions) {
  const double per_table = std::pow(p, bits_per_table);
  // P(at least t) = 1 - sum_{c < t} C(L, c) q^c (1 - q)^(L - c)
  double below = 0;
  double binomial = 1;
  for (int c = 0; c < min_collisions; ++c) {
    below += binomial * std::pow(per_table, c) * std::pow(1.0 - per_table, tables - c);
    binomial = binomial * (tables - c) / (c + 1);
  }
  return std::clamp(1.0 - below, 0.0, 1.0);
}

namespace {

// One query's list (lsh_sample_lists).
void sample_list(const LshSampleArgs& args, const float* query, const uint16_t* query_codes,
                 std::vector<int32_t>& indices, std::vector<float>& logit_bias) {
  const LshTables& tables = args.tables;
  const int d = tables.head_dim;
  indices.clear();
  logit_bias.clear();
  for (int j = 0; j < args.middle_begin; ++j) indices.push_back(j);
  logit_bias.assign(indices.size(), 0.0f);
  const int n_middle = args.middle_end - args.middle_begin;
  // Table by table over every hashed key: each pass streams one table's codes.
  std::vector<int> collisions(std::max(n_middle, 0), 0);
  for (int l = 0; l < tables.tables; ++l) {
    const uint16_t* codes = args.key_codes + l * args.code_table_stride;
    const uint16_t query_code = query_codes[l];
    for (int m = 0; m < n_middle; ++m) collisions[m] += codes[m] == query_code;
  }
  const double query_norm = std::sqrt(exact_dot(query, query, d));
  std::vector<float> centred(d);
  for (int m = 0; m < n_middle; ++m) {
    if (collisions[m] < args.min_collisions) continue;
    const int j = args.middle_begin + m;
    const float* k = args.keys + static_cast<int64_t>(j) * d;
    for (int t = 0; t < d; ++t) centred[t] = k[t] - args.mean[t];
    const double denominator = query_norm * args.centred_norms[m];
    const double cosine =
        denominator > 0 ? std::clamp(exact_dot(query, centred.data(), d) / denominator, -1.0, 1.0)
                        : 0.0;
    const double p = 1.0 - std::acos(cosine) / std::numbers::pi;
    const double u =
        lsh_sampling_probability(p, tables.bits_per_table, tables.tables, args.min_collisions);
    indices.push_back(j);
    logit_bias.push_back(static_cast<float>(-std::log(u + 1e-4)));
  }
  for (int j = std::max(args.middle_end, args.middle_begin); j < args.length; ++j) {
    indices.push_back(j);
    logit_bias.push_back(0.0f);
  }
}

}  // namespace

void lsh_sample_lists(const LshSampleArgs& args, std::vector<int32_t>* indices,
                      std::vector<float>* logit_bias) {
  for (int i = 0; i < args.n_queries; ++i)
    sample_list(args, args.queries + static_cast<int64_t>(i) * args.tables.head_dim,
                args.query_codes + static_cast<int64_t>(i) * args.tables.tables, indices[i],
                logit_bias[i]);
}

}  // namespace kvb::kernels
