// GGUF reader: real files (the default model, llama.cpp's vocab-only fixtures) checked against
// values read with the `gguf` PyPI package's GGUFReader (an independent implementation), and
// hand-built images that probe every bounds check.
#include "engine/gguf.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/errors.h"
#include "tests/engine/gguf_builder.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

using test::GgufBuilder;

// Values printed by: python -c "import gguf; r =
// gguf.GGUFReader('models/SmolLM2-135M-Instruct.Q4_1.gguf'); ..." (gguf 0.x from PyPI; fields,
// tensor shapes, types and data offsets relative to r.data_offset).
TEST(GgufTest, ReadsDefaultModelLikeTheReferenceReader) {
  const auto path = test::default_model_path();
  KVB_REQUIRE_FILE(path);
  const auto gguf = GgufFile::open(path);
  EXPECT_EQ(gguf->version(), 3u);
  EXPECT_EQ(gguf->metadata().size(), 33u);
  EXPECT_EQ(gguf->tensors().size(), 272u);
  EXPECT_EQ(gguf->get_string("general.architecture"), "llama");
  EXPECT_EQ(gguf->get_int("llama.block_count"), 30);
  EXPECT_EQ(gguf->get_int("llama.context_length"), 8192);
  EXPECT_EQ(gguf->get_int("llama.embedding_length"), 576);
  EXPECT_EQ(gguf->get_int("llama.feed_forward_length"), 1536);
  EXPECT_EQ(gguf->get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(gguf->get_int("llama.attention.head_count_kv"), 3);
  EXPECT_DOUBLE_EQ(gguf->get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_NEAR(gguf->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_EQ(gguf->get_string("tokenizer.ggml.pre"), "smollm");
  const auto tokens = gguf->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 49152u);
  EXPECT_EQ(tokens[0], "<|endoftext|>");
  EXPECT_EQ(tokens[2], "<|im_end|>");
  EXPECT_EQ(tokens.back(), "ectable");
  EXPECT_EQ(gguf->get_string_array("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(gguf->get_string_array("tokenizer.ggml.merges")[0], "\xC4\xA0 t");  // "Ġ t"
  EXPECT_EQ(gguf->get_int_array("tokenizer.ggml.token_type")[0], 3);
  EXPECT_EQ(gguf->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_FALSE(std::get<bool>(*gguf->find("tokenizer.ggml.add_bos_token")));  // stored as false

  const GgufTensorInfo* embd = gguf->tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(embd->type, static_cast<uint32_t>(GgmlType::kQ8_0));
  EXPECT_EQ(embd->offset, 0u);
  EXPECT_EQ(embd->size_bytes, 30081024u);
  const GgufTensorInfo* k = gguf->tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{576, 192}));
  EXPECT_EQ(k->type, static_cast<uint32_t>(GgmlType::kQ4_1));
  EXPECT_EQ(k->offset, 31744512u);
  EXPECT_EQ(k->size_bytes, 69120u);
  EXPECT_EQ(gguf->tensor("output.weight"), nullptr);  // tied embeddings

  const GgufTensorInfo* norm = gguf->tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->offset, 96574464u);
  const auto bytes = gguf->tensor_bytes(*norm);
  ASSERT_EQ(bytes.size(), 2304u);
  float first[2];
  std::memcpy(first, bytes.data(), sizeof(first));
  EXPECT_FLOAT_EQ(first[0], 1.7578125f);
  EXPECT_FLOAT_EQ(first[1], 1.8203125f);
}

struct VocabFixture {
  const char* file;
  const char* architecture;
  const char* tokenizer_model;
  size_t n_kv;
  size_t n_tokens;
};

TEST(GgufTest, ReadsVocabOnlyFixtures) {
  // Expected values from the gguf PyPI package (len(r.fields) - 3 header pseudo-fields).
  const VocabFixture fixtures[] = {
      {"ggml-vocab-gpt-2.gguf", "gpt2", "gpt2", 16, 50257},
      {"ggml-vocab-llama-spm.gguf", "llama", "llama", 22, 32000},
      {"ggml-vocab-phi-3.gguf", "phi3", "llama", 26, 32064},
      {"ggml-vocab-starcoder.gguf", "starcoder2", "gpt2", 19, 49152},
  };
  for (const auto& f : fixtures) {
    const auto path = test::fixture("tokenizers") / f.file;
    KVB_REQUIRE_FILE(path);
    SCOPED_TRACE(f.file);
    const auto gguf = GgufFile::open(path);
    EXPECT_EQ(gguf->metadata().size(), f.n_kv);
    EXPECT_TRUE(gguf->tensors().empty());
    EXPECT_EQ(gguf->get_string("general.architecture"), f.architecture);
    EXPECT_EQ(gguf->get_string("tokenizer.ggml.model"), f.tokenizer_model);
    EXPECT_EQ(gguf->get_string_array("tokenizer.ggml.tokens").size(), f.n_tokens);
  }
}

GgufBuilder small_model_image() {
  GgufBuilder b;
  b.str("general.architecture", "llama")
      .u32("llama.block_count", 1)
      .u64("big", 1ull << 40)
      .i32("negative", -7)
      .f32("eps", 0.5f)
      .boolean("flag", true)
      .str_array("tokens", {"a", "bc", ""})
      .i32_array("types", {1, -2, 3})
      .f32_array("scores", {0.25f, -1.5f})
      .f32_tensor("t0", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8})
      .f32_tensor("t1", {3}, {9, 10, 11});
  return b;
}

TEST(GgufTest, ParsesEveryValueTypeAndTensorOfABuiltImage) {
  const auto bytes = small_model_image().bytes();
  const auto gguf = GgufFile::parse(bytes, "built.gguf");
  EXPECT_EQ(gguf->get_string("general.architecture"), "llama");
  EXPECT_EQ(gguf->get_int("llama.block_count"), 1);
  EXPECT_EQ(gguf->get_int("big"), int64_t{1} << 40);
  EXPECT_EQ(gguf->get_int("negative"), -7);
  EXPECT_DOUBLE_EQ(gguf->get_float("eps"), 0.5);
  EXPECT_EQ(gguf->get_int("absent", 42), 42);
  EXPECT_DOUBLE_EQ(gguf->get_float("absent", 2.5), 2.5);
  EXPECT_EQ(gguf->get_string_array("tokens"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(gguf->get_int_array("types"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(gguf->get_float_array("scores"), (std::vector<double>{0.25, -1.5}));
  ASSERT_EQ(gguf->tensors().size(), 2u);
  const GgufTensorInfo* t1 = gguf->tensor("t1");
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(t1->offset, 32u);  // t0's 32 bytes, then aligned to 32
  EXPECT_EQ(t1->elements(), 3);
  const auto data = gguf->tensor_bytes(*t1);
  float values[3];
  std::memcpy(values, data.data(), sizeof(values));
  EXPECT_EQ(values[2], 11.0f);
}

TEST(GgufTest, TypedGettersNameTheKeyOnMismatch) {
  const auto bytes = small_model_image().bytes();
  const auto gguf = GgufFile::parse(bytes, "built.gguf");
  try {
    gguf->get_int("general.architecture");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("built.gguf"), std::string::npos);
  }
  EXPECT_THROW(gguf->get_string("missing.key"), FormatError);
  EXPECT_THROW(gguf->get_string_array("types"), FormatError);
}

TEST(GgufTest, EveryTruncationIsAFormatErrorNamingTheFile) {
  const auto bytes = small_model_image().bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      GgufFile::parse(prefix, "cut.gguf");
      ADD_FAILURE() << "a " << n << "-byte prefix parsed";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("cut.gguf"), std::string::npos) << e.what();
    }
  }
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::parse(bytes, "bad.gguf");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

void patch_u64(std::vector<uint8_t>& bytes, size_t at, uint64_t v) {
  std::memcpy(&bytes[at], &v, 8);
}

TEST(GgufTest, RejectsHostileHeaders) {
  auto bytes = small_model_image().bytes();
  {
    auto b = bytes;
    b[0] = 'X';
    EXPECT_NE(parse_error(b).find("not a GGUF file"), std::string::npos);
  }
  {
    auto b = GgufBuilder(1).bytes();
    EXPECT_NE(parse_error(b).find("version"), std::string::npos);
  }
  {
    auto b = bytes;
    patch_u64(b, 8, uint64_t{1} << 60);  // tensor_count
    EXPECT_NE(parse_error(b).find("tensor_count"), std::string::npos);
  }
  {
    auto b = bytes;
    patch_u64(b, 16, uint64_t{1} << 62);  // metadata_kv_count
    EXPECT_NE(parse_error(b).find("metadata_kv_count"), std::string::npos);
  }
  {
    auto b = bytes;
    patch_u64(b, 24, uint64_t{1} << 50);  // first key's length
    EXPECT_NE(parse_error(b).find("metadata[0] key"), std::string::npos);
  }
}

TEST(GgufTest, RejectsHostileTensorInfos) {
  {
    GgufBuilder b;
    b.f32_tensor("x", {1, 1, 1, 1, 1}, {1});
    EXPECT_NE(parse_error(b.bytes()).find("n_dims"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.tensor("x", {4}, 99, std::vector<uint8_t>(16));
    EXPECT_NE(parse_error(b.bytes()).find("unknown ggml type 99"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.tensor("x", {16}, static_cast<uint32_t>(GgmlType::kQ4_0), std::vector<uint8_t>(18));
    EXPECT_NE(parse_error(b.bytes()).find("not a multiple"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.f32_tensor("x", {1 << 20, 1 << 20}, {1, 2});  // claims 4 TiB of data
    EXPECT_NE(parse_error(b.bytes()).find("tensor 'x' data"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.f32_tensor("x", {int64_t{1} << 40, int64_t{1} << 40}, {1});
    EXPECT_NE(parse_error(b.bytes()).find("absurd dimension"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.f32_tensor("x", {1}, {1}).f32_tensor("x", {1}, {2});
    EXPECT_NE(parse_error(b.bytes()).find("duplicate tensor name"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.u32("k", 1).u32("k", 2);
    EXPECT_NE(parse_error(b.bytes()).find("duplicate metadata key"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.u32("general.alignment", 3);
    EXPECT_NE(parse_error(b.bytes()).find("general.alignment"), std::string::npos);
  }
}

TEST(GgufTest, HonoursACustomAlignment) {
  GgufBuilder b(3, 64);
  b.u32("general.alignment", 64).f32_tensor("a", {2}, {1, 2}).f32_tensor("b", {2}, {3, 4});
  const auto bytes = b.bytes();
  const auto gguf = GgufFile::parse(bytes, "aligned.gguf");
  EXPECT_EQ(gguf->tensor("b")->offset, 64u);
  float v[2];
  std::memcpy(v, gguf->tensor_bytes(*gguf->tensor("b")).data(), sizeof(v));
  EXPECT_EQ(v[1], 4.0f);
}

TEST(GgufTest, OpenNamesAMissingFileAndRejectsANonGgufFile) {
  EXPECT_THROW(GgufFile::open("/nonexistent/model.gguf"), InputError);
  const auto path = std::filesystem::temp_directory_path() / "kvb_gguf_test_not_gguf.txt";
  GgufBuilder::write_bytes(path, {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  try {
    GgufFile::open(path);
    ADD_FAILURE() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("not a GGUF file"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
  }
  std::filesystem::remove(path);
}

TEST(GgufTest, TypeNames) {
  EXPECT_STREQ(ggml_type_name(static_cast<uint32_t>(GgmlType::kQ4_1)), "q4_1");
  EXPECT_STREQ(ggml_type_name(static_cast<uint32_t>(GgmlType::kBF16)), "bf16");
  EXPECT_STREQ(ggml_type_name(12345), "unknown");
}

}  // namespace
}  // namespace kvb
