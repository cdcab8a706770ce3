// GGUF reader: memory-mapped, every offset and size bounds-checked. A truncated or hostile file is
// a FormatError naming the file and the field, never a crash. Layout: docs/engine.md §1.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kvb {

// clang-format off
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13,
  kQ6_K = 14, kBF16 = 30,
};
// clang-format on
const char* ggml_type_name(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // ne[0] is contiguous (columns); linear weights are [n_in, n_out]
  uint32_t type = 0;           // GgmlType value
  uint64_t offset = 0;         // into the data blob
  uint64_t size_bytes = 0;
  int64_t elements() const;
};

// A metadata value: scalar, string or array (arrays of arrays are rejected).
using GgufArray = std::variant<std::vector<int64_t>, std::vector<double>, std::vector<std::string>,
                               std::vector<bool>>;
using GgufValue = std::variant<int64_t, uint64_t, double, bool, std::string, GgufArray>;

class GgufFile {
 public:
  // Maps and parses the header, metadata and tensor infos; throws FormatError / InputError.
  static std::shared_ptr<const GgufFile> open(const std::filesystem::path& path);
  // Parses an in-memory image (used by the fuzzer); the bytes must outlive the object.
  static std::shared_ptr<const GgufFile> parse(std::span<const uint8_t> bytes, std::string label);
  ~GgufFile();

  const std::string& label() const { return label_; }
  // Whether the bytes are a file mapping (open) rather than a caller's image (parse).
  bool file_mapped() const { return mapping_ != nullptr; }
  uint32_t version() const { return version_; }
  bool has(std::string_view key) const;
  const GgufValue* find(std::string_view key) const;
  // Typed getters throw FormatError naming the key when absent or of another type.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double fallback) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(std::string_view name) const;  // nullptr when absent
  std::span<const uint8_t> tensor_bytes(const GgufTensorInfo& info) const;

 private:
  GgufFile() = default;
  void parse_image(std::span<const uint8_t> bytes);  // fills everything below from the image
  std::string label_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::span<const uint8_t> data_;  // the tensor data blob
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
};

}  // namespace kvb
