#include "engine/synthetic_checkpoint.h"

#include <tbb/parallel_for.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "engine/presets.h"
#include "engine/weight_source.h"
#include "kernels/cpu/dequantize.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

constexpr int64_t kBf16 = 2;

// Uniform values center ± half_width for one tensor, as in the presets: element i depends only
// on (seed, tensor, i), so chunks and threads do not change the bytes.
struct ValueRange {
  float center = 0, half_width = 0;
};

// One line per case: the table reads at a glance.
// clang-format off
ValueRange range_of(const WeightTensor& t) {
  switch (t.role) {
    case WeightRole::kTokenEmbedding: return {0.0f, std::sqrt(3.0f)};
    case WeightRole::kOutputNorm:
    case WeightRole::kAttnNorm:
    case WeightRole::kFfnNorm: return {1.0f, 0.25f};
    case WeightRole::kBq:
    case WeightRole::kBk:
    case WeightRole::kBv: return {0.0f, 0.1f};
    default: return {0.0f, std::sqrt(3.0f / static_cast<float>(t.cols))};
  }
}
// clang-format on

void fill_bf16(uint64_t stream, int64_t first, int64_t n, ValueRange range, uint16_t* out) {
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, n, 1 << 16), [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t i = r.begin(); i < r.end(); ++i) {
          const uint64_t bits = splitmix64(stream ^ splitmix64(first + i));
          const float unit = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
          out[i] = f32_to_bf16(range.center + (2.0f * unit - 1.0f) * range.half_width);
        }
      });
}

std::string shard_name(int index, int count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", index + 1, count);
  return name;
}

// Tensor indices per shard: a shard closes before it would pass `shard_bytes`.
std::vector<std::vector<int>> plan_shards(const std::vector<WeightTensor>& tensors,
                                          int64_t shard_bytes) {
  std::vector<std::vector<int>> shards(1);
  int64_t bytes = 0;
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const int64_t size = tensors[i].elements() * kBf16;
    if (!shards.back().empty() && bytes + size > shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(i);
    bytes += size;
  }
  return shards;
}

// The safetensors header of a shard, padded with spaces to a multiple of 8 bytes.
std::string shard_header(const std::vector<WeightTensor>& tensors, const std::vector<int>& shard) {
  ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (int i : shard) {
    const WeightTensor& t = tensors[i];
    const int64_t size = t.elements() * kBf16;
    const ordered_json shape =
        t.cols == 1 ? ordered_json::array({t.rows}) : ordered_json::array({t.rows, t.cols});
    header[t.name] = {
        {"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void write_or_throw(std::ofstream& out, const void* data, int64_t bytes, const fs::path& path) {
  out.write(static_cast<const char*>(data), bytes);
  if (!out)
    throw InputError(path.string() + ": cannot write (disk full or no permission?); free space " +
                     "or choose another --out folder");
}

void write_shard(const fs::path& path, const std::vector<WeightTensor>& tensors,
                 const std::vector<int>& shard, uint64_t seed) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(path.string() + ": cannot create the file; check the --out folder");
  const std::string header = shard_header(tensors, shard);
  const uint64_t header_size = header.size();  // little-endian on every supported host
  write_or_throw(out, &header_size, 8, path);
  write_or_throw(out, header.data(), static_cast<int64_t>(header.size()), path);
  constexpr int64_t kChunk = int64_t{32} << 20;  // elements (64 MB of bf16)
  std::vector<uint16_t> chunk;
  for (int i : shard) {
    const WeightTensor& t = tensors[i];
    const uint64_t stream = splitmix64(seed * 0x100000001B3ull + static_cast<uint64_t>(i));
    for (int64_t first = 0; first < t.elements(); first += kChunk) {
      const int64_t n = std::min(kChunk, t.elements() - first);
      chunk.resize(static_cast<size_t>(n));
      fill_bf16(stream, first, n, range_of(t), chunk.data());
      write_or_throw(out, chunk.data(), n * kBf16, path);
    }
  }
}

// One line per case: the table reads at a glance.
// clang-format off
const char* hf_architecture(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kMistral: return "MistralForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
  }
  return "LlamaForCausalLM";
}
// clang-format on

ordered_json config_json(const ModelConfig& c, int bos, int eos) {
  ordered_json j;
  j["architectures"] = {hf_architecture(c.architecture)};
  j["model_type"] = architecture_name(c.architecture);
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = c.ffn_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_query_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_context;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.llama3_rope_scaling) {
    const Llama3RopeScaling& r = *c.llama3_rope_scaling;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position}};
  }
  if (c.architecture != Architecture::kQwen2) j["attention_bias"] = c.qkv_bias;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["bos_token_id"] = bos;
  j["eos_token_id"] = eos;
  j["torch_dtype"] = "bfloat16";
  return j;
}

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the others for U+0100 on.
std::string byte_level_text(int byte) {
  int code = byte;
  const bool printable =
      (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255);
  if (!printable) {
    int shifted = 0;
    for (int b = 0; b < byte; ++b)
      shifted += (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255) ? 0 : 1;
    code = 256 + shifted;
  }
  std::string utf8;
  if (code < 0x80) {
    utf8 += static_cast<char>(code);
  } else {
    utf8 += static_cast<char>(0xC0 | (code >> 6));
    utf8 += static_cast<char>(0x80 | (code & 0x3F));
  }
  return utf8;
}

// One token per byte (no merges) and BOS / EOS as special tokens at the top of the vocabulary.
ordered_json tokenizer_json(int bos, int eos) {
  ordered_json vocab = ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_text(b)] = b;
  ordered_json added = ordered_json::array();
  added.push_back({{"id", bos}, {"content", "<|begin_of_text|>"}, {"special", true}});
  added.push_back({{"id", eos}, {"content", "<|end_of_text|>"}, {"special", true}});
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", ordered_json::array()}}}};
}

void write_json(const fs::path& path, const ordered_json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw InputError(path.string() + ": cannot write; check the --out folder");
}

}  // namespace

std::vector<fs::path> write_synthetic_checkpoint(const ModelConfig& config, const fs::path& folder,
                                                 const SyntheticCheckpointOptions& options) {
  if (config.vocab_size < 258)
    throw InputError(
        "a synthetic checkpoint needs a vocabulary of at least 258 tokens (256 bytes, "
        "BOS, EOS); config '" +
        config.name + "' has " + std::to_string(config.vocab_size));
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw InputError(folder.string() + ": cannot create the folder: " + ec.message());
  const int bos = config.vocab_size - 2, eos = config.vocab_size - 1;
  std::vector<fs::path> written;
  auto json_file = [&](const char* name, const ordered_json& j) {
    written.push_back(folder / name);
    write_json(written.back(), j);
  };
  json_file("config.json", config_json(config, bos, eos));
  json_file("tokenizer.json", tokenizer_json(bos, eos));
  json_file("tokenizer_config.json", {{"bos_token", "<|begin_of_text|>"},
                                      {"eos_token", "<|end_of_text|>"},
                                      {"add_bos_token", true}});

  const std::vector<WeightTensor> tensors = hf_tensor_layout(config);
  const auto shards = plan_shards(tensors, options.shard_bytes);
  ordered_json weight_map = ordered_json::object();
  int64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(static_cast<int>(s), static_cast<int>(shards.size()));
    write_shard(folder / name, tensors, shards[s], options.seed);
    written.push_back(folder / name);
    for (int i : shards[s]) {
      weight_map[tensors[i].name] = name;
      total += tensors[i].elements() * kBf16;
    }
    if (options.progress)
      std::fprintf(stderr, "[make-checkpoint] %s (%zu/%zu), %.2f GB so far\n", name.c_str(), s + 1,
                   shards.size(), total / 1e9);
  }
  json_file("model.safetensors.index.json",
            {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  return written;
}

}  // namespace kvb
