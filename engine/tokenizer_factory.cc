// Tokenizers from model files: a GGUF's tokenizer.ggml.* metadata, or an HF folder
// (tokenizer.json for byte-level BPE, tokenizer.model for SentencePiece, tokenizer_config.json
// for BOS/EOS rules). Key names and defaults follow llama.cpp's llama_vocab::load.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/errors.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_bpe.h"
#include "engine/tokenizer_spm.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<bool> gguf_bool(const GgufFile& gguf, std::string_view key) {
  const GgufValue* value = gguf.find(key);
  if (value == nullptr) return std::nullopt;
  if (const auto* flag = std::get_if<bool>(value)) return *flag;
  if (gguf.has(key)) return gguf.get_int(key) != 0;  // some writers store flags as integers
  return std::nullopt;
}

TokenId gguf_token_id(const GgufFile& gguf, std::string_view key) {
  return static_cast<TokenId>(gguf.get_int(key, -1));
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& gguf) {
  const std::string model = gguf.get_string("tokenizer.ggml.model");
  Vocabulary vocab;
  vocab.source = gguf.label();
  vocab.tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (gguf.has("tokenizer.ggml.token_type")) {
    for (int64_t type : gguf.get_int_array("tokenizer.ggml.token_type")) {
      if (type < 0 || type > 6)
        throw FormatError(gguf.label() + ": tokenizer.ggml.token_type holds " +
                          std::to_string(type) + ", expected 0..6");
      vocab.types.push_back(static_cast<TokenType>(type));
    }
  }
  vocab.bos = gguf_token_id(gguf, "tokenizer.ggml.bos_token_id");
  vocab.eos = gguf_token_id(gguf, "tokenizer.ggml.eos_token_id");
  vocab.unk = gguf_token_id(gguf, "tokenizer.ggml.unknown_token_id");
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const TokenId id = gguf_token_id(gguf, key);
    if (id >= 0) vocab.end_of_generation.push_back(id);
  }

  if (model == "llama") {  // SentencePiece
    if (gguf.has("tokenizer.ggml.scores")) {
      for (double score : gguf.get_float_array("tokenizer.ggml.scores"))
        vocab.scores.push_back(static_cast<float>(score));
    }
    if (vocab.unk < 0) {
      for (TokenId id = 0; id < static_cast<TokenId>(vocab.types.size()) && vocab.unk < 0; ++id)
        if (vocab.types[id] == TokenType::kUnknown) vocab.unk = id;
    }
    vocab.add_bos = gguf_bool(gguf, "tokenizer.ggml.add_bos_token").value_or(true);
    vocab.add_space_prefix = gguf_bool(gguf, "tokenizer.ggml.add_space_prefix").value_or(true);
    vocab.validate();
    vocab.add_known_end_tokens();
    std::string proto = spm_model_proto_from_vocab(vocab);
    return std::make_unique<SpmTokenizer>(std::move(vocab), std::move(proto));
  }
  if (model == "gpt2") {  // byte-level BPE
    vocab.merges = gguf.get_string_array("tokenizer.ggml.merges");
    // A GGUF without the key gets llama.cpp's "default" pre-tokenizer.
    vocab.pre = gguf.has("tokenizer.ggml.pre") ? gguf.get_string("tokenizer.ggml.pre") : "default";
    const bool llama3 = pre_tokenizer_spec(vocab.pre).family == "llama3";
    vocab.add_bos = gguf_bool(gguf, "tokenizer.ggml.add_bos_token").value_or(llama3);
    vocab.add_space_prefix = false;
    vocab.validate();
    vocab.add_known_end_tokens();
    return std::make_unique<BpeTokenizer>(std::move(vocab));
  }
  throw FormatError(gguf.label() + ": tokenizer.ggml.model '" + model +
                    "' is not supported (supported: 'gpt2' byte-level BPE, 'llama' SentencePiece)");
}

namespace {

json read_json(const fs::path& path) {
  std::ifstream file(path);
  if (!file) throw InputError("cannot open '" + path.string() + "'");
  try {
    return json::parse(file);
  } catch (const json::exception& e) {
    throw FormatError(path.string() + ": invalid JSON: " + e.what());
  }
}

// A special token in tokenizer_config.json: "text" or {"content": "text", ...}.
std::optional<std::string> config_token_text(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return std::nullopt;
}

// The pre-tokenizer name of a tokenizer.json (`pre_tokenizer`), recognised by its parts.
std::string hf_pre_tokenizer_name(const json& pre, const std::string& source) {
  std::vector<json> parts;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers"))
    parts = pre["pretokenizers"].get<std::vector<json>>();
  else if (pre.is_object())
    parts.push_back(pre);
  bool byte_level_regex = false, individual_digits = false;
  std::string split_regex;
  for (const json& part : parts) {
    const std::string type = part.value("type", "");
    if (type == "ByteLevel") byte_level_regex = part.value("use_regex", true);
    if (type == "Digits") individual_digits = part.value("individual_digits", false);
    if (type == "Split" && part.contains("pattern") && part["pattern"].contains("Regex"))
      split_regex = part["pattern"]["Regex"].get<std::string>();
  }
  if (!split_regex.empty()) {
    if (split_regex.find(R"(\p{N}{1,3})") != std::string::npos) return "llama-bpe";
    if (split_regex.find(R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)") != std::string::npos) return "qwen2";
    throw FormatError(source + ": unsupported pre-tokenizer regex '" + split_regex + "'");
  }
  if (individual_digits && byte_level_regex) return "smollm";
  if (byte_level_regex) return "gpt-2";
  throw FormatError(source + ": unsupported pre_tokenizer (expected a byte-level BPE one)");
}

std::unique_ptr<Tokenizer> bpe_from_tokenizer_json(const json& tokenizer, const json& config,
                                                   const std::string& source) {
  const json& model = tokenizer.at("model");
  Vocabulary vocab;
  vocab.source = source;
  // Ids index the vocabulary: reject negative or absurd ones before sizing it.
  constexpr TokenId kMaxVocabulary = 1 << 24;
  TokenId max_id = -1;
  auto checked_id = [&](const json& id) {
    const auto value = id.get<int64_t>();
    if (value < 0 || value >= kMaxVocabulary)
      throw FormatError(source + ": token id " + std::to_string(value) + " is out of range");
    max_id = std::max(max_id, static_cast<TokenId>(value));
  };
  for (const auto& [text, id] : model.at("vocab").items()) checked_id(id);
  if (tokenizer.contains("added_tokens"))
    for (const json& added : tokenizer["added_tokens"]) checked_id(added.at("id"));
  vocab.tokens.assign(max_id + 1, "");
  vocab.types.assign(max_id + 1, TokenType::kUnused);
  for (const auto& [text, id] : model.at("vocab").items()) {
    vocab.tokens[id.get<TokenId>()] = text;
    vocab.types[id.get<TokenId>()] = TokenType::kNormal;
  }
  if (tokenizer.contains("added_tokens")) {
    for (const json& added : tokenizer["added_tokens"]) {
      const auto id = added.at("id").get<TokenId>();
      vocab.tokens[id] = added.at("content").get<std::string>();
      vocab.types[id] =
          added.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
    }
  }
  for (const json& merge : model.at("merges")) {
    if (merge.is_string())
      vocab.merges.push_back(merge.get<std::string>());
    else  // newer files: ["left", "right"]
      vocab.merges.push_back(merge.at(0).get<std::string>() + " " + merge.at(1).get<std::string>());
  }
  vocab.pre = hf_pre_tokenizer_name(tokenizer.value("pre_tokenizer", json()), source);
  auto id_of = [&](const std::optional<std::string>& text) {
    if (!text) return TokenId{-1};
    for (TokenId id = 0; id < static_cast<TokenId>(vocab.tokens.size()); ++id)
      if (vocab.tokens[id] == *text) return id;
    return TokenId{-1};
  };
  vocab.bos = id_of(config_token_text(config, "bos_token"));
  vocab.eos = id_of(config_token_text(config, "eos_token"));
  vocab.unk = id_of(config_token_text(config, "unk_token"));
  const bool llama3 = pre_tokenizer_spec(vocab.pre).family == "llama3";
  vocab.add_bos = config.contains("add_bos_token") && config["add_bos_token"].is_boolean()
                      ? config["add_bos_token"].get<bool>()
                      : llama3;
  vocab.add_space_prefix = false;
  vocab.validate();
  vocab.add_known_end_tokens();
  return std::make_unique<BpeTokenizer>(std::move(vocab));
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_hf_folder(const std::string& folder) {
  const fs::path dir(folder);
  if (!fs::is_directory(dir)) throw InputError("'" + folder + "' is not a folder");
  const fs::path config_path = dir / "tokenizer_config.json";
  const json config = fs::exists(config_path) ? read_json(config_path) : json::object();
  const fs::path json_path = dir / "tokenizer.json";
  const fs::path spm_path = dir / "tokenizer.model";
  if (fs::exists(json_path)) {
    const json tokenizer = read_json(json_path);
    try {
      // SentencePiece-style BPE (byte_fallback, "▁" pieces; Mistral, Llama-2) is read from
      // tokenizer.model instead.
      const bool byte_level_bpe = tokenizer.contains("model") &&
                                  tokenizer.at("model").value("type", "") == "BPE" &&
                                  !tokenizer.at("model").value("byte_fallback", false);
      if (byte_level_bpe) return bpe_from_tokenizer_json(tokenizer, config, json_path.string());
    } catch (const json::exception& e) {
      throw FormatError(json_path.string() + ": unexpected tokenizer.json layout: " + e.what());
    }
  }
  if (fs::exists(spm_path)) {
    std::optional<bool> add_bos;
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
      add_bos = config["add_bos_token"].get<bool>();
    return spm_tokenizer_from_model_file(spm_path.string(), add_bos);
  }
  throw InputError("'" + folder +
                   "' has neither a byte-level BPE tokenizer.json nor a "
                   "tokenizer.model");
}

std::unique_ptr<Tokenizer> tokenizer_from_path(const std::string& path) {
  if (fs::is_directory(path)) return tokenizer_from_hf_folder(path);
  if (!fs::exists(path))
    throw InputError("model '" + path + "' does not exist (a .gguf file or an HF folder)");
  return tokenizer_from_gguf(*GgufFile::open(path));
}

}  // namespace kvb
