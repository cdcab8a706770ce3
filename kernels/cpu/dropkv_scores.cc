#include "kernels/cpu/dropkv_scores.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvb::kernels {
namespace {

float round_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  bits &= 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace

void dropkv_raw_scores(const DropKvScoreArgs& args) {
  const int d = args.head_dim, L = args.length, W = args.window;
  const int group = args.n_query_heads / args.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int h = 0; h < args.n_kv_heads; ++h) {
    const float* keys = args.keys + static_cast<int64_t>(h) * L * d;
    const float* values = args.values + static_cast<int64_t>(h) * L * d;
    float* scores = args.scores + static_cast<int64_t>(h) * L;
    for (int j = 0; j < L; ++j) {
      const float* k = keys + static_cast<int64_t>(j) * d;
      const float* v = values + static_cast<int64_t>(j) * d;
      float v_norm = 0;
      for (int i = 0; i < d; ++i) v_norm += v[i] * v[i];
      double total = 0;
      for (int a = h * group; a < (h + 1) * group; ++a) {
        for (int t = 0; t < W; ++t) {
          if (j > L - W + t) continue;
          const float* q = args.queries + (static_cast<int64_t>(a) * W + t) * d;
          const float* y = args.outputs + (static_cast<int64_t>(a) * W + t) * d;
          float logit = 0, y_dot_v = 0, y_norm = 0;
          for (int i = 0; i < d; ++i) {
            logit += q[i] * k[i];
            y_dot_v += y[i] * v[i];
            y_norm += y[i] * y[i];
          }
          float p = std::exp(logit * scale - args.lse[a * W + t]);
          p = std::clamp(p, 0.0f, 1.0f);
          if (args.round_p_to_bf16) p = round_to_bf16(p);
          const float weight = (p / (1.0f - p + 1e-6f)) * (p / (1.0f - p + 1e-6f));
          total += weight * std::max(0.0f, y_norm + v_norm - 2.0f * y_dot_v);
        }
      }
      scores[j] = static_cast<float>(total / group);
    }
  }
}

}  // namespace kvb::kernels
