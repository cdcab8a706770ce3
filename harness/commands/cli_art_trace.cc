// kvbench art-trace --model PATH --samples FILE.jsonl [--index I[,J...]] [--steps N]
//                   [--params JSON] [--variants JSON] [--dump FILE.tsv] [--json]
// ART's stability test on real decode steps (docs/methods.md §13), CPU engine. For each sample
// (a kvbench gen-data line, prompted query-aware as `kvbench run` does) it prefills the prompt and
// decodes --steps greedy tokens with full attention walked by ART (--params: ART's parameters, as
// for "full+art"). Every decode walk (layer, KV group) is also traced without stopping
// (engine/cpu/early_exit_walk.h: early_exit_walk_trace), which gives:
//   - per layer and head: blocks walked under --params, the median and minimum d_scale and the
//     median d_direction over the blocks after the first, and how often each term passed: why a
//     walk does or does not stop;
//   - per variant (--variants, a JSON array of ART parameter objects, each applied over --params;
//     default: every scale reading, the ablations without d_scale / d_direction, group and per-head
//     stops): the fraction of blocks it would skip and the true relative error of the output it
//     would return (‖o_stop − o_full‖ / ‖o_full‖, per query head);
//   - the fraction a perfect probe could skip at error tolerances 1e-3 and 1e-2 (the oracle).
// --dump writes one TSV line per (sample, step, layer, head, block) with every reading.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "datasets/jsonl_reader.h"
#include "datasets/sample.h"
#include "engine/chat_template.h"
#include "engine/cpu/early_exit_walk.h"
#include "engine/cpu/forward.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "policies/decode_selectors.h"

namespace kvb::cli {
namespace {

nlohmann::json parse_json(const Args& args, const std::string& key, nlohmann::json fallback) {
  const std::optional<std::string> text = args.maybe(key);
  if (!text) return fallback;
  try {
    return nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("kvbench art-trace: --" + key + " is not valid JSON (" + e.what() + ")");
  }
}

nlohmann::json default_variants() {
  nlohmann::json variants = nlohmann::json::array();
  for (const char* scale : {"mass", "norm", "change"}) {
    variants.push_back({{"scale_criterion", scale}});
    variants.push_back({{"scale_criterion", scale}, {"stop", "head"}});
    variants.push_back({{"scale_criterion", scale}, {"terms", "scale"}});
  }
  variants.push_back({{"terms", "direction"}});
  variants.push_back({{"terms", "direction"}, {"stop", "head"}});
  return variants;
}

std::string variant_name(const nlohmann::json& overrides) {
  if (overrides.empty()) return "(params)";
  std::string name;
  for (const auto& [key, value] : overrides.items())
    name += (name.empty() ? "" : " ") + key + "=" +
            (value.is_string() ? value.get<std::string>() : value.dump());
  return name;
}

struct VariantTotals {
  std::string name;
  EarlyExitOptions options;
  int64_t blocks_visited = 0, blocks_total = 0, walks = 0, stopped = 0;
  std::vector<float> head_errors;  // per query head and walk: error of the returned output
};

struct HeadTotals {
  int64_t walks = 0, blocks_visited = 0, blocks_total = 0;
  int64_t tested = 0, scale_pass = 0, direction_pass = 0, both_pass = 0;
  std::vector<float> scale, direction, sink_share;
};

float quantile(std::vector<float> values, double q) {
  if (values.empty()) return std::nanf("");
  const size_t at = std::min(values.size() - 1, static_cast<size_t>(q * (values.size() - 1) + 0.5));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

std::string chat_name(const std::string& path, const LoadedModel& model) {
  if (std::filesystem::is_regular_file(path) && std::filesystem::path(path).extension() == ".gguf")
    return chat_template_name_for(*GgufFile::open(path));
  return model.chat_template.empty() ? "plain" : model.chat_template;
}

}  // namespace

int art_trace(const std::vector<std::string>& argv) {
  Args args("art-trace", argv, {"json"});
  args.allow_only({"model", "samples", "index", "steps", "params", "variants", "dump", "json"});
  const int steps = args.get_int("steps", 4);
  if (steps < 1) throw InputError("kvbench art-trace: --steps must be >= 1");
  const nlohmann::json base = parse_json(args, "params", nlohmann::json::object());
  if (!base.is_object())
    throw InputError(
        "kvbench art-trace: --params must be a JSON object of ART parameters, e.g. {\"patience\": "
        "2}");
  const nlohmann::json variant_list = parse_json(args, "variants", default_variants());
  if (!variant_list.is_array())
    throw InputError("kvbench art-trace: --variants must be a JSON array of ART parameter objects");

  EarlyExitParams params = make_art_params(base);
  const EarlyExitOptions options = early_exit_options(params);
  std::vector<VariantTotals> variants(1);
  variants[0].name = "(params)";
  variants[0].options = options;
  for (const nlohmann::json& overrides : variant_list) {
    nlohmann::json merged = base;
    if (!overrides.is_object())
      throw InputError("kvbench art-trace: every --variants entry must be a JSON object, got " +
                       overrides.dump());
    merged.update(overrides);
    variants.emplace_back();
    variants.back().name = variant_name(overrides);
    variants.back().options = early_exit_options(make_art_params(merged));
  }

  std::vector<Sample> samples;
  const std::string samples_path = args.get("samples");
  for_each_jsonl_record(samples_path, [&](const nlohmann::json& record, size_t) {
    samples.push_back(record.get<Sample>());
  });
  std::vector<int> indices;
  if (args.has("index")) {
    indices = args.get_indices("index", "line numbers");
  } else {
    for (int i = 0; i < static_cast<int>(samples.size()); ++i) indices.push_back(i);
  }
  for (int i : indices)
    if (i >= static_cast<int>(samples.size()))
      throw InputError("kvbench art-trace: --index " + std::to_string(i) + " but " + samples_path +
                       " has " + std::to_string(samples.size()) + " samples");

  const std::string model_path = args.get("model");
  const LoadedModel model = load_model(model_path);
  if (!model.tokenizer) throw InputError("kvbench art-trace: " + model_path + " has no tokenizer");
  const ChatTemplate& chat = chat_template(chat_name(model_path, model));
  CpuEngine engine(*model.weights);
  const ModelConfig& config = engine.config();
  const int group = config.group_size();

  std::ofstream dump;
  if (args.has("dump")) {
    dump.open(args.get("dump"));
    if (!dump) throw InputError("kvbench art-trace: cannot write --dump " + args.get("dump"));
    dump << "sample\tstep\tlayer\thead\tblock\tmass\tnorm\tchange\tdirection\terror\tshare\n";
  }

  std::mutex mutex;
  std::map<std::pair<int, int>, HeadTotals> heads;  // (layer, query head)
  std::vector<int64_t> oracle_skippable(2, 0);
  const float tolerances[2] = {1e-3f, 1e-2f};
  int64_t oracle_blocks = 0;
  nlohmann::json generations = nlohmann::json::array();
  int current_sample = 0, current_step = 0;

  params.observer = [&](int layer, int kv_head, const EarlyExitDecodeArgs& walk) {
    const EarlyExitWalkTrace trace = early_exit_walk_trace(walk, options);
    const EarlyExitStop stop = early_exit_stop(trace, options);
    std::vector<EarlyExitStop> stops;
    for (const VariantTotals& v : variants) stops.push_back(early_exit_stop(trace, v.options));
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t v = 0; v < variants.size(); ++v) {
      VariantTotals& totals = variants[v];
      totals.blocks_visited += stops[v].visited;
      totals.blocks_total += trace.blocks;
      totals.walks += 1;
      totals.stopped += stops[v].visited < trace.blocks;
      for (int a = 0; a < trace.n_heads; ++a)
        totals.head_errors.push_back(trace.error[trace.at(stops[v].head_last_block[a], a)]);
    }
    oracle_blocks += static_cast<int64_t>(trace.blocks) * trace.n_heads;
    for (int a = 0; a < trace.n_heads; ++a) {
      // walk.n_heads is the group in dense walks, 1 in index walks (kv_head is then a query head)
      const int head = walk.n_heads == 1 && group > 1 ? kv_head : kv_head * group + a;
      HeadTotals& h = heads[{layer, head}];
      h.walks += 1;
      h.blocks_visited += stop.head_last_block[a] + 1;
      h.blocks_total += trace.blocks;
      if (trace.blocks > 0) h.sink_share.push_back(trace.mass_share[trace.at(0, a)]);
      for (int b = 1; b < trace.blocks; ++b) {
        const EarlyExitReadings& r = trace.readings[trace.at(b, a)];
        const float scale = early_exit_scale(r, options.scale_criterion);
        const bool scale_ok = scale < options.tau, direction_ok = r.direction < options.phi;
        h.tested += 1;
        h.scale_pass += scale_ok;
        h.direction_pass += direction_ok;
        h.both_pass += scale_ok && direction_ok;
        h.scale.push_back(scale);
        h.direction.push_back(r.direction);
      }
      for (int t = 0; t < 2; ++t) {
        int safe = trace.blocks;
        while (safe > 0 && trace.error[trace.at(safe - 1, a)] < tolerances[t]) --safe;
        if (safe < trace.blocks) oracle_skippable[t] += trace.blocks - 1 - safe;
      }
      if (dump.is_open())
        for (int b = 0; b < trace.blocks; ++b) {
          const EarlyExitReadings& r = trace.readings[trace.at(b, a)];
          dump << current_sample << '\t' << current_step << '\t' << layer << '\t' << head << '\t'
               << b << '\t' << r.mass << '\t' << r.norm << '\t' << r.change << '\t' << r.direction
               << '\t' << trace.error[trace.at(b, a)] << '\t' << trace.mass_share[trace.at(b, a)]
               << '\n';
        }
    }
  };

  CachePlan plan;
  plan.label = "full+art";
  plan.early_exit = params;
  for (int index : indices) {
    const Sample& sample = samples[index];
    const std::string user = sample.full_user_message();
    const std::string text =
        (sample.use_chat_template ? apply_chat_template(chat, user) : user) + sample.answer_prefix;
    const bool bos = !sample.use_chat_template && model.tokenizer->adds_bos_by_default();
    const std::vector<TokenId> ids = model.tokenizer->encode(text, bos, /*parse_special=*/true);
    std::fprintf(stderr, "[art-trace] sample %d (%s): %zu prompt tokens, prefill...\n", index,
                 sample.id.c_str(), ids.size());
    KvStore store = engine.make_store();
    std::vector<float> logits = engine.forward_chunk(ids, store, CaptureRequest{}, nullptr, 0);
    std::vector<TokenId> output;
    current_sample = index;
    for (int step = 0; step < steps; ++step) {
      const TokenId token =
          static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      output.push_back(token);
      current_step = step;
      logits = engine.decode_step(token, static_cast<int>(ids.size()) + step, step, store, plan);
    }
    const std::string decoded = model.tokenizer->decode(output, /*skip_special=*/true);
    generations.push_back(
        {{"sample", sample.id}, {"prompt_tokens", ids.size()}, {"tokens", decoded}});
  }

  nlohmann::json out;
  out["model"] = model_path;
  out["params"] = describe_art_params(make_art_params(base));
  out["generations"] = generations;
  nlohmann::json layer_rows = nlohmann::json::array();
  for (const auto& [key, h] : heads) {
    layer_rows.push_back(
        {{"layer", key.first},
         {"head", key.second},
         {"walks", h.walks},
         {"blocks_walked_mean", static_cast<double>(h.blocks_visited) / h.walks},
         {"blocks_mean", static_cast<double>(h.blocks_total) / h.walks},
         {"sink_share_median", quantile(h.sink_share, 0.5)},
         {"d_scale_median", quantile(h.scale, 0.5)},
         {"d_scale_min", quantile(h.scale, 0.0)},
         {"d_direction_median", quantile(h.direction, 0.5)},
         {"scale_pass", h.tested ? static_cast<double>(h.scale_pass) / h.tested : 0.0},
         {"direction_pass", h.tested ? static_cast<double>(h.direction_pass) / h.tested : 0.0},
         {"both_pass", h.tested ? static_cast<double>(h.both_pass) / h.tested : 0.0}});
  }
  out["heads"] = layer_rows;
  nlohmann::json variant_rows = nlohmann::json::array();
  for (VariantTotals& v : variants) {
    int64_t over_1e3 = 0, over_1e2 = 0, over_1e1 = 0;
    for (float e : v.head_errors) {
      over_1e3 += e >= 1e-3f;
      over_1e2 += e >= 1e-2f;
      over_1e1 += e >= 1e-1f;
    }
    const double n = std::max<size_t>(v.head_errors.size(), 1);
    variant_rows.push_back(
        {{"variant", v.name},
         {"skipped_fraction",
          v.blocks_total ? 1.0 - static_cast<double>(v.blocks_visited) / v.blocks_total : 0.0},
         {"walks_stopped", v.walks ? static_cast<double>(v.stopped) / v.walks : 0.0},
         {"error_median", quantile(v.head_errors, 0.5)},
         {"error_p99", quantile(v.head_errors, 0.99)},
         {"error_max", quantile(v.head_errors, 1.0)},
         {"share_error_over_1e-3", over_1e3 / n},
         {"share_error_over_1e-2", over_1e2 / n},
         {"share_error_over_1e-1", over_1e1 / n}});
  }
  out["variants"] = variant_rows;
  out["oracle_skippable"] = {
      {"tolerance_1e-3",
       oracle_blocks ? static_cast<double>(oracle_skippable[0]) / oracle_blocks : 0.0},
      {"tolerance_1e-2",
       oracle_blocks ? static_cast<double>(oracle_skippable[1]) / oracle_blocks : 0.0}};

  if (args.flag("json")) {
    std::printf("%s\n", out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (const nlohmann::json& g : generations)
    std::printf("%s (%d prompt tokens): %s\n", g["sample"].get<std::string>().c_str(),
                g["prompt_tokens"].get<int>(), g["tokens"].get<std::string>().c_str());
  std::printf(
      "\nper layer and head under --params (%s): blocks walked / blocks, median sink-block share,\n"
      "d_scale median and min, d_direction median, share of tested blocks passing scale / "
      "direction / both\n",
      out["params"].dump().c_str());
  std::printf("%5s %4s %8s %7s %9s %9s %9s %9s %7s %7s %7s\n", "layer", "head", "walked", "blocks",
              "sink", "scale_med", "scale_min", "dir_med", "scale%", "dir%", "both%");
  for (const nlohmann::json& r : layer_rows)
    std::printf("%5d %4d %8.1f %7.1f %9.3g %9.3g %9.3g %9.3g %7.1f %7.1f %7.1f\n",
                r["layer"].get<int>(), r["head"].get<int>(), r["blocks_walked_mean"].get<double>(),
                r["blocks_mean"].get<double>(), r["sink_share_median"].get<double>(),
                r["d_scale_median"].get<double>(), r["d_scale_min"].get<double>(),
                r["d_direction_median"].get<double>(), 100 * r["scale_pass"].get<double>(),
                100 * r["direction_pass"].get<double>(), 100 * r["both_pass"].get<double>());
  std::printf(
      "\nvariants (over --params): skipped blocks, walks stopped, relative error of the returned "
      "output\n");
  std::printf("%-44s %8s %8s %10s %10s %10s %8s %8s %8s\n", "variant", "skipped", "stopped",
              "err_med", "err_p99", "err_max", ">=1e-3", ">=1e-2", ">=1e-1");
  for (const nlohmann::json& r : variant_rows)
    std::printf("%-44s %7.1f%% %7.1f%% %10.3g %10.3g %10.3g %7.1f%% %7.1f%% %7.1f%%\n",
                r["variant"].get<std::string>().c_str(), 100 * r["skipped_fraction"].get<double>(),
                100 * r["walks_stopped"].get<double>(), r["error_median"].get<double>(),
                r["error_p99"].get<double>(), r["error_max"].get<double>(),
                100 * r["share_error_over_1e-3"].get<double>(),
                100 * r["share_error_over_1e-2"].get<double>(),
                100 * r["share_error_over_1e-1"].get<double>());
  std::printf(
      "\noracle: blocks a perfect probe could skip per head, error < 1e-3: %.1f%%, < 1e-2: "
      "%.1f%%\n",
      100 * out["oracle_skippable"]["tolerance_1e-3"].get<double>(),
      100 * out["oracle_skippable"]["tolerance_1e-2"].get<double>());
  return 0;
}

}  // namespace kvb::cli
