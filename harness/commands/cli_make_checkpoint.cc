// kvbench make-checkpoint --preset NAME --out DIR [--seed S] [--shard-gb G] [--layers N] [--json]:
// writes a synthetic HF checkpoint of a preset's shapes (--layers: fewer blocks, for a quick trial)
// (engine/synthetic_checkpoint.h): config.json, bf16 safetensors shards with their index, and a
// byte-level tokenizer, so that the loaders can be measured on an 8B-sized folder on a machine
// without internet. Streams: host memory stays small.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/errors.h"
#include "engine/presets.h"
#include "engine/synthetic_checkpoint.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"

namespace kvb::cli {

int make_checkpoint(const std::vector<std::string>& argv) {
  const Args args("make-checkpoint", argv, {"json"});
  args.allow_only({"preset", "out", "seed", "shard-gb", "layers", "json"});
  ModelConfig config = preset_config(args.get("preset"));
  config.name = args.get("preset");
  config.dummy_weights = false;
  config.n_layers = args.get_int("layers", config.n_layers);
  if (config.n_layers < 1) throw InputError("--layers must be at least 1");
  SyntheticCheckpointOptions options;
  options.seed = static_cast<uint64_t>(args.get_int("seed", 1));
  const double shard_gb = args.get_double("shard-gb", 5.0);
  if (!(shard_gb > 0)) throw InputError("--shard-gb must be positive (e.g. 5)");
  options.shard_bytes = static_cast<int64_t>(shard_gb * (int64_t{1} << 30));
  options.progress = true;
  const std::filesystem::path out = args.get("out");
  const auto files = write_synthetic_checkpoint(config, out, options);
  uint64_t bytes = 0;
  for (const auto& f : files) bytes += std::filesystem::file_size(f);
  if (args.flag("json")) {
    nlohmann::ordered_json j;
    j["out"] = out.string();
    j["preset"] = args.get("preset");
    j["seed"] = options.seed;
    j["files"] = files.size();
    j["bytes"] = bytes;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("wrote %s: %zu files, %.2f GB (preset %s, seed %llu)\n", out.string().c_str(),
                files.size(), bytes / 1e9, args.get("preset").c_str(),
                static_cast<unsigned long long>(options.seed));
  }
  return 0;
}

}  // namespace kvb::cli
