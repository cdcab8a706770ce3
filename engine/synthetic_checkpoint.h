// A synthetic HF checkpoint: a model folder in the layout of the real ones (config.json,
// model-0000i-of-0000N.safetensors shards in bf16, model.safetensors.index.json, a byte-level BPE
// tokenizer.json + tokenizer_config.json) with seeded random weights of a config's shapes. It
// exercises the loaders on 8B-sized files without downloading one (no accuracy meaning). Written
// as a stream: host memory stays at one chunk of values, whatever the model size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/model_config.h"

namespace kvb {

struct SyntheticCheckpointOptions {
  uint64_t seed = 1;
  int64_t shard_bytes = int64_t{5} << 30;  // a shard closes before passing this (HF: 5 GB)
  bool progress = false;                   // a line on stderr per shard
};

// Writes the folder (created if needed; existing checkpoint files are overwritten). The same seed
// gives the same bytes. Weights are uniform: linear weights ±sqrt(3/fan_in), the embedding
// ±sqrt(3), norm gains 1 ± 0.25, biases ±0.1. InputError when the config's vocabulary is smaller
// than the tokenizer's 256 byte tokens plus BOS and EOS, or when the folder cannot be written.
// Returns the files written.
std::vector<std::filesystem::path> write_synthetic_checkpoint(
    const ModelConfig& config, const std::filesystem::path& folder,
    const SyntheticCheckpointOptions& options = {});

}  // namespace kvb
