// The weights of a model file, one tensor at a time: the single mapping from GGUF (llama.cpp) and
// HF safetensors tensor names to the engine's tensors (engine/weights.h), read from the file's
// memory map into a caller's buffer as f32, bf16 or the stored encoding. The host loader
// (weights_loader.h) fills ModelWeights through it, keeping weight matrices in the stored encoding
// for the CPU engine; a device engine uploads through it without an f32 copy of the model.
//
// Every tensor comes out in the engine's layout: row-major [rows, cols] = [out, in] for a linear
// weight, [n, 1] for a vector, Q/K rows in HF rotate_half order (a llama.cpp GGUF's adjacent-pair
// permutation is undone row by row as it is read; weights.h explains the RoPE layout).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/model_config.h"

namespace kvb {

// Which engine tensor a file tensor fills (the fields of ModelWeights / LayerWeights).
// clang-format off
enum class WeightRole {
  kTokenEmbedding, kOutputNorm, kOutput,  // model-level
  kAttnNorm, kWq, kWk, kWv, kBq, kBk, kBv, kWo, kFfnNorm, kWGate, kWUp, kWDown,  // per layer
};
// clang-format on

struct WeightTensor {
  WeightRole role = WeightRole::kTokenEmbedding;
  int layer = -1;              // -1 for the model-level tensors
  std::string name;            // in the file
  int64_t rows = 0, cols = 0;  // the engine's layout
  uint32_t stored_type = 0;    // GgmlType of the stored data (safetensors F32/F16/BF16 map to it)
  int rope_heads = 0;  // > 0: stored in llama.cpp's adjacent-pair order per head, undone on read
  int64_t elements() const { return rows * cols; }
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  const ModelConfig& config() const { return config_; }
  const std::string& label() const { return label_; }
  // The tensors present, in load order (embedding, output norm, [output], then layer by layer).
  const std::vector<WeightTensor>& tensors() const { return tensors_; }
  // "bf16 x 291": stored dtypes, most frequent first (ModelWeights::weight_dtypes).
  std::string dtypes() const;
  int64_t total_elements() const;

  // Rows [first_row, first_row + rows) of `tensor`, decoded into `out` (rows * cols values).
  void read_rows(const WeightTensor& tensor, int64_t first_row, int64_t rows, float* out) const;
  void read_rows_bf16(const WeightTensor& tensor, int64_t first_row, int64_t rows,
                      uint16_t* out) const;
  // Bytes of one row of `tensor` in its stored encoding (stored_type: f32, f16, bf16 or whole
  // GGUF blocks).
  int64_t stored_row_bytes(const WeightTensor& tensor) const;
  // Rows [first_row, first_row + rows) of `tensor` as stored, not decoded, copied into `out`
  // (rows * stored_row_bytes(tensor) bytes) in the engine's row order: what the CPU engine keeps
  // to compute on the file's blocks (engine/weight_matrix.h).
  void read_stored_rows(const WeightTensor& tensor, int64_t first_row, int64_t rows,
                        uint8_t* out) const;
  // Memory-map hints for a load that reads each tensor once: prefetch() asks the kernel to start
  // reading a tensor's pages ahead of read_rows; release() drops the stored pages of rows
  // [first_row, first_row + rows) (rows < 0: to the end) from this process's resident set once
  // they have been read (the file stays in the page cache), so host memory stays bounded while a
  // large model streams through. A tensor stored in permuted row order (rope_heads) is released
  // only as a whole. Both are no-ops for a source over bytes that are not a file mapping.
  void prefetch(const WeightTensor& tensor) const;
  void release(const WeightTensor& tensor, int64_t first_row = 0, int64_t rows = -1) const;

 protected:
  WeightSource(ModelConfig config, std::string label, bool file_mapped)
      : config_(std::move(config)), label_(std::move(label)), file_mapped_(file_mapped) {}
  // The stored bytes of a tensor (bounds-checked by the file reader).
  virtual std::span<const uint8_t> stored_bytes(const WeightTensor& tensor) const = 0;
  void add(WeightTensor tensor) { tensors_.push_back(std::move(tensor)); }

 private:
  // The stored bytes of the engine's row `engine_row` within the tensor's bytes `all`.
  static std::span<const uint8_t> stored_row(std::span<const uint8_t> all,
                                             const WeightTensor& tensor, int64_t engine_row);
  ModelConfig config_;
  std::string label_;
  bool file_mapped_ = false;
  std::vector<WeightTensor> tensors_;
};

// Over a GGUF file, which must outlive the source.
// FormatError naming the file and the tensor when one is missing or has the wrong shape.
std::unique_ptr<WeightSource> gguf_weight_source(const GgufFile& gguf);
// Over an HF folder (config.json + model.safetensors or a sharded index).
std::unique_ptr<WeightSource> hf_weight_source(const std::filesystem::path& folder);
// The tensors an HF folder of `config` holds, in load order (names and engine shapes; the HF shape
// is [rows, cols], or [rows] for a vector): what a writer of synthetic checkpoints writes.
std::vector<WeightTensor> hf_tensor_layout(const ModelConfig& config);
// A .gguf file or an HF folder by path; the file mappings live as long as the source, and pages
// can be prefetched and released as tensors are read.
std::unique_ptr<WeightSource> open_weight_source(const std::filesystem::path& path);

}  // namespace kvb
