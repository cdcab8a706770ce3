#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_utils.h"

namespace kvb::cuda {
namespace {
// Allocation accounting is process-wide by nature (it mirrors the device allocator's state).
std::atomic<size_t> g_in_use{0};
std::atomic<size_t> g_peak{0};
}  // namespace

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string("CUDA error in ") + what + ": " +
                           cudaGetErrorString(status));
}

bool env_switch_on(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

bool env_switch_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

bool overlapped_launch_enabled() {
  // Read once: a process-wide launch mode, so that a captured graph and its replays agree.
  static const bool enabled = env_switch_on("KVB_CUDA_PDL");
  return enabled;
}

bool early_tile_enabled() {
  static const bool enabled = env_switch_on("KVB_CUDA_EARLY_TILE");
  return enabled;
}

bool cluster_launch_available() {
  static const bool available = [] {
    int device = 0, supported = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&supported, cudaDevAttrClusterLaunch, device) == cudaSuccess &&
           supported != 0;
  }();
  return available;
}

bool device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

DeviceInfo device_info() {
  DeviceInfo info;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.l2_bytes = prop.l2CacheSize;
  check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  return info;
}

DeviceBuffer::DeviceBuffer(size_t bytes, const char* label) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    data_ = nullptr;
    throw OutOfMemory(std::string("out of GPU memory allocating ") + label + " (" +
                          std::to_string(bytes >> 20) + " MiB)",
                      bytes);
  }
  check(status, "cudaMalloc");
  const size_t now = g_in_use += bytes;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) {
    cudaFree(data_);
    g_in_use -= bytes_;
  }
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) {
      cudaFree(data_);
      g_in_use -= bytes_;
    }
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  check(cudaMemcpy(static_cast<char*>(data_) + offset, host, bytes, cudaMemcpyHostToDevice),
        "cudaMemcpy H2D");
  // From pageable memory cudaMemcpy may return before its DMA has landed, and the engines' streams
  // are non-blocking (no implicit order with the default stream): without this wait a kernel
  // queued next could read the buffer's old contents (stale tokens, lengths or row lists).
  check(cudaDeviceSynchronize(), "cudaMemcpy H2D completion");
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  check(cudaMemcpy(host, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost),
        "cudaMemcpy D2H");
}

size_t device_bytes_in_use() { return g_in_use.load(); }
size_t device_bytes_peak() { return g_peak.load(); }
void reset_device_peak() { g_peak = g_in_use.load(); }

}  // namespace kvb::cuda
