// Dense linear algebra of the CPU engine. Weights are row-major [out, in] (y = W x).
// Prefill multiplies a whole chunk with one OpenBLAS sgemm; decode multiplies one vector with a
// TBB-threaded matrix-vector product (decode is memory-bound: every weight byte is read once).
#pragma once

#include <cstdint>

namespace kvb::kernels {

// y[n, out] = x[n, in] · W[out, in]^T (+ bias[out] when bias != nullptr). sgemm.
void matmul(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias,
            float* y);

// y[out] = W[out, in] · x[in] (+ bias). Rows are split across TBB worker threads.
void matvec(const float* w, int64_t out, int64_t in, const float* x, const float* bias, float* y);

// Σ a[i] b[i] with eight independent partial sums (vectorises without -ffast-math).
float dot(const float* a, const float* b, int64_t n);

// Sets OpenBLAS to one thread while alive (for sgemm calls made from inside TBB tasks, which are
// already parallel), and restores the previous thread count after.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int previous_threads_;
};

// Threads OpenBLAS uses for large products (reported by `kvbench bench`), and setting them.
int blas_threads();
void set_blas_threads(int threads);

}  // namespace kvb::kernels
