#include "kernels/cpu/attention.h"

#include <cblas.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/kv_rows.h"
#include "kernels/cpu/matmul.h"

namespace kvb::kernels {
namespace {

constexpr int kQueryBlock = 64;

// p[j] (a softmax row of n entries) becomes bf16(p[j] / m) * m, m the largest p of the tiles up to
// j's: the flash kernels round 2^(s_j - running max) to bf16 for P·V and later scale it by the
// correction to the final maximum, here p / m up to f32 rounding.
void round_probabilities_per_tile(float* p, int n, int tile) {
  float running_max = 0;
  for (int first = 0; first < n; first += tile) {
    const int end = std::min(n, first + tile);
    running_max = std::max(running_max, *std::max_element(p + first, p + end));
    if (running_max == 0) continue;
    for (int j = first; j < end; ++j) p[j] = round_to_bf16(p[j] / running_max) * running_max;
  }
}

// Attention of queries [t0, t1) of one query head. `scores` is scratch of (t1-t0) * visible floats.
void attend_block(const PrefillAttentionArgs& args, int q_head, int t0, int t1,
                  std::vector<float>& scores) {
  const int group = args.n_query_heads / args.n_kv_heads;
  const int kv_head = q_head / group;
  const int d = args.head_dim;
  const int64_t row_stride = static_cast<int64_t>(args.n_query_heads) * d;
  const int prefix = args.prefix[kv_head];
  const int rows = t1 - t0;
  const int visible = prefix + t1;  // the last row of the block sees this many entries
  scores.resize(static_cast<size_t>(rows) * visible);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* q = args.queries + t0 * row_stride + static_cast<int64_t>(q_head) * d;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, visible, d, scale, q,
              static_cast<int>(row_stride), args.keys[kv_head], d, 0.0f, scores.data(), visible);
  float* column_sums = args.column_sums.empty() ? nullptr : args.column_sums[q_head];
  for (int r = 0; r < rows; ++r) {
    float* row = scores.data() + static_cast<int64_t>(r) * visible;
    const int seen = prefix + t0 + r + 1;
    std::fill(row + seen, row + visible, -std::numeric_limits<float>::infinity());
    const float lse = softmax(row, visible);
    if (args.row_log_sum_exp != nullptr)
      args.row_log_sum_exp[static_cast<int64_t>(q_head) * args.n_queries + t0 + r] = lse;
    if (column_sums != nullptr)
      for (int j = 0; j < seen; ++j) column_sums[j] += row[j];
    if (args.bf16_probability_tile > 0)
      round_probabilities_per_tile(row, seen, args.bf16_probability_tile);
  }
  float* out = args.output + t0 * row_stride + static_cast<int64_t>(q_head) * d;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, visible, 1.0f, scores.data(),
              visible, args.values[kv_head], d, 0.0f, out, static_cast<int>(row_stride));
}

}  // namespace

void prefill_attention(const PrefillAttentionArgs& args) {
  if (args.n_kv_heads <= 0 || args.n_query_heads % args.n_kv_heads != 0)
    throw std::invalid_argument("prefill_attention: query heads must be a multiple of KV heads");
  const int blocks = (args.n_queries + kQueryBlock - 1) / kQueryBlock;
  // Column sums add up over all query blocks of a head: one task per head keeps that race-free.
  const bool per_head_tasks = !args.column_sums.empty();
  const int tasks = per_head_tasks ? args.n_query_heads : args.n_query_heads * blocks;
  SingleThreadedBlas single_threaded;  // the parallelism is TBB's, over heads and blocks
  tbb::parallel_for(0, tasks, [&](int task) {
    std::vector<float> scores;
    if (per_head_tasks) {
      for (int b = 0; b < blocks; ++b)
        attend_block(args, task, b * kQueryBlock, std::min(args.n_queries, (b + 1) * kQueryBlock),
                     scores);
    } else {
      const int q_head = task / blocks, b = task % blocks;
      attend_block(args, q_head, b * kQueryBlock, std::min(args.n_queries, (b + 1) * kQueryBlock),
                   scores);
    }
  });
}

float decode_attention(const DecodeAttentionArgs& args) {
  const int d = args.head_dim;
  const float scale = args.scale != 0 ? args.scale : 1.0f / std::sqrt(static_cast<float>(d));
  const int n = args.indices != nullptr ? args.n_indices : args.n_entries;
  const KvRowOps rows = kv_row_ops(args.kv_type);
  const int64_t row_bytes = static_cast<int64_t>(d) * kv_element_bytes(args.kv_type);
  const auto* keys = static_cast<const uint8_t*>(args.keys);
  const auto* values = static_cast<const uint8_t*>(args.values);
  std::vector<float> logits(n);
  for (int i = 0; i < n; ++i) {
    const int entry = args.indices != nullptr ? args.indices[i] : i;
    logits[i] = scale * rows.dot(keys + entry * row_bytes, args.query, d);
    if (args.logit_bias != nullptr) logits[i] += args.logit_bias[i];
  }
  const float lse = softmax(logits.data(), n);
  if (args.probabilities != nullptr) {
    if (args.indices == nullptr) {
      std::copy(logits.begin(), logits.end(), args.probabilities);
    } else {
      std::fill(args.probabilities, args.probabilities + args.n_entries, 0.0f);
      for (int i = 0; i < n; ++i) args.probabilities[args.indices[i]] += logits[i];
    }
  }
  if (args.bf16_probability_tile > 0)
    round_probabilities_per_tile(logits.data(), n, args.bf16_probability_tile);
  std::fill(args.output, args.output + d, 0.0f);
  for (int i = 0; i < n; ++i) {
    const int entry = args.indices != nullptr ? args.indices[i] : i;
    rows.axpy(logits[i], values + entry * row_bytes, args.output, d);
  }
  return lse;
}

}  // namespace kvb::kernels
