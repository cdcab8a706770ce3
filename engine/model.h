// One entry point for every model source: a .gguf file, an HF folder (config.json + *.safetensors +
// tokenizer.json / tokenizer.model) or "preset:NAME" (dummy shapes, random weights, byte
// tokenizer).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "engine/model_config.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"

namespace kvb {

struct LoadedModel {
  std::shared_ptr<const ModelWeights> weights;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::string chat_template;  // a name from engine/chat_template.h ("chatml-smollm2", "llama3.1",
                              // ..., "plain")
  std::string sha256;         // of the model file(s); of "preset:NAME seed=S" for a preset
};

// What load_model builds on the host.
struct LoadOptions {
  // false: no weight is decoded on the host. ModelWeights then holds the config, source and stored
  // dtypes and no layers; a device engine generates a preset's random weights itself
  // (CudaEngine::from_preset) and uploads a file's tensors one at a time from its memory map
  // (CudaEngine::from_source), so an 8B model costs no 32 GB f32 copy on the host.
  bool weights_on_host = true;
  // On the host, weight matrices in the file's encoding (the CPU engine computes on GGUF blocks,
  // f16 and bf16) or dequantised to f32 (the reference the NumPy tests compare against).
  WeightFormat weight_format = WeightFormat::kAsStored;
};

// Loads weights (in options.weight_format, or none on the host: weights_on_host) and tokenizer.
// The GGUF mapping is released before returning. Errors: InputError (missing path, unknown preset
// or architecture), FormatError (malformed file, or a tensor missing or of the wrong shape).
LoadedModel load_model(const std::string& path_or_preset, const LoadOptions& options = {});

// Whether `weights` hold no tensors on the host (LoadOptions::weights_on_host = false): only a
// device engine can run them, generating a preset's or reading the file at weights.source.
inline bool weights_live_on_device_only(const ModelWeights& weights) {
  return weights.layers.empty();
}

// What `kvbench info` shows, read from metadata only (no dequantisation; the tokenizer is built to
// report its kind, and a tokenizer that cannot be built is reported, not thrown).
struct ModelSummary {
  std::string source;  // the path or "preset:NAME"
  std::string format;  // "gguf", "hf-safetensors", "preset"
  ModelConfig config;
  std::string tokenizer_kind;  // Tokenizer::kind() ("bpe:smollm", "spm", ...) or "unusable: <why>"
  std::string chat_template;
  std::map<std::string, int> dtype_counts;  // tensor dtype -> number of tensors in the file(s)
  int64_t n_parameters = 0;                 // elements of all weight tensors
  uint64_t file_bytes = 0;                  // total size of the model file(s); 0 for a preset
};
ModelSummary inspect_model(const std::string& path_or_preset);

// Seed used for the random weights of "preset:NAME" (fixed so that runs are comparable).
inline constexpr uint64_t kPresetSeed = 1234;

}  // namespace kvb
