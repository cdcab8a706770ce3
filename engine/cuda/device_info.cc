#include "engine/cuda/device_info.h"

#include <cublas_v2.h>

#include "kernels/cuda/cuda_utils.h"
#include "kernels/cuda/transformer_ops.h"

namespace kvb {

CudaDeviceInfo cuda_device_info() {
  const cuda::DeviceInfo device = cuda::device_info();
  return {device.name, device.sm_count, device.total_bytes};
}

double measure_cuda_read_bandwidth_gbs(size_t bytes, int repeats) {
  return cuda::measure_read_bandwidth_gbs(bytes, repeats);
}

double measure_cuda_gemm_tflops(int size, int repeats) {
  cublasHandle_t handle;
  cublasCreate(&handle);
  const double tflops = cuda::measure_gemm_tflops(handle, size, repeats);
  cublasDestroy(handle);
  return tflops;
}

}  // namespace kvb
