// Dummy presets: the exact shapes of the paper models with seeded random weights, for latency and
// memory work (never for accuracy; ModelConfig::dummy_weights marks them). Shapes from each model's
// config.json on its HF model card.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_config.h"
#include "engine/weights.h"

namespace kvb {

// "llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "tiny-llama".
std::vector<std::string> preset_names();
// The preset's config; InputError listing the known names for any other name.
ModelConfig preset_config(const std::string& name);
// Weights of `config`'s shapes filled from `seed`: linear weights uniform with std 1/sqrt(fan_in),
// embeddings std 1, norm weights 1, biases std 0.02. Deterministic for a seed, whatever the
// threads.
std::shared_ptr<ModelWeights> random_weights(const ModelConfig& config, uint64_t seed);

// The SplitMix64 mixer the seeded weights are drawn with (element i: mix(stream ^ mix(i))).
uint64_t splitmix64(uint64_t x);

}  // namespace kvb
