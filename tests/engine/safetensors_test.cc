// safetensors reader and writer: hand-assembled files (format: 8-byte LE header length, JSON
// header, data) with every dtype, sharded folders, and hostile headers.
#include "engine/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/errors.h"
#include "kernels/cpu/dequantize.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvb_safetensors_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes header + data exactly as given.
  fs::path write_raw(const std::string& name, const std::string& header,
                     const std::vector<uint8_t>& data) {
    const fs::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    const uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header;
    out.write(reinterpret_cast<const char*>(data.data()),
              static_cast<std::streamsize>(data.size()));
    return path;
  }

  std::string open_error(const fs::path& path) {
    try {
      SafetensorsFile::open(path);
    } catch (const FormatError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

template <typename T>
void append(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

TEST_F(SafetensorsTest, ReadsEveryDtype) {
  std::vector<uint8_t> data;
  append<float>(data, 1.5f);
  append<float>(data, -2.0f);               // f32 [0, 8)
  append<uint16_t>(data, 0x3C00);           // f16 1.0
  append<uint16_t>(data, 0xC500);           // f16 -5.0   [8, 12)
  append<uint16_t>(data, 0x3F80);           // bf16 1.0
  append<uint16_t>(data, 0x4049);           // bf16 3.140625 [12, 16)
  append<int32_t>(data, -7);                // i32 [16, 20)
  append<int64_t>(data, int64_t{1} << 40);  // i64 [20, 28)
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F16","shape":[1,2],"data_offsets":[8,12]},)"
                             R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]},)"
                             R"("d":{"dtype":"I32","shape":[],"data_offsets":[16,20]},)"
                             R"("e":{"dtype":"I64","shape":[1],"data_offsets":[20,28]}})";
  const auto file = SafetensorsFile::open(write_raw("all.safetensors", header, data));
  EXPECT_EQ(file->tensors().size(), 5u);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->read_f32("a"), (std::vector<float>{1.5f, -2.0f}));
  std::vector<int64_t> shape;
  EXPECT_EQ(file->read_f32("b", &shape), (std::vector<float>{1.0f, -5.0f}));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(file->read_f32("c"), (std::vector<float>{1.0f, 3.140625f}));
  EXPECT_EQ(file->read_i64("d"), (std::vector<int64_t>{-7}));
  EXPECT_EQ(file->read_i64("e"), (std::vector<int64_t>{int64_t{1} << 40}));
  EXPECT_THROW(file->read_i64("a"), FormatError);
  EXPECT_THROW(file->read_f32("e"), FormatError);
  EXPECT_THROW(file->read_f32("zzz"), FormatError);
}

TEST_F(SafetensorsTest, WriterRoundTripsAndLaysOutTheFormat) {
  F32Tensors tensors;
  tensors["k"] = {{2, 3}, {1, 2, 3, 4, 5, 6}};
  tensors["q_window"] = {{1, 1, 2}, {-1.25f, 7.0f}};
  const fs::path path = dir_ / "w.safetensors";
  write_safetensors(path, tensors, {{"by", "test"}});
  // Independent look at the bytes: header length, JSON text, data after it in name order.
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  std::string header(len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(len));
  EXPECT_EQ((8 + len) % 8, 0u);
  EXPECT_NE(header.find(R"("k":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"),
            std::string::npos)
      << header;
  float first;
  in.read(reinterpret_cast<char*>(&first), 4);
  EXPECT_EQ(first, 1.0f);

  const auto file = SafetensorsFile::open(path);
  std::vector<int64_t> shape;
  EXPECT_EQ(file->read_f32("q_window", &shape), (std::vector<float>{-1.25f, 7.0f}));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(file->read_f32("k").size(), 6u);
  EXPECT_EQ(file->metadata().at("by"), "test");

  F32Tensors wrong;
  wrong["x"] = {{2, 2}, {1, 2, 3}};
  EXPECT_THROW(write_safetensors(dir_ / "bad.safetensors", wrong), InputError);
}

TEST_F(SafetensorsTest, RejectsHostileFiles) {
  const std::vector<uint8_t> four(4);
  EXPECT_NE(
      open_error(write_raw("a", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four))
          .find("tensor 'x': data_offsets [0, 8) lie outside"),
      std::string::npos);
  EXPECT_NE(
      open_error(write_raw("b", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four))
          .find("needs 8"),
      std::string::npos);
  EXPECT_NE(
      open_error(
          write_raw("c", R"({"x":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", four))
          .find("F8_E4M3 is not supported"),
      std::string::npos);
  EXPECT_NE(
      open_error(write_raw("d", R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four))
          .find("negative"),
      std::string::npos);
  EXPECT_NE(open_error(write_raw("e", R"({"x": nope)", four)).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(
      open_error(write_raw("f", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", four))
          .find("outside"),
      std::string::npos);
  // A header length larger than the file.
  const fs::path big = dir_ / "g";
  {
    std::ofstream out(big, std::ios::binary);
    const uint64_t len = 1ull << 40;
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << "{}";
  }
  EXPECT_NE(open_error(big).find("header length"), std::string::npos);
  std::ofstream(dir_ / "h") << "abc";
  EXPECT_NE(open_error(dir_ / "h").find(dir_.string()), std::string::npos);
  EXPECT_THROW(SafetensorsFile::open(dir_ / "missing.safetensors"), InputError);
}

TEST_F(SafetensorsTest, ShardedFolderFollowsTheIndex) {
  F32Tensors one, two;
  one["model.a"] = {{2}, {1, 2}};
  two["model.b"] = {{1}, {3}};
  write_safetensors(dir_ / "model-00001-of-00002.safetensors", one);
  write_safetensors(dir_ / "model-00002-of-00002.safetensors", two);
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata":{"total_size":12},"weight_map":{"model.a":"model-00001-of-00002.safetensors",)"
      << R"("model.b":"model-00002-of-00002.safetensors"}})";
  const SafetensorsModel model = SafetensorsModel::open_folder(dir_);
  EXPECT_EQ(model.read_f32("model.b"), (std::vector<float>{3}));
  EXPECT_EQ(model.read_f32("model.a"), (std::vector<float>{1, 2}));
  EXPECT_EQ(model.files().size(), 2u);
  EXPECT_EQ(model.total_elements(), 3);
  EXPECT_EQ(model.dtype_counts().at("F32"), 2);
  EXPECT_THROW(model.read_f32("model.c"), FormatError);

  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map":{"model.a":"../etc/passwd"}})";
  EXPECT_THROW(SafetensorsModel::open_folder(dir_), FormatError);
  fs::remove(dir_ / "model.safetensors.index.json");
  fs::remove(dir_ / "model-00001-of-00002.safetensors");
  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  EXPECT_THROW(SafetensorsModel::open_folder(dir_), InputError);
}

}  // namespace
}  // namespace kvb
