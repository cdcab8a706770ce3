#include "engine/cpu/blas.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

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

double parallel_read_sum(const float* data, size_t n, size_t grain) {
  return tbb::parallel_reduce(
      tbb::blocked_range<size_t>(0, n, grain), 0.0,
      [&](const tbb::blocked_range<size_t>& r, double acc) {
        float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (size_t i = r.begin(); i + 8 <= r.end(); i += 8)
          for (int l = 0; l < 8; ++l) partial[l] += data[i + l];
        for (float p : partial) acc += p;
        return acc;
      },
      [](double a, double b) { return a + b; });
}

double measure_read_bandwidth(size_t bytes) {
  using Clock = std::chrono::steady_clock;
  const std::vector<float> buffer(bytes / sizeof(float), 1.0f);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = Clock::now();
    const double sum = parallel_read_sum(buffer.data(), buffer.size(), size_t(1) << 16);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (sum > 0) best = std::max(best, buffer.size() * sizeof(float) / seconds);
  }
  return best;
}

}  // namespace kvb
