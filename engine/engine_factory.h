// Picks the Engine backend for a device: "cpu", "cuda", or "auto" (the GPU when this build has
// CUDA and a device is present, the CPU otherwise).
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"

namespace kvb {

// "cpu" or "cuda" for `device`; InputError for another word, or for "cuda" in a build without
// CUDA or on a machine without a GPU (the message says which).
std::string resolve_device(const std::string& device);

// The backend for `device` over `weights` (host f32; they must outlive the engine).
std::unique_ptr<Engine> make_engine(const std::string& device, const ModelWeights& weights);

}  // namespace kvb
