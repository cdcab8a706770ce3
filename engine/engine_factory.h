// Picks the Engine backend for a device: "cpu", "cuda", or "auto" (the GPU when this build has
// CUDA and a device is present, the CPU otherwise).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/engine.h"

namespace kvb {

// "cpu" or "cuda" for `device`; InputError for another word, or for "cuda" in a build without
// CUDA or on a machine without a GPU (the message says which).
std::string resolve_device(const std::string& device);

// The CPU engine's cache element type when none is asked for (the KV cache section of
// results/cpu-vs-llama-cpp.md measures the three).
constexpr KvDtype kDefaultCpuKvDtype = KvDtype::kF16;

// The backend for `device` over `weights` (they must outlive the engine). `kv_dtype`: the CPU
// engine's cache element type (kDefaultCpuKvDtype when absent); the CUDA engine's cache is bf16,
// and asking it for another is an InputError.
std::unique_ptr<Engine> make_engine(const std::string& device, const ModelWeights& weights,
                                    std::optional<KvDtype> kv_dtype = std::nullopt);

}  // namespace kvb
