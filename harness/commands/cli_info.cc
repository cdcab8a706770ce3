// kvbench info --model PATH [--json] [--load DEVICE]: what a model file holds, read from metadata
// only (no dequantisation): architecture and shapes, tokenizer kind, chat template, tensor dtypes,
// sizes. With --load (cpu, cuda, auto) it also loads the weights the way `kvbench run` does on that
// device (on the host in the file's encoding, or tensor by tensor to the GPU) and reports the load
// time and peak host RSS.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/engine_factory.h"
#include "engine/generation.h"
#include "engine/model.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"

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
    j["rope_scaling"] = {{"type", "llama3"},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position", r.original_max_position}};
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
  std::printf("name           %s%s\n", c.name.c_str(),
              c.dummy_weights ? "  [random weights: latency/memory only]" : "");
  std::printf(
      "architecture   %s: %d layers, d_model %d, heads %d query / %d kv (group %d), head_dim %d, "
      "ffn %d\n",
      architecture_name(c.architecture), c.n_layers, c.d_model, c.n_query_heads, c.n_kv_heads,
      c.group_size(), c.head_dim, c.ffn_dim);
  std::printf("vocabulary     %d\n", c.vocab_size);
  std::printf("context        %d tokens\n", c.max_context);
  std::printf("rope           theta %g%s\n", c.rope_theta,
              c.llama3_rope_scaling
                  ? (", llama3 scaling x" + std::to_string(c.llama3_rope_scaling->factor)).c_str()
                  : "");
  std::printf("norm eps       %g\n", c.rms_norm_eps);
  std::printf("embeddings     %s; qkv bias %s\n", c.tied_embeddings ? "tied" : "untied",
              c.qkv_bias ? "yes" : "no");
  std::printf("tokenizer      %s\n", s.tokenizer_kind.c_str());
  std::printf("chat template  %s\n", s.chat_template.c_str());
  std::string dtypes;
  for (const auto& [dtype, count] : s.dtype_counts)
    dtypes += (dtypes.empty() ? "" : ", ") + dtype + " x " + std::to_string(count);
  std::printf("weight dtypes  %s\n", dtypes.c_str());
  std::printf("parameters     %.1f M\n", static_cast<double>(s.n_parameters) / 1e6);
  if (s.file_bytes > 0)
    std::printf("file size      %s (%llu bytes)\n", human_bytes(double(s.file_bytes)).c_str(),
                static_cast<unsigned long long>(s.file_bytes));
  std::printf("KV per token   %s (bf16), %s (f32)\n",
              human_bytes(double(c.kv_bytes_per_token(2))).c_str(),
              human_bytes(double(c.kv_bytes_per_token(4))).c_str());
}

struct LoadFigures {
  std::string device;
  double model_seconds = 0;   // load_model: config, tokenizer, SHA-256 (+ weights on the CPU)
  double engine_seconds = 0;  // the engine: weights uploaded to the GPU, or wrapped on the CPU
  int64_t weight_bytes = 0;
  int64_t peak_host_rss_bytes = 0;
};

LoadFigures measure_load(const std::string& model, const std::string& device) {
  LoadFigures figures;
  figures.device = resolve_device(device);
  auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto start = std::chrono::steady_clock::now();
  const LoadedModel loaded = load_model(model, {.weights_on_host = figures.device != "cuda"});
  figures.model_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const std::unique_ptr<Engine> engine = make_engine(figures.device, *loaded.weights);
  figures.engine_seconds = seconds_since(start);
  figures.weight_bytes = engine->weight_bytes();
  figures.peak_host_rss_bytes = peak_rss_bytes();
  return figures;
}

}  // namespace

int info(const std::vector<std::string>& argv) {
  const Args args("info", argv, {"json"});
  args.allow_only({"model", "json", "load"});
  const ModelSummary summary = inspect_model(args.get("model"));
  std::optional<LoadFigures> load;
  if (args.has("load")) load = measure_load(args.get("model"), args.get("load"));
  if (args.flag("json")) {
    nlohmann::ordered_json j = to_json(summary);
    if (load)
      j["load"] = {{"device", load->device},
                   {"model_seconds", load->model_seconds},
                   {"engine_seconds", load->engine_seconds},
                   {"weight_bytes", load->weight_bytes},
                   {"peak_host_rss_bytes", load->peak_host_rss_bytes}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_human(summary);
    if (load)
      std::printf(
          "load           %s: %s of weights; model files %.1f s (tokenizer, SHA-256%s), "
          "engine %.1f s; peak host RSS %s\n",
          load->device.c_str(), human_bytes(double(load->weight_bytes)).c_str(),
          load->model_seconds, load->device == "cuda" ? "" : ", weights", load->engine_seconds,
          human_bytes(double(load->peak_host_rss_bytes)).c_str());
  }
  return 0;
}

}  // namespace kvb::cli
