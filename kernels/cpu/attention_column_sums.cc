#include "kernels/cpu/attention_column_sums.h"

#include <tbb/parallel_for.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/matmul.h"

namespace kvb::kernels {

void attention_column_sums(const ColumnSumsArgs& args) {
  if (args.n_queries <= 0) return;
  if (args.n_kv_heads <= 0 || args.n_query_heads % args.n_kv_heads != 0)
    throw std::invalid_argument("attention_column_sums: " + std::to_string(args.n_query_heads) +
                                " query heads are not a multiple of " +
                                std::to_string(args.n_kv_heads) + " KV heads");
  const int d = args.head_dim;
  const int n_keys = args.query_offset + args.n_queries;
  if (args.q_row_stride < int64_t(args.n_query_heads) * d ||
      args.kv_head_stride < int64_t(n_keys) * d || args.sums_head_stride < n_keys)
    throw std::invalid_argument(
        "attention_column_sums: strides too short for " + std::to_string(args.n_query_heads) +
        " query heads of " + std::to_string(d) + " over " + std::to_string(n_keys) +
        " keys (q_row_stride >= Hq*d, kv_head_stride >= keys*d, sums_head_stride >= keys)");
  const int group = args.n_query_heads / args.n_kv_heads;
  const float scale = args.scale != 0 ? args.scale : 1.0f / std::sqrt(static_cast<float>(d));
  tbb::parallel_for(0, args.n_query_heads, [&](int a) {
    const float* keys = args.k + static_cast<int64_t>(a / group) * args.kv_head_stride;
    float* sums = args.column_sums + static_cast<int64_t>(a) * args.sums_head_stride;
    for (int i = 0; i < args.n_queries; ++i) {
      const float* q =
          args.q + static_cast<int64_t>(i) * args.q_row_stride + static_cast<int64_t>(a) * d;
      const float lse = args.lse[static_cast<int64_t>(a) * args.n_queries + i];
      for (int j = 0; j <= args.query_offset + i; ++j)
        sums[j] += std::exp(scale * dot(q, keys + static_cast<int64_t>(j) * d, d) - lse);
    }
  });
}

}  // namespace kvb::kernels
