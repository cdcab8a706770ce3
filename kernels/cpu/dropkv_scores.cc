#include "kernels/cpu/dropkv_scores.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/dequantize.h"

namespace kvb::kernels {
namespace {

float squared_norm(const float* x, int d) {
  float total = 0;
  for (int i = 0; i < d; ++i) total += x[i] * x[i];
  return total;
}

float squared_distance(const float* x, const float* y, int d) {
  float total = 0;
  for (int i = 0; i < d; ++i) total += (x[i] - y[i]) * (x[i] - y[i]);
  return total;
}

// One KV head: its group's g·W window rows against its L keys and values.
void score_kv_head(const DropKvScoreArgs& args, int h, std::vector<float>& logits,
                   std::vector<float>& dots) {
  const int d = args.head_dim, L = args.length, W = args.window;
  const int group = args.n_query_heads / args.n_kv_heads;
  const int rows = group * W;  // row r = (a − h·g)·W + t, as the [Hq, W, d] layout lies
  const float* queries = args.queries + static_cast<int64_t>(h) * rows * d;
  const float* outputs = args.outputs + static_cast<int64_t>(h) * rows * d;
  const float* lse = args.lse + static_cast<int64_t>(h) * rows;
  const float* keys = args.keys + static_cast<int64_t>(h) * L * d;
  const float* values = args.values + static_cast<int64_t>(h) * L * d;
  logits.resize(static_cast<size_t>(rows) * L);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, L, d,
              1.0f / std::sqrt(static_cast<float>(d)), queries, d, keys, d, 0.0f, logits.data(), L);
  if (!args.direct_distance) {
    dots.resize(static_cast<size_t>(rows) * L);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, L, d, 1.0f, outputs, d, values, d,
                0.0f, dots.data(), L);
  }
  std::vector<float> value_norms(L);
  for (int j = 0; j < L; ++j)
    value_norms[j] = squared_norm(values + static_cast<int64_t>(j) * d, d);
  std::vector<double> total(L, 0.0);
  for (int r = 0; r < rows; ++r) {
    const int t = r % W;
    const float* y = outputs + static_cast<int64_t>(r) * d;
    const float y_norm = squared_norm(y, d);
    const int visible = L - W + t + 1;  // row t sees keys j <= L − W + t
    for (int j = 0; j < std::min(visible, L); ++j) {
      float p = std::exp(logits[static_cast<size_t>(r) * L + j] - lse[r]);
      p = std::clamp(p, 0.0f, 1.0f);
      if (args.round_p_to_bf16) p = round_to_bf16(p);
      const float ratio = p / (1.0f - p + 1e-6f);
      const float distance = args.direct_distance
                                 ? squared_distance(y, values + static_cast<int64_t>(j) * d, d)
                                 : std::max(0.0f, y_norm + value_norms[j] -
                                                      2.0f * dots[static_cast<size_t>(r) * L + j]);
      total[j] += static_cast<double>(ratio * ratio * distance);
    }
  }
  float* scores = args.scores + static_cast<int64_t>(h) * L;
  for (int j = 0; j < L; ++j) scores[j] = static_cast<float>(total[j] / group);
}

}  // namespace

void dropkv_scores(const DropKvScoreArgs& args) {
  std::vector<float> logits, dots;
  for (int h = 0; h < args.n_kv_heads; ++h) score_kv_head(args, h, logits, dots);
}

void pool_and_protect(const float* raw, float* pooled, int n_heads, int length, int kernel,
                      bool max_pool, int protect) {
  if (length <= 0) return;
  const int half = kernel / 2;
  for (int h = 0; h < n_heads; ++h) {
    const float* in = raw + static_cast<int64_t>(h) * length;
    float* out = pooled + static_cast<int64_t>(h) * length;
    for (int j = 0; j < length; ++j) {
      float acc = max_pool ? -INFINITY : 0.0f;
      for (int i = std::max(0, j - half); i <= std::min(length - 1, j + half); ++i)
        acc = max_pool ? std::max(acc, in[i]) : acc + in[i];
      out[j] = max_pool ? acc : acc / static_cast<float>(kernel);
    }
    const float best = *std::max_element(out, out + length);
    std::fill(out + std::max(0, length - protect), out + length, best + 1.0f);
  }
}

}  // namespace kvb::kernels
