// The model's tensors on the GPU in bf16, in the CUDA engine's fused layouts, and their upload from
// a model file one tensor at a time (engine/weight_source.h) through a bounded pinned staging
// buffer: host memory beyond the file mapping stays at the staging buffer plus one chunk.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/weight_source.h"
#include "kernels/cuda/cuda_utils.h"

namespace kvb {

// wqkv = [wq; wk; wv] and w_gate_up = [w_gate; w_up] stacked by rows ([out, in] each), bqkv the
// same for the biases (absent without qkv_bias).
struct CudaLayer {
  cuda::DeviceBuffer attn_norm, wqkv, bqkv, wo, ffn_norm, w_gate_up, w_down;
};

struct DeviceWeights {
  cuda::DeviceBuffer embedding, output_norm, output;  // output absent when tied to the embedding
  std::vector<CudaLayer> layers;
};

// What a load reports: on stderr a progress line every few seconds (tensor i/N, GB, elapsed) and a
// final line with the load time and the process's peak host RSS.
struct UploadReport {
  int64_t tensors = 0;
  int64_t bytes = 0;  // bf16 bytes written to the device
  double seconds = 0;
  int64_t peak_host_rss_bytes = 0;  // of the whole process so far (peak_rss_bytes()), at the end
};

// Allocates every tensor of `source` on the device and uploads it in bf16 on `stream`, chunk by
// chunk through `staging_bytes` of pinned memory, releasing each chunk's file pages once read.
// cuda::OutOfMemory when the model does not fit.
DeviceWeights upload_weights(const WeightSource& source, cudaStream_t stream,
                             UploadReport* report = nullptr,
                             int64_t staging_bytes = int64_t{128} << 20);

}  // namespace kvb
