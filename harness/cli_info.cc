// kvbench info --model PATH [--json]: what a model file holds, read from metadata only (no
// dequantisation): architecture and shapes, tokenizer kind, chat template, tensor dtypes, sizes.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "engine/model.h"
#include "harness/args.h"
#include "harness/cli.h"

namespace kvb::cli {
namespace {

nlohmann::ordered_json to_json(const ModelSummary& s) {
  const ModelConfig& c = s.config;
  nlohmann::ordered_json j;
  j["model"] = s.source;
  j["format"] = s.format;
  j["name"] = c.name;
  j["architecture"] = architecture_name(c.architecture);
  j["n_layers"] = c.n_layers;
  j["d_model"] = c.d_model;
  j["n_query_heads"] = c.n_query_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["ffn_dim"] = c.ffn_dim;
  j["vocab_size"] = c.vocab_size;
  j["context_length"] = c.max_context;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.llama3_rope_scaling) {
    const auto& r = *c.llama3_rope_scaling;
    j["rope_scaling"] = {{"type", "llama3"}, {"factor", r.factor}, {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor}, {"original_max_position", r.original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tied_embeddings"] = c.tied_embeddings;
  j["qkv_bias"] = c.qkv_bias;
  j["dummy_weights"] = c.dummy_weights;
  j["tokenizer"] = s.tokenizer_kind;
  j["chat_template"] = s.chat_template;
  j["weight_dtypes"] = s.dtype_counts;
  j["n_tensors"] = [&] {
    int n = 0;
    for (const auto& [dtype, count] : s.dtype_counts) n += count;
    return n;
  }();
  j["n_parameters"] = s.n_parameters;
  j["file_bytes"] = s.file_bytes;
  j["kv_bytes_per_token_bf16"] = c.kv_bytes_per_token(2);
  return j;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

void print_human(const ModelSummary& s) {
  const ModelConfig& c = s.config;
  std::printf("model          %s (%s)\n", s.source.c_str(), s.format.c_str());
  std::printf("name           %s%s\n", c.name.c_str(), c.dummy_weights ? "  [random weights: latency/memory only]" : "");
  std::printf("architecture   %s: %d layers, d_model %d, heads %d query / %d kv (group %d), head_dim %d, ffn %d\n",
              architecture_name(c.architecture), c.n_layers, c.d_model, c.n_query_heads, c.n_kv_heads, c.group_size(),
              c.head_dim, c.ffn_dim);
  std::printf("vocabulary     %d\n", c.vocab_size);
  std::printf("context        %d tokens\n", c.max_context);
  std::printf("rope           theta %g%s\n", c.rope_theta,
              c.llama3_rope_scaling ? (", llama3 scaling x" + std::to_string(c.llama3_rope_scaling->factor)).c_str() : "");
  std::printf("norm eps       %g\n", c.rms_norm_eps);
  std::printf("embeddings     %s; qkv bias %s\n", c.tied_embeddings ? "tied" : "untied", c.qkv_bias ? "yes" : "no");
  std::printf("tokenizer      %s\n", s.tokenizer_kind.c_str());
  std::printf("chat template  %s\n", s.chat_template.c_str());
  std::string dtypes;
  for (const auto& [dtype, count] : s.dtype_counts) dtypes += (dtypes.empty() ? "" : ", ") + dtype + " x " + std::to_string(count);
  std::printf("weight dtypes  %s\n", dtypes.c_str());
  std::printf("parameters     %.1f M\n", static_cast<double>(s.n_parameters) / 1e6);
  if (s.file_bytes > 0) std::printf("file size      %s (%llu bytes)\n", human_bytes(double(s.file_bytes)).c_str(),
                                    static_cast<unsigned long long>(s.file_bytes));
  std::printf("KV per token   %s (bf16), %s (f32)\n", human_bytes(double(c.kv_bytes_per_token(2))).c_str(),
              human_bytes(double(c.kv_bytes_per_token(4))).c_str());
}

}  // namespace

int info(const std::vector<std::string>& argv) {
  const Args args("info", argv, {"json"});
  args.allow_only({"model", "json"});
  const ModelSummary summary = inspect_model(args.get("model"));
  if (args.flag("json")) {
    std::printf("%s\n", to_json(summary).dump(2).c_str());
  } else {
    print_human(summary);
  }
  return 0;
}

}  // namespace kvb::cli
