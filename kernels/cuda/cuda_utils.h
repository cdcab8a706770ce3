// Host-side helpers shared by the CUDA kernels and the CUDA engine: error checks that name the
// call, a device buffer that frees itself, device presence (so tests can skip without a GPU).
// Plain C++ header: includable from .cc files compiled by the host compiler.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace kvb::cuda {

// Throws std::runtime_error naming the failed call; out-of-memory is reported as such so callers
// can turn it into a CapacityError that names what did not fit.
void check(cudaError_t status, const char* what);

class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(const std::string& what, size_t bytes)
      : std::runtime_error(what), bytes_requested(bytes) {}
  size_t bytes_requested;
};

// An A/B switch for timing runs: on unless the environment variable `name` is set to "0".
bool env_switch_on(const char* name);
// An opt-in switch: on only when `name` is set to "1".
bool env_switch_set(const char* name);

// Whether every pointer is a multiple of `bytes` (the vectorised kernels' 8- and 16-byte accesses).
template <typename... T>
bool aligned_to(uintptr_t bytes, const T*... pointers) {
  return ((reinterpret_cast<uintptr_t>(pointers) % bytes == 0) && ...);
}

// True when a CUDA device is present and usable (tests call this to GTEST_SKIP cleanly).
bool device_available();

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  size_t total_bytes = 0;
  size_t free_bytes = 0;
  int l2_bytes = 0;
};
DeviceInfo device_info();

// An owning device allocation (cudaMalloc); movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const char* label = "buffer");
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

  // Synchronous: returns once the bytes are on the device, ordered before any later launch.
  void upload(const void* host, size_t bytes, size_t offset = 0);
  // Synchronous; callers first wait for the stream that wrote the buffer.
  void download(void* host, size_t bytes, size_t offset = 0) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Bytes currently allocated through DeviceBuffer and the peak since the last reset (per process).
size_t device_bytes_in_use();
size_t device_bytes_peak();
void reset_device_peak();

}  // namespace kvb::cuda
