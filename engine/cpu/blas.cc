#include "engine/cpu/blas.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/cpu/matmul.h"

namespace kvb {

int cpu_blas_threads() { return kernels::blas_threads(); }

void set_cpu_blas_threads(int threads) { kernels::set_blas_threads(threads); }

double measure_sgemm_flops(int rows, int in, int out) {
  using Clock = std::chrono::steady_clock;
  std::vector<float> x(size_t(rows) * in, 0.5f), w(size_t(out) * in, 0.25f), y(size_t(rows) * out);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = Clock::now();
    kernels::matmul(x.data(), rows, in, w.data(), out, nullptr, y.data());
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, 2.0 * rows * in * out / seconds);
  }
  return best;
}

}  // namespace kvb
