#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/errors.h"
#include "kernels/cpu/dequantize.h"

namespace kvb {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit is 100 MB

int dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "I64") return 8;
  return 0;
}

[[noreturn]] void bad(const std::string& label, const std::string& what) {
  throw FormatError(label + ": safetensors " + what);
}

}  // namespace

int64_t SafetensorsTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string label = path.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(label + ": no such file (expected a .safetensors file)");
  const int fd = ::open(label.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(label + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->label_ = label;
  if (size < 8) {
    ::close(fd);
    bad(label, "header length: the file has only " + std::to_string(size) +
                   " bytes (not a safetensors file)");
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED)
    throw InputError(label + ": cannot memory-map: " + std::strerror(errno));
  file->mapping_ = mapping;
  file->mapping_size_ = size;
  const auto* bytes = static_cast<const uint8_t*>(mapping);

  uint64_t header_len;
  std::memcpy(&header_len, bytes, 8);
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    bad(label, "header length " + std::to_string(header_len) + " does not fit in the file (" +
                   std::to_string(size) + " bytes; not a safetensors file, or truncated)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const nlohmann::json::exception& e) {
    bad(label, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) bad(label, "header is not a JSON object");
  file->data_ = std::span<const uint8_t>(bytes + 8 + header_len, size - 8 - header_len);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(label, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items())
        if (v.is_string()) file->metadata_[k] = v.get<std::string>();
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      bad(label, where + ": needs dtype, shape and data_offsets");
    SafetensorsTensor t;
    t.name = name;
    if (!entry["dtype"].is_string()) bad(label, where + ": dtype is not a string");
    t.dtype = entry["dtype"].get<std::string>();
    const int elem = dtype_size(t.dtype);
    if (elem == 0)
      bad(label, where + ": dtype " + t.dtype + " is not supported (F32, F16, BF16, I32, I64)");
    const auto& shape = entry["shape"];
    if (!shape.is_array() || shape.size() > 8)
      bad(label, where + ": shape must be an array of at most 8 dims");
    uint64_t elements = 1;
    for (const auto& dim : shape) {
      if (!dim.is_number_unsigned() && !(dim.is_number_integer() && dim.get<int64_t>() >= 0))
        bad(label, where + ": shape has a non-integer or negative dimension");
      const uint64_t d = dim.get<uint64_t>();
      if (d > 0 && elements > (uint64_t{1} << 50) / d) bad(label, where + ": absurd shape");
      elements *= d;
      t.shape.push_back(static_cast<int64_t>(d));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      bad(label, where + ": data_offsets must be two non-negative integers");
    t.begin = offsets[0].get<uint64_t>();
    t.end = offsets[1].get<uint64_t>();
    if (t.begin > t.end || t.end > file->data_.size())
      bad(label, where + ": data_offsets [" + std::to_string(t.begin) + ", " +
                     std::to_string(t.end) + ") lie outside the data section (" +
                     std::to_string(file->data_.size()) + " bytes; truncated file?)");
    if (t.end - t.begin != elements * elem)
      bad(label, where + ": data_offsets span " + std::to_string(t.end - t.begin) + " bytes but " +
                     t.dtype + " of this shape needs " + std::to_string(elements * elem));
    file->index_[name] = file->tensors_.size();
    file->tensors_.push_back(std::move(t));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::require(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) throw FormatError(label_ + ": tensor '" + std::string(name) + "' is missing");
  return *t;
}

std::span<const uint8_t> SafetensorsFile::raw_bytes(const SafetensorsTensor& t) const {
  return data_.subspan(t.begin, t.end - t.begin);
}

std::vector<float> SafetensorsFile::read_f32(std::string_view name,
                                             std::vector<int64_t>* shape) const {
  const SafetensorsTensor& t = require(name);
  uint32_t ggml_type;
  if (t.dtype == "F32")
    ggml_type = 0;
  else if (t.dtype == "F16")
    ggml_type = 1;
  else if (t.dtype == "BF16")
    ggml_type = 30;
  else
    throw FormatError(label_ + ": tensor '" + t.name + "' is " + t.dtype +
                      ", expected a float tensor");
  std::vector<float> out(static_cast<size_t>(t.elements()));
  dequantize(ggml_type, raw_bytes(t).data(), out.data(), t.elements());
  if (shape) *shape = t.shape;
  return out;
}

std::vector<int64_t> SafetensorsFile::read_i64(std::string_view name,
                                               std::vector<int64_t>* shape) const {
  const SafetensorsTensor& t = require(name);
  const auto raw = raw_bytes(t);
  std::vector<int64_t> out(static_cast<size_t>(t.elements()));
  if (t.dtype == "I64") {
    std::memcpy(out.data(), raw.data(), raw.size());
  } else if (t.dtype == "I32") {
    for (size_t i = 0; i < out.size(); ++i) {
      int32_t v;
      std::memcpy(&v, raw.data() + 4 * i, 4);
      out[i] = v;
    }
  } else {
    throw FormatError(label_ + ": tensor '" + t.name + "' is " + t.dtype +
                      ", expected an integer tensor");
  }
  if (shape) *shape = t.shape;
  return out;
}

SafetensorsModel SafetensorsModel::open_folder(const std::filesystem::path& folder) {
  SafetensorsModel model;
  model.label_ = folder.string();
  const auto single = folder / "model.safetensors";
  const auto index_path = folder / "model.safetensors.index.json";
  std::vector<std::string> shard_names;
  if (std::filesystem::exists(index_path)) {
    nlohmann::json index;
    try {
      std::ifstream in(index_path);
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(index_path.string() + ": not valid JSON: " + e.what());
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      throw FormatError(index_path.string() + ": field 'weight_map' is missing or not an object");
    std::set<std::string> unique;
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      if (!shard.is_string())
        throw FormatError(index_path.string() + ": weight_map['" + tensor + "'] is not a string");
      const std::string s = shard.get<std::string>();
      if (s.empty() || s.find('/') != std::string::npos || s.find("..") != std::string::npos)
        throw FormatError(index_path.string() + ": weight_map['" + tensor + "'] = '" + s +
                          "' is not a file in the folder");
      unique.insert(s);
    }
    shard_names.assign(unique.begin(), unique.end());
  } else if (std::filesystem::exists(single)) {
    shard_names.push_back("model.safetensors");
  } else {
    throw InputError(folder.string() +
                     ": no model.safetensors or model.safetensors.index.json in the folder");
  }
  for (const auto& name : shard_names) {
    model.shards_.push_back(SafetensorsFile::open(folder / name));
    for (const SafetensorsTensor& t : model.shards_.back()->tensors())
      model.by_name_.emplace(t.name, model.shards_.back().get());
  }
  return model;
}

const SafetensorsFile* SafetensorsModel::file_of(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<float> SafetensorsModel::read_f32(std::string_view name,
                                              std::vector<int64_t>* shape) const {
  const SafetensorsFile* file = file_of(name);
  if (file == nullptr)
    throw FormatError(label_ + ": tensor '" + std::string(name) +
                      "' is missing from the safetensors files");
  return file->read_f32(name, shape);
}

std::vector<std::filesystem::path> SafetensorsModel::files() const {
  std::vector<std::filesystem::path> out;
  for (const auto& shard : shards_) out.emplace_back(shard->label());
  return out;
}

std::map<std::string, int> SafetensorsModel::dtype_counts() const {
  std::map<std::string, int> counts;
  for (const auto& shard : shards_)
    for (const SafetensorsTensor& t : shard->tensors()) ++counts[t.dtype];
  return counts;
}

int64_t SafetensorsModel::total_elements() const {
  int64_t n = 0;
  for (const auto& shard : shards_)
    for (const SafetensorsTensor& t : shard->tensors()) n += t.elements();
  return n;
}

void write_safetensors(const std::filesystem::path& path, const F32Tensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const auto& [shape, data] = tensor;
    int64_t elements = 1;
    for (int64_t d : shape) {
      if (d < 0)
        throw InputError("write_safetensors: tensor '" + name + "' has a negative dimension");
      elements *= d;
    }
    if (static_cast<size_t>(elements) != data.size())
      throw InputError("write_safetensors: tensor '" + name + "' has " +
                       std::to_string(data.size()) + " values but its shape holds " +
                       std::to_string(elements));
    header[name] = {
        {"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + data.size() * 4}}};
    offset += data.size() * 4;
  }
  std::string json = header.dump();
  while ((8 + json.size()) % 8 != 0)
    json += ' ';  // keeps the data 8-byte aligned, as HF's writer does
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(path.string() + ": cannot write");
  const uint64_t len = json.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(json.data(), static_cast<std::streamsize>(json.size()));
  for (const auto& [name, tensor] : tensors)
    out.write(reinterpret_cast<const char*>(tensor.second.data()),
              static_cast<std::streamsize>(tensor.second.size() * 4));
  if (!out) throw InputError(path.string() + ": write failed");
}

}  // namespace kvb
