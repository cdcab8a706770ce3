// Programmatic dependent launch (Hopper): a kernel launched with launch_overlapped() may be
// scheduled while the previous kernel of its stream is still finishing, so the launch latency and
// the ramp-up of consecutive small decode kernels overlap instead of adding up (a decode step is
// ~300 launches). Correctness rests on one rule: every kernel launched this way calls
// wait_for_predecessor() before it reads anything an earlier kernel may still be writing; that
// waits until the previous grid has completed and its writes are visible. Before the wait a kernel
// reads only what no kernel writes (weights, cache offsets) or what it shows to be settled (the
// decode attention's first tile), which takes a memory round trip off a latency-bound kernel.
// allow_successor_launch() lets the next kernel be scheduled once every block of this one has
// started. Both are no-ops below sm_90 and when the kernel was launched normally, so a kernel can
// be launched either way.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_utils.h"

namespace kvb::cuda {

__device__ __forceinline__ void wait_for_predecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_successor_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// A load issued where it is written: nvcc would otherwise sink a load whose value is needed only
// later down to its use, putting its round trip (~1 µs from L2) on the block's critical path after
// others (the loads right after wait_for_predecessor()).
__device__ __forceinline__ int load_now(const int* address) {
  int value;
  asm volatile("ld.global.s32 %0, [%1];" : "=r"(value) : "l"(address));
  return value;
}

// The same for a 2-byte value (e.g. a bf16's bits).
__device__ __forceinline__ unsigned short load_now(const unsigned short* address) {
  unsigned short value;
  asm volatile("ld.global.u16 %0, [%1];" : "=h"(value) : "l"(address));
  return value;
}

// Opts `kernel` into `shared_bytes` of dynamic shared memory (launches above 48 KB need it).
// Callers do it once per kernel (a static).
template <typename... Params>
void allow_dynamic_shared_memory(void (*kernel)(Params...), size_t shared_bytes, const char* name) {
  check(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)),
      (std::string("cudaFuncSetAttribute(") + name + ")").c_str());
}

// Opts `kernel` into `shared_bytes` of dynamic shared memory and returns how many of its thread
// blocks of `threads` are resident on one SM at once (at least 1): the decode kernels size their
// split counts to that. Callers keep the answer in a static (one query per kernel).
template <typename... Params>
int resident_blocks_per_sm(void (*kernel)(Params...), int threads, size_t shared_bytes,
                           const char* name) {
  allow_dynamic_shared_memory(kernel, shared_bytes, name);
  int count = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, kernel, threads, shared_bytes),
        (std::string("cudaOccupancyMaxActiveBlocksPerMultiprocessor(") + name + ")").c_str());
  return std::max(1, count);
}

// Launches `kernel` with programmatic stream serialisation (captured into CUDA graphs as a
// programmatic edge). Set KVB_CUDA_PDL=0 to launch normally (for A/B timing).
bool overlapped_launch_enabled();

// Whether the decode attention kernels (decode_mma_kernel, the ART walk) issue their first tile's
// copy before waiting for the predecessor. Set KVB_CUDA_EARLY_TILE=0 to turn it off (A/B timing).
bool early_tile_enabled();

// As launch_overlapped, in thread-block clusters of `cluster_x` blocks along x (gridDim.x a
// multiple of it; sm_90, see cluster_launch_available()).
template <typename... Params, typename... Args>
void launch_overlapped_clusters(void (*kernel)(Params...), dim3 grid, dim3 block,
                                size_t shared_bytes, cudaStream_t stream, const char* name,
                                int cluster_x, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned count = 0;
  if (cluster_x > 1) {
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = unsigned(cluster_x);
    attribute[count].val.clusterDim.y = 1;
    attribute[count].val.clusterDim.z = 1;
    ++count;
  }
  if (overlapped_launch_enabled()) {
    attribute[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attribute;
  config.numAttrs = count;
  check(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...), name);
}

template <typename... Params, typename... Args>
void launch_overlapped(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                       cudaStream_t stream, const char* name, Args&&... args) {
  launch_overlapped_clusters(kernel, grid, block, shared_bytes, stream, name, 1,
                             std::forward<Args>(args)...);
}

// Whether the current device launches thread-block clusters (compute capability 9.0 and up).
bool cluster_launch_available();

}  // namespace kvb::cuda
