// kvbench calibrate --model M --data DIR --out proj.bin [--chunk-tokens N] [--max-tokens N]
//                   [--iterations 4] [--seed S] [--device cpu|cuda|auto] [--json]
//
// BinaryPC's offline projection calibration (OPC, docs/methods.md §12): prefill chunks of the
// calibration texts (every *.txt file of DIR, in name order, e.g. the Paul Graham essays of the
// fixtures) with full attention, collect the post-RoPE keys of every (layer, KV head), and fit the
// 64 projection rows per head with Algorithm 1 (4 iterations per bit, u recomputed as sign(R P[i])
// before the residual update, division by the total token count). The file format is documented
// in policies/binarypc_projection.h; use it with --policy binarypc --params '{"projection": FILE}'.
// The official calibration mixes PG19, ProofPile and CodeParrot (180 samples); any text folder
// works here, and the JSON output records what was used. --device picks the engine that prefills
// (default cpu, the f32 reference; on a GPU the keys are the bf16 ones its sweeps decode with).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/errors.h"
#include "engine/engine_factory.h"
#include "engine/model.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "policies/binarypc_projection.h"

namespace kvb::cli {
namespace {

std::vector<std::filesystem::path> text_files(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    throw InputError("--data '" + dir.string() + "' is not a folder of calibration texts (*.txt)");
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".txt")
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw InputError("--data '" + dir.string() + "' holds no *.txt files");
  return files;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

double elapsed_seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int calibrate(const std::vector<std::string>& argv) {
  const Args args("calibrate", argv, {"json"});
  args.allow_only({"model", "data", "out", "chunk-tokens", "max-tokens", "iterations", "seed",
                   "device", "json"});
  const auto start = std::chrono::steady_clock::now();
  const LoadedModel model = load_model(args.get("model"));
  // load_model may not attach the file's tokenizer yet; read it from the file then.
  const std::shared_ptr<const Tokenizer> tokenizer =
      model.tokenizer ? model.tokenizer
                      : std::shared_ptr<const Tokenizer>(tokenizer_from_path(args.get("model")));
  const ModelConfig& config = model.weights->config;
  const int chunk_tokens = args.get_int("chunk-tokens", std::min(2048, config.max_context));
  const int max_tokens = args.get_int("max-tokens", 8192);
  if (chunk_tokens < 1 || (config.max_context > 0 && chunk_tokens > config.max_context))
    throw InputError("--chunk-tokens must be in [1, " + std::to_string(config.max_context) + "]");
  if (max_tokens < 64) throw InputError("--max-tokens must be >= 64 (keys to fit 64 bits to)");
  BinaryProjectionFit fit;
  fit.iterations = args.get_int("iterations", 4);
  fit.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  fit.recompute_signs = true;  // OPC
  if (fit.iterations < 1) throw InputError("--iterations must be >= 1");

  // keys[layer * Hkv + head] = concatenated post-RoPE keys [tokens, d].
  const int n_heads = config.n_layers * config.n_kv_heads, d = config.head_dim;
  std::vector<std::vector<float>> keys(n_heads);
  const std::unique_ptr<Engine> engine = make_engine(args.get_or("device", "cpu"), *model.weights);
  int64_t tokens = 0;
  int positions_seen = 0;  // the longest chunk: the keys came from positions 0 .. positions_seen-1
  std::vector<std::string> used;
  for (const auto& file : text_files(args.get("data"))) {
    if (tokens >= max_tokens) break;
    const std::vector<TokenId> ids =
        tokenizer->encode(read_text(file), tokenizer->adds_bos_by_default());
    used.push_back(file.filename().string());
    for (size_t begin = 0; begin < ids.size() && tokens < max_tokens; begin += chunk_tokens) {
      const size_t end = std::min(
          {ids.size(), begin + chunk_tokens, begin + static_cast<size_t>(max_tokens - tokens)});
      positions_seen = std::max(positions_seen, static_cast<int>(end - begin));
      engine->reserve(1, chunk_tokens);
      PrefillCapture unused;
      engine->prefill(0, std::span<const TokenId>(ids.data() + begin, end - begin),
                      CaptureRequest{}, unused);
      const KvStore store = engine->host_keys(0);
      for (int l = 0; l < config.n_layers; ++l)
        for (int h = 0; h < config.n_kv_heads; ++h) {
          const float* k = store.keys(l, h);
          keys[l * config.n_kv_heads + h].insert(keys[l * config.n_kv_heads + h].end(), k,
                                                 k + static_cast<int64_t>(store.length(l, h)) * d);
        }
      tokens += static_cast<int64_t>(end - begin);
      std::cerr << "[kvbench calibrate] " << file.filename().string() << ": " << (end - begin)
                << " tokens prefilled, " << tokens << " of " << max_tokens << " so far, "
                << elapsed_seconds(start) << " s\n";
    }
  }

  BinaryProjectionSet projection(config.n_layers, config.n_kv_heads, d);
  projection.calibration_tokens = static_cast<uint64_t>(tokens);
  std::cerr << "[kvbench calibrate] fitting " << n_heads << " (layer, KV head) projections of 64 "
            << "bits to " << tokens << " keys each, " << fit.iterations << " iterations per bit\n";
  fit_binary_projections(keys, tokens, fit, projection);
  projection.save(args.get("out"));
  const double seconds = elapsed_seconds(start);

  const nlohmann::json summary = {{"out", args.get("out")},
                                  {"model", args.get("model")},
                                  {"layers", config.n_layers},
                                  {"kv_heads", config.n_kv_heads},
                                  {"bits", 64},
                                  {"head_dim", d},
                                  {"calibration_tokens", tokens},
                                  {"positions_seen", positions_seen},
                                  {"max_context", config.max_context},
                                  {"files", used},
                                  {"iterations", fit.iterations},
                                  {"seconds", seconds}};
  // RoPE turns a key's slow dimensions through angles that grow with its position: a projection
  // fitted on short chunks never saw the keys of long contexts (the measured cost at 32K:
  // results/reproduction-qwen2.5-coder-0.5b.md, OPC calibrated on 2K- against 32K-token chunks).
  if (config.max_context > positions_seen)
    std::cerr << "kvbench calibrate: the keys came from positions 0.." << positions_seen - 1
              << " only; the model serves up to " << config.max_context
              << " tokens. For contexts that long, fit on chunks as long (--chunk-tokens N with "
                 "--max-tokens >= N).\n";
  if (args.flag("json")) {
    std::cout << summary.dump() << "\n";
  } else {
    std::cout << "wrote " << args.get("out") << ": " << config.n_layers << " layers x "
              << config.n_kv_heads << " KV heads x 64 x " << d << " from " << tokens
              << " tokens of " << used.size() << " files in " << seconds << " s\n";
  }
  return 0;
}

}  // namespace kvb::cli
