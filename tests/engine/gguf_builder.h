// Builds GGUF images in memory for tests (and fuzz seeds): metadata of every value type, tensors of
// any ggml type with raw block bytes. Written from the container layout in docs/engine.md §1,
// independently of engine/gguf.cc, so that the reader is tested against the format, not
// against itself.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvb::test {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3, uint64_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  GgufBuilder& u32(const std::string& key, uint32_t v) { return scalar(key, 4, &v, 4); }
  GgufBuilder& i32(const std::string& key, int32_t v) { return scalar(key, 5, &v, 4); }
  GgufBuilder& u64(const std::string& key, uint64_t v) { return scalar(key, 10, &v, 8); }
  GgufBuilder& f32(const std::string& key, float v) { return scalar(key, 6, &v, 4); }
  GgufBuilder& boolean(const std::string& key, bool v) {
    uint8_t b = v ? 1 : 0;
    return scalar(key, 7, &b, 1);
  }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    put_string(kv_, key);
    put<uint32_t>(kv_, 8);
    put_string(kv_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& str_array(const std::string& key, const std::vector<std::string>& v) {
    put_string(kv_, key);
    put<uint32_t>(kv_, 9);
    put<uint32_t>(kv_, 8);
    put<uint64_t>(kv_, v.size());
    for (const auto& s : v) put_string(kv_, s);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& i32_array(const std::string& key, const std::vector<int32_t>& v) {
    put_string(kv_, key);
    put<uint32_t>(kv_, 9);
    put<uint32_t>(kv_, 5);
    put<uint64_t>(kv_, v.size());
    for (int32_t x : v) put<int32_t>(kv_, x);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& f32_array(const std::string& key, const std::vector<float>& v) {
    put_string(kv_, key);
    put<uint32_t>(kv_, 9);
    put<uint32_t>(kv_, 6);
    put<uint64_t>(kv_, v.size());
    for (float x : v) put<float>(kv_, x);
    ++n_kv_;
    return *this;
  }

  // A tensor with the given ggml type and its raw (already encoded) bytes.
  GgufBuilder& tensor(const std::string& name, const std::vector<int64_t>& shape, uint32_t type,
                      const std::vector<uint8_t>& raw) {
    while (blob_.size() % alignment_ != 0) blob_.push_back(0);
    put_string(infos_, name);
    put<uint32_t>(infos_, static_cast<uint32_t>(shape.size()));
    for (int64_t d : shape) put<int64_t>(infos_, d);
    put<uint32_t>(infos_, type);
    put<uint64_t>(infos_, blob_.size());
    blob_.insert(blob_.end(), raw.begin(), raw.end());
    ++n_tensors_;
    return *this;
  }
  GgufBuilder& f32_tensor(const std::string& name, const std::vector<int64_t>& shape,
                          const std::vector<float>& values) {
    std::vector<uint8_t> raw(values.size() * 4);
    std::memcpy(raw.data(), values.data(), raw.size());
    return tensor(name, shape, 0, raw);
  }

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    out.insert(out.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(out, version_);
    put<uint64_t>(out, n_tensors_);
    put<uint64_t>(out, n_kv_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    if (n_tensors_ > 0) {
      while (out.size() % alignment_ != 0) out.push_back(0);
      out.insert(out.end(), blob_.begin(), blob_.end());
    }
    return out;
  }

  void write(const std::filesystem::path& path) const { write_bytes(path, bytes()); }

  static void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }

 private:
  template <typename T>
  static void put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  static void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  GgufBuilder& scalar(const std::string& key, uint32_t type, const void* v, size_t n) {
    put_string(kv_, key);
    put<uint32_t>(kv_, type);
    const auto* p = static_cast<const uint8_t*>(v);
    kv_.insert(kv_.end(), p, p + n);
    ++n_kv_;
    return *this;
  }

  uint32_t version_;
  uint64_t alignment_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  std::vector<uint8_t> kv_, infos_, blob_;
};

}  // namespace kvb::test
