// The event pair the CUDA benchmarks in this folder time their work with: one owner for the two
// events (created with the timer, destroyed with it) and one way to read them, so no benchmark
// leaks events or writes the record / synchronise / elapsed sequence out again.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_utils.h"

namespace kvb::bench {

class CudaEventTimer {
 public:
  CudaEventTimer() {
    cuda::check(cudaEventCreate(&start_), "cudaEventCreate");
    cuda::check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CudaEventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  CudaEventTimer(const CudaEventTimer&) = delete;
  CudaEventTimer& operator=(const CudaEventTimer&) = delete;

  void start(cudaStream_t stream = nullptr) {
    cuda::check(cudaEventRecord(start_, stream), "cudaEventRecord");
  }
  // Records the stop on `stream`, waits for it and returns the milliseconds since start().
  float stop_ms(cudaStream_t stream = nullptr) {
    cuda::check(cudaEventRecord(stop_, stream), "cudaEventRecord");
    cuda::check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }
  // The milliseconds of whatever `work` queues on `stream`.
  template <class Work>
  float time_ms(Work&& work, cudaStream_t stream = nullptr) {
    start(stream);
    work();
    return stop_ms(stream);
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace kvb::bench
