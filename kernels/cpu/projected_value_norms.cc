#include "kernels/cpu/projected_value_norms.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvb::kernels {

void projected_value_norms(const ProjectedValueNormsArgs& args) {
  const int g = args.n_query_heads / args.n_kv_heads, d = args.dim, hidden = args.hidden;
  const int inputs = args.n_query_heads * d;
  constexpr int kRows = 1024;  // tokens per product: bounds the [rows, hidden] scratch
  std::vector<float> projected(static_cast<size_t>(std::min(kRows, args.length)) * hidden);
  const int h = args.kv_head;
  float* nu = args.norms;
  std::fill(nu, nu + args.length, 0.0f);
  for (int first = 0; first < args.length; first += kRows) {
    const int rows = std::min(kRows, args.length - first);
    const float* v = args.values + static_cast<int64_t>(first) * d;
    for (int a = h * g; a < (h + 1) * g; ++a) {
      // projected[j, o] = Σ_i v_j[i] · W_o[o, a·d + i]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, hidden, d, 1.0f, v, d,
                  args.output_projection + static_cast<int64_t>(a) * d, inputs, 0.0f,
                  projected.data(), hidden);
      for (int j = 0; j < rows; ++j) {
        float l1 = 0.0f;
        for (int o = 0; o < hidden; ++o)
          l1 += std::fabs(projected[static_cast<size_t>(j) * hidden + o]);
        nu[first + j] += l1 / static_cast<float>(g);
      }
    }
  }
}

}  // namespace kvb::kernels
