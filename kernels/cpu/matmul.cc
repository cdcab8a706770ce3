#include "kernels/cpu/matmul.h"

#include <cblas.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace kvb::kernels {

void matmul(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias,
            float* y) {
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < out; ++c) y[r * out + c] = bias[c];
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(out),
              static_cast<int>(in), 1.0f, x, static_cast<int>(in), w, static_cast<int>(in), beta, y,
              static_cast<int>(out));
}

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void matvec(const float* w, int64_t out, int64_t in, const float* x, const float* bias, float* y) {
  // Blocks of 64 rows: large enough to amortise task overhead, small enough to balance 2-128 cores.
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, out, 64),
                    [&](const tbb::blocked_range<int64_t>& rows) {
                      for (int64_t r = rows.begin(); r < rows.end(); ++r) {
                        const float value = dot(w + r * in, x, in);
                        y[r] = bias != nullptr ? value + bias[r] : value;
                      }
                    });
}

SingleThreadedBlas::SingleThreadedBlas() : previous_threads_(openblas_get_num_threads()) {
  openblas_set_num_threads(1);
}
SingleThreadedBlas::~SingleThreadedBlas() { openblas_set_num_threads(previous_threads_); }

int blas_threads() { return openblas_get_num_threads(); }
void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

}  // namespace kvb::kernels
