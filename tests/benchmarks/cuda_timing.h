// How the CUDA benchmarks in this folder time their work: an event pair with one owner (created
// with the timer, destroyed with it) and one way to read it, and the median of a captured graph's
// replays, so no benchmark leaks events or writes the record / synchronise / elapsed sequence out
// again.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

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

// Median microseconds per launch of `launch(i, stream)` for i in [0, launches), captured into one
// graph and replayed `replays` times after `warmups` untimed replays. Launches that read distinct
// buffers (a layer's weights each) stream them from HBM as the engine does, not from L2.
inline double graph_median_us(const std::function<void(int, cudaStream_t)>& launch, int launches,
                              cudaStream_t stream, int replays = 20, int warmups = 3) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
  for (int i = 0; i < launches; ++i) launch(i, stream);
  cuda::check(cudaStreamEndCapture(stream, &graph), "end capture");
  cuda::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  CudaEventTimer timer;
  std::vector<float> samples;
  for (int rep = 0; rep < warmups + replays; ++rep) {
    const float ms =
        timer.time_ms([&] { cuda::check(cudaGraphLaunch(exec, stream), "replay"); }, stream);
    if (rep >= warmups) samples.push_back(ms);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2] * 1000.0 / launches;
}

}  // namespace kvb::bench
