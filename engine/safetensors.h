// safetensors files (HF weights, and the tensor inputs of `kvbench select`): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__": {}}, then the data. Memory-mapped; every offset is checked against the file, so a
// truncated or hostile file is a FormatError naming the file and the tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvb {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "I32", "I64" (others are rejected at open)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();

  const std::string& label() const { return label_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensor* find(std::string_view name) const;  // nullptr when absent
  // The tensor converted to f32 (F32/F16/BF16) or i64 (I32/I64); FormatError naming the file and
  // tensor when it is absent or of the other kind. `shape`, when given, receives the tensor's
  // shape.
  std::vector<float> read_f32(std::string_view name, std::vector<int64_t>* shape = nullptr) const;
  std::vector<int64_t> read_i64(std::string_view name, std::vector<int64_t>* shape = nullptr) const;
  std::span<const uint8_t> raw_bytes(const SafetensorsTensor& tensor) const;

 private:
  SafetensorsFile() = default;
  const SafetensorsTensor& require(std::string_view name) const;
  std::string label_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  std::span<const uint8_t> data_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
};

// The weights of an HF folder: model.safetensors, or the shards listed by
// model.safetensors.index.json ("weight_map": {tensor: shard file}).
class SafetensorsModel {
 public:
  static SafetensorsModel open_folder(const std::filesystem::path& folder);
  const SafetensorsFile* file_of(std::string_view name) const;  // nullptr when no shard has it
  std::vector<float> read_f32(std::string_view name, std::vector<int64_t>* shape = nullptr) const;
  bool has(std::string_view name) const { return file_of(name) != nullptr; }
  std::vector<std::filesystem::path> files() const;  // the shard paths, sorted
  std::map<std::string, int> dtype_counts() const;   // dtype -> number of tensors
  int64_t total_elements() const;

 private:
  std::string label_;
  std::vector<std::shared_ptr<const SafetensorsFile>> shards_;
  std::map<std::string, const SafetensorsFile*, std::less<>> by_name_;
};

// Writes f32 tensors as a safetensors file (names sorted, as the map orders them). Used to build
// inputs for `kvbench select` and test folders. InputError if data size != product of the shape.
using F32Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;
void write_safetensors(const std::filesystem::path& path, const F32Tensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace kvb
