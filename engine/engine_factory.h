// Picks the Engine backend for a device: "cpu", "cuda", or "auto" (the GPU when this build has
// CUDA and a device is present, the CPU otherwise).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/cpu/device_numerics.h"
#include "engine/engine.h"

namespace kvb {

// "cpu" or "cuda" for `device`; InputError for another word, or for "cuda" in a build without
// CUDA or on a machine without a GPU (the message says which).
std::string resolve_device(const std::string& device);

// The CPU engine's cache element type when none is asked for (the KV cache section of
// results/cpu-vs-llama-cpp.md measures the three).
constexpr KvDtype kDefaultCpuKvDtype = KvDtype::kF16;

// What the CPU engine is asked for beyond the model. The CUDA engine's cache is bf16 and its
// numerics are its own, so on the GPU only those values (or none) are accepted.
struct CpuEngineOptions {
  std::optional<KvDtype> kv_dtype;           // the cache's element type (nullopt: cpu_kv_dtype)
  std::optional<ForwardPrecision> numerics;  // nullopt: f32 (engine/cpu/device_numerics.h)
};

// The cache element type the CPU engine gets: the one asked for, else bf16 under bf16-device
// numerics (the GPU's cache, which an f16 one would round again), else kDefaultCpuKvDtype.
KvDtype cpu_kv_dtype(const CpuEngineOptions& options);

// The backend for `device` over `weights` (they must outlive the engine), the CPU engine built as
// `cpu` says. Asking the CUDA engine for another cache than bf16 or for f32 numerics is an
// InputError that names the option.
std::unique_ptr<Engine> make_engine(const std::string& device, const ModelWeights& weights,
                                    const CpuEngineOptions& cpu = {});

}  // namespace kvb
