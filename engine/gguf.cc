// GGUF reader. The container layout (docs/engine.md §1) is parsed with a cursor that checks
// every read against the end of the image, and every count against the bytes that remain, so that a
// truncated or hostile file fails with a FormatError naming the file and the field.
#include "engine/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include "common/errors.h"

namespace kvb {
namespace {

// GGUF metadata value types (gguf.h: enum gguf_type).
enum GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32v = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxStringBytes = 1ull << 30;

struct TypeTraits {
  const char* name;
  uint32_t block_elements;
  uint32_t block_bytes;
};

// Block sizes of the ggml types this reader can size (ggml-common.h). Only the types in GgmlType
// can be dequantised; the others are sized so that `info` can still describe such files.
const TypeTraits* type_traits(uint32_t type) {
  static const TypeTraits kF32{"f32", 1, 4}, kF16{"f16", 1, 2}, kQ4_0{"q4_0", 32, 18},
      kQ4_1{"q4_1", 32, 20}, kQ5_0{"q5_0", 32, 22}, kQ5_1{"q5_1", 32, 24}, kQ8_0{"q8_0", 32, 34},
      kQ8_1{"q8_1", 32, 36}, kQ2_K{"q2_K", 256, 84}, kQ3_K{"q3_K", 256, 110},
      kQ4_K{"q4_K", 256, 144}, kQ5_K{"q5_K", 256, 176}, kQ6_K{"q6_K", 256, 210},
      kQ8_K{"q8_K", 256, 292}, kI8{"i8", 1, 1}, kI16{"i16", 1, 2}, kI32{"i32", 1, 4},
      kI64{"i64", 1, 8}, kF64{"f64", 1, 8}, kBF16{"bf16", 1, 2};
  switch (type) {
    case 0:
      return &kF32;
    case 1:
      return &kF16;
    case 2:
      return &kQ4_0;
    case 3:
      return &kQ4_1;
    case 6:
      return &kQ5_0;
    case 7:
      return &kQ5_1;
    case 8:
      return &kQ8_0;
    case 9:
      return &kQ8_1;
    case 10:
      return &kQ2_K;
    case 11:
      return &kQ3_K;
    case 12:
      return &kQ4_K;
    case 13:
      return &kQ5_K;
    case 14:
      return &kQ6_K;
    case 15:
      return &kQ8_K;
    case 24:
      return &kI8;
    case 25:
      return &kI16;
    case 26:
      return &kI32;
    case 27:
      return &kI64;
    case 28:
      return &kF64;
    case 30:
      return &kBF16;
    default:
      return nullptr;
  }
}

// Bounds-checked little-endian reader over the image.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& label) : bytes_(bytes), label_(label) {}

  size_t position() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw FormatError(label_ + ": GGUF field " + field + ": " + problem +
                      " (the file is corrupt or truncated; re-download or re-convert it)");
  }

  void need(uint64_t n, const std::string& field) const {
    if (n > remaining())
      fail(field, "needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                      " but the file has only " + std::to_string(remaining()) + " left");
  }

  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(const std::string& field) {
    const uint64_t length = read<uint64_t>(field + " (string length)");
    if (length > kMaxStringBytes) fail(field, "absurd string length " + std::to_string(length));
    need(length, field + " (string bytes)");
    std::string text(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return text;
  }

  // Rejects a count that could not fit in the bytes left, before anything is allocated for it.
  void check_count(uint64_t count, uint64_t min_bytes_each, const std::string& field) const {
    if (min_bytes_each > 0 && count > remaining() / min_bytes_each)
      fail(field, "count " + std::to_string(count) + " cannot fit in the " +
                      std::to_string(remaining()) + " bytes left");
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& label_;
  size_t pos_ = 0;
};

uint64_t scalar_size(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32v:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    case kString:
      return 8;  // at least its length prefix
    default:
      return 0;
  }
}

GgufValue read_scalar(Cursor& cursor, uint32_t type, const std::string& field) {
  switch (type) {
    case kU8:
      return int64_t{cursor.read<uint8_t>(field)};
    case kI8:
      return int64_t{cursor.read<int8_t>(field)};
    case kU16:
      return int64_t{cursor.read<uint16_t>(field)};
    case kI16:
      return int64_t{cursor.read<int16_t>(field)};
    case kU32:
      return int64_t{cursor.read<uint32_t>(field)};
    case kI32:
      return int64_t{cursor.read<int32_t>(field)};
    case kU64:
      return cursor.read<uint64_t>(field);
    case kI64:
      return cursor.read<int64_t>(field);
    case kF32v:
      return double{cursor.read<float>(field)};
    case kF64:
      return cursor.read<double>(field);
    case kBool: {
      const uint8_t b = cursor.read<uint8_t>(field);
      if (b > 1) cursor.fail(field, "bool value " + std::to_string(b) + " is neither 0 nor 1");
      return b == 1;
    }
    case kString:
      return cursor.read_string(field);
    default:
      cursor.fail(field, "unknown value type " + std::to_string(type));
  }
}

GgufArray read_array(Cursor& cursor, const std::string& field) {
  const uint32_t elem_type = cursor.read<uint32_t>(field + " (array element type)");
  const uint64_t count = cursor.read<uint64_t>(field + " (array length)");
  if (elem_type == kArray) cursor.fail(field, "arrays of arrays are not supported");
  const uint64_t elem_size = scalar_size(elem_type);
  if (elem_size == 0) cursor.fail(field, "unknown array element type " + std::to_string(elem_type));
  cursor.check_count(count, elem_size, field + " (array length)");
  switch (elem_type) {
    case kString: {
      std::vector<std::string> out;
      out.reserve(count);
      for (uint64_t i = 0; i < count; ++i) out.push_back(cursor.read_string(field));
      return out;
    }
    case kF32v:
    case kF64: {
      std::vector<double> out;
      out.reserve(count);
      for (uint64_t i = 0; i < count; ++i)
        out.push_back(std::get<double>(read_scalar(cursor, elem_type, field)));
      return out;
    }
    case kBool: {
      std::vector<bool> out;
      out.reserve(count);
      for (uint64_t i = 0; i < count; ++i)
        out.push_back(std::get<bool>(read_scalar(cursor, elem_type, field)));
      return out;
    }
    default: {
      std::vector<int64_t> out;
      out.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        const GgufValue v = read_scalar(cursor, elem_type, field);
        if (const auto* u = std::get_if<uint64_t>(&v)) {
          if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            cursor.fail(field, "uint64 array element out of range");
          out.push_back(static_cast<int64_t>(*u));
        } else {
          out.push_back(std::get<int64_t>(v));
        }
      }
      return out;
    }
  }
}

std::string describe(const GgufValue& value) {
  switch (value.index()) {
    case 0:
      return "an integer";
    case 1:
      return "an unsigned integer";
    case 2:
      return "a float";
    case 3:
      return "a bool";
    case 4:
      return "a string";
    default:
      return "an array";
  }
}

}  // namespace

const char* ggml_type_name(uint32_t type) {
  const TypeTraits* traits = type_traits(type);
  return traits ? traits->name : "unknown";
}

int64_t GgufTensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::filesystem::path& path) {
  const std::string label = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(label + ": no such file (give the path of a .gguf model file)");
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(label + ": not a regular file (give the path of a .gguf model file)");
  const int fd = ::open(label.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(label + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw InputError(label + ": cannot stat: " + std::strerror(errno));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 4) {
    ::close(fd);
    throw FormatError(label + ": not a GGUF file (only " + std::to_string(size) +
                      " bytes; a GGUF file starts with the magic \"GGUF\")");
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED)
    throw InputError(label + ": cannot memory-map: " + std::strerror(errno));
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->mapping_ = mapping;  // owned from here: the destructor unmaps, also when parsing throws
  file->mapping_size_ = size;
  file->label_ = label;
  file->parse_image(std::span<const uint8_t>(static_cast<const uint8_t*>(mapping), size));
  return file;
}

std::shared_ptr<const GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string label) {
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->label_ = std::move(label);
  file->parse_image(bytes);
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

void GgufFile::parse_image(std::span<const uint8_t> bytes) {
  Cursor cursor(bytes, label_);
  if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0)
    throw FormatError(label_ + ": not a GGUF file (the first 4 bytes are not the magic \"GGUF\")");
  cursor.read<uint32_t>("magic");
  version_ = cursor.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    cursor.fail("version", "unsupported version " + std::to_string(version_) +
                               " (this reader supports GGUF v2 and v3, little-endian)");
  const uint64_t n_tensors = cursor.read<uint64_t>("tensor_count");
  const uint64_t n_kv = cursor.read<uint64_t>("metadata_kv_count");
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
  // 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
  cursor.check_count(n_kv, 13, "metadata_kv_count");
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string where = "metadata[" + std::to_string(i) + "]";
    std::string key = cursor.read_string(where + " key");
    const std::string field = "'" + key + "'";
    const uint32_t type = cursor.read<uint32_t>(field + " (value type)");
    GgufValue value =
        type == kArray ? GgufValue(read_array(cursor, field)) : read_scalar(cursor, type, field);
    if (!metadata_.emplace(std::move(key), std::move(value)).second)
      cursor.fail(field, "duplicate metadata key");
  }
  cursor.check_count(n_tensors, 24, "tensor_count");

  uint64_t alignment = kDefaultAlignment;
  if (const GgufValue* value = find("general.alignment")) {
    const auto* a = std::get_if<int64_t>(value);
    if (a == nullptr || *a <= 0 || (*a & (*a - 1)) != 0 || *a > (1 << 20))
      cursor.fail("'general.alignment'", "must be a power of two integer");
    alignment = static_cast<uint64_t>(*a);
  }

  std::set<std::string, std::less<>> names;
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info;
    info.name = cursor.read_string("tensor[" + std::to_string(i) + "] name");
    const std::string field = "tensor '" + info.name + "'";
    if (!names.insert(info.name).second) cursor.fail(field, "duplicate tensor name");
    const uint32_t n_dims = cursor.read<uint32_t>(field + " n_dims");
    if (n_dims == 0 || n_dims > kMaxDims)
      cursor.fail(field + " n_dims",
                  std::to_string(n_dims) + " is outside 1.." + std::to_string(kMaxDims));
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const int64_t dim = cursor.read<int64_t>(field + " ne[" + std::to_string(d) + "]");
      if (dim < 0 || (dim > 0 && elements > (uint64_t{1} << 50) / static_cast<uint64_t>(dim)))
        cursor.fail(field + " shape", "absurd dimension " + std::to_string(dim));
      elements *= static_cast<uint64_t>(dim);
      info.shape.push_back(dim);
    }
    info.type = cursor.read<uint32_t>(field + " type");
    const TypeTraits* traits = type_traits(info.type);
    if (traits == nullptr)
      cursor.fail(field + " type", "unknown ggml type " + std::to_string(info.type));
    if (info.shape[0] % traits->block_elements != 0)
      cursor.fail(field + " shape", "ne[0] = " + std::to_string(info.shape[0]) +
                                        " is not a multiple of the " + traits->name + " block of " +
                                        std::to_string(traits->block_elements));
    info.size_bytes = elements / traits->block_elements * traits->block_bytes;
    info.offset = cursor.read<uint64_t>(field + " offset");
    if (info.offset % alignment != 0)
      cursor.fail(field + " offset", std::to_string(info.offset) +
                                         " is not a multiple of the alignment " +
                                         std::to_string(alignment));
    tensors_.push_back(std::move(info));
  }

  // The data blob starts at the next multiple of the alignment after the tensor infos.
  const uint64_t header_end = cursor.position();
  const uint64_t data_start = (header_end + alignment - 1) / alignment * alignment;
  if (n_tensors == 0) {
    data_ = {};
    return;
  }
  if (data_start > bytes.size())
    cursor.fail("data blob", "starts at " + std::to_string(data_start) +
                                 " past the end of the file (" + std::to_string(bytes.size()) +
                                 " bytes)");
  data_ = bytes.subspan(data_start);
  for (const GgufTensorInfo& info : tensors_) {
    if (info.offset > data_.size() || info.size_bytes > data_.size() - info.offset)
      cursor.fail("tensor '" + info.name + "' data",
                  "bytes [" + std::to_string(info.offset) + ", " +
                      std::to_string(info.offset + info.size_bytes) +
                      ") of the data blob lie past its end (" + std::to_string(data_.size()) +
                      " bytes)");
  }
}

bool GgufFile::has(std::string_view key) const { return metadata_.find(key) != metadata_.end(); }

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

[[noreturn]] void missing_key(const std::string& label, std::string_view key) {
  throw FormatError(label + ": GGUF metadata key '" + std::string(key) + "' is missing");
}

[[noreturn]] void wrong_type(const std::string& label, std::string_view key, const GgufValue& value,
                             const char* wanted) {
  throw FormatError(label + ": GGUF metadata key '" + std::string(key) + "' is " + describe(value) +
                    ", expected " + wanted);
}

}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) missing_key(label_, key);
  if (const auto* s = std::get_if<std::string>(value)) return *s;
  wrong_type(label_, key, *value, "a string");
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) missing_key(label_, key);
  if (const auto* i = std::get_if<int64_t>(value)) return *i;
  if (const auto* u = std::get_if<uint64_t>(value)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return static_cast<int64_t>(*u);
    throw FormatError(label_ + ": GGUF metadata key '" + std::string(key) +
                      "' = " + std::to_string(*u) + " is out of range");
  }
  wrong_type(label_, key, *value, "an integer");
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) missing_key(label_, key);
  if (const auto* d = std::get_if<double>(value)) return *d;
  if (std::holds_alternative<int64_t>(*value) || std::holds_alternative<uint64_t>(*value))
    return static_cast<double>(get_int(key));
  wrong_type(label_, key, *value, "a number");
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) missing_key(label_, key);
  if (const auto* array = std::get_if<GgufArray>(value))
    if (const auto* strings = std::get_if<std::vector<std::string>>(array)) return *strings;
  wrong_type(label_, key, *value, "an array of strings");
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) missing_key(label_, key);
  if (const auto* array = std::get_if<GgufArray>(value)) {
    if (const auto* ints = std::get_if<std::vector<int64_t>>(array)) return *ints;
    // An empty array of another element type is still a valid empty integer array.
    if (const auto* doubles = std::get_if<std::vector<double>>(array); doubles && doubles->empty())
      return {};
  }
  wrong_type(label_, key, *value, "an array of integers");
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) missing_key(label_, key);
  if (const auto* array = std::get_if<GgufArray>(value)) {
    if (const auto* doubles = std::get_if<std::vector<double>>(array)) return *doubles;
    if (const auto* ints = std::get_if<std::vector<int64_t>>(array))
      return std::vector<double>(ints->begin(), ints->end());
  }
  wrong_type(label_, key, *value, "an array of numbers");
}

const GgufTensorInfo* GgufFile::tensor(std::string_view name) const {
  for (const GgufTensorInfo& info : tensors_)
    if (info.name == name) return &info;
  return nullptr;
}

std::span<const uint8_t> GgufFile::tensor_bytes(const GgufTensorInfo& info) const {
  // The infos were checked against the blob at parse time; re-check for infos built elsewhere.
  if (info.offset > data_.size() || info.size_bytes > data_.size() - info.offset)
    throw FormatError(label_ + ": tensor '" + info.name + "' lies outside the data blob");
  return data_.subspan(info.offset, info.size_bytes);
}

}  // namespace kvb
