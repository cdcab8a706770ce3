// The GPU as `kvbench bench` reports it: what the device is, and the ceilings its figures are
// taken against (read bandwidth, bf16 GEMM rate), measured in the same process. The engine's face
// of the device queries and calibration kernels of kernels/cuda (cuda_utils.h, transformer_ops.h),
// so that the harness reaches them through the engine. Built only with CUDA (KVB_HAVE_CUDA).
#pragma once

#include <cstddef>
#include <string>

namespace kvb {

struct CudaDeviceInfo {
  std::string name;
  int sm_count = 0;
  size_t total_bytes = 0;
};

// The current device; call only where cuda_device_available() (engine/cuda/cuda_engine.h).
CudaDeviceInfo cuda_device_info();

// Reads `bytes` of device memory and returns the achieved GB/s (best of `repeats`).
double measure_cuda_read_bandwidth_gbs(size_t bytes, int repeats);

// bf16 GEMM rate in TFLOP/s at m=n=k=`size` (best of `repeats`), on a cuBLAS handle of its own.
double measure_cuda_gemm_tflops(int size, int repeats);

}  // namespace kvb
