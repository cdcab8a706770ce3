#include "kernels/cpu/window_attention_sums.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/dequantize.h"

namespace kvb::kernels {
namespace {

// q · k in dimension order, one product and one sum per term: the order the CUDA twin takes.
float dot_in_order(const float* q, const float* k, int d) {
  float total = 0;
  for (int i = 0; i < d; ++i) total += q[i] * k[i];
  return total;
}

}  // namespace

float reference_bf16_logit(float product, float root) {
  return round_to_bf16(round_to_bf16(product) / root);
}

void window_softmax(float* logits, int n) {
  if (n <= 0) return;
  const float top = *std::max_element(logits, logits + n);
  float total = 0;
  for (int j = 0; j < n; ++j) {
    logits[j] = std::exp(logits[j] - top);
    total += logits[j];
  }
  for (int j = 0; j < n; ++j) logits[j] /= total;
}

void window_attention_sums(const WindowAttentionSumsArgs& args) {
  if (args.n_kv_heads <= 0 || args.n_query_heads % args.n_kv_heads != 0)
    throw std::invalid_argument("window_attention_sums: " + std::to_string(args.n_query_heads) +
                                " query heads are not a multiple of " +
                                std::to_string(args.n_kv_heads) + " KV heads");
  const int L = args.length, d = args.head_dim;
  if (L <= 0) return;
  if (args.kv_head_stride < int64_t(L) * d || args.sums_head_stride < L)
    throw std::invalid_argument("window_attention_sums: strides too short for " +
                                std::to_string(L) + " keys of " + std::to_string(d) +
                                " (kv_head_stride >= L*d, sums_head_stride >= L)");
  const int w = std::clamp(args.window, 0, L);
  const int first_row = args.window - w;  // rows before it lie before the prompt
  const int group = args.n_query_heads / args.n_kv_heads;
  const bool casts = args.reference_bf16_casts;
  const float root = std::sqrt(static_cast<float>(d));
  tbb::parallel_for(0, args.n_query_heads, [&](int a) {
    const float* keys = args.keys + static_cast<int64_t>(a / group) * args.kv_head_stride;
    float* sums = args.sums + static_cast<int64_t>(a) * args.sums_head_stride;
    std::fill(sums, sums + L, 0.0f);
    std::vector<float> logits(L);
    for (int t = 0; t < w; ++t) {
      const float* q = args.queries + static_cast<int64_t>(first_row + t) * args.query_row_stride +
                       static_cast<int64_t>(a) * args.query_head_stride;
      const int visible = L - w + t + 1;
      for (int j = 0; j < visible; ++j) {
        const float product = dot_in_order(q, keys + static_cast<int64_t>(j) * d, d);
        logits[j] = casts ? reference_bf16_logit(product, root) : product / root;
      }
      window_softmax(logits.data(), visible);
      for (int j = 0; j < visible; ++j) sums[j] += casts ? round_to_bf16(logits[j]) : logits[j];
    }
  });
}

}  // namespace kvb::kernels
