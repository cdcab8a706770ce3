#include "harness/sweep/config.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/registry.h"
#include "engine/cache_policy.h"
#include "policies/registry.h"

namespace kvb {
namespace {

// Every message starts with the config file and the key path, so the user can go straight there.
class KeyError {
 public:
  explicit KeyError(std::string file) : file_(std::move(file)) {}
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(file_ + ": key '" + key + "': " + what);
  }

 private:
  std::string file_;
};

const nlohmann::json& require(const nlohmann::json& object, const std::string& key,
                              const std::string& path, const KeyError& err) {
  if (!object.contains(key)) err.fail(path + key, "is required");
  return object.at(key);
}

std::string get_string(const nlohmann::json& value, const std::string& path, const KeyError& err) {
  if (!value.is_string()) err.fail(path, "must be a string, got " + value.dump());
  const std::string text = value.get<std::string>();
  if (text.empty()) err.fail(path, "must not be empty");
  return text;
}

int get_positive_int(const nlohmann::json& value, const std::string& path, const KeyError& err,
                     bool allow_zero = false) {
  if (!value.is_number_integer()) err.fail(path, "must be an integer, got " + value.dump());
  const int64_t number = value.get<int64_t>();
  if (number < (allow_zero ? 0 : 1) || number > (int64_t{1} << 30))
    err.fail(path,
             std::string("must be ") + (allow_zero ? ">= 0" : ">= 1") + ", got " + value.dump());
  return static_cast<int>(number);
}

const nlohmann::json& get_array(const nlohmann::json& value, const std::string& path,
                                const KeyError& err, bool allow_empty = false) {
  if (!value.is_array()) err.fail(path, "must be a list, got " + value.dump());
  if (!allow_empty && value.empty()) err.fail(path, "must not be an empty list");
  return value;
}

void allow_only_keys(const nlohmann::json& object, const std::set<std::string>& known,
                     const std::string& path, const KeyError& err) {
  for (const auto& [key, unused] : object.items()) {
    if (known.count(key)) continue;
    const std::string list = join(known, ", ");
    err.fail(path + key, "is not a known key (known here: " + list + ")");
  }
}

std::vector<std::optional<Budget>> parse_budgets(const nlohmann::json& value,
                                                 const std::string& path, const KeyError& err) {
  std::vector<std::optional<Budget>> budgets;
  std::set<std::string> seen;  // canonical texts: "0.25" and "25%" are the same budget
  const auto& list = get_array(value, path, err);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    std::string text;
    if (list[i].is_string()) {
      text = list[i].get<std::string>();
    } else if (list[i].is_number()) {
      text = list[i].dump();
    } else {
      err.fail(at, "must be a budget such as 512, \"25%\" or 0.25, got " + list[i].dump());
    }
    Budget budget;
    try {
      budget = Budget::parse(text);
    } catch (const InputError& e) {
      err.fail(at, e.what());
    }
    if (!seen.insert(budget.to_string()).second)
      err.fail(at, "repeats budget " + budget.to_string());
    budgets.push_back(budget);
  }
  return budgets;
}

ModelSpec parse_model(const nlohmann::json& value, const std::string& path, const KeyError& err,
                      const std::filesystem::path& config_path) {
  ModelSpec model;
  if (value.is_string()) {
    model.path = get_string(value, path, err);
  } else if (value.is_object()) {
    allow_only_keys(value, {"name", "path"}, path + ".", err);
    model.path = get_string(require(value, "path", path + ".", err), path + ".path", err);
    if (value.contains("name")) model.name = get_string(value["name"], path + ".name", err);
  } else {
    err.fail(path, "must be a model path or {\"name\", \"path\"}");
  }
  model.path = resolve_config_path(model.path, config_path);
  if (model.name.empty()) model.name = std::filesystem::path(model.path).stem().string();
  return model;
}

// "the niah benchmark" or "the longbench and infinitebench benchmarks": who takes option `key`.
std::string benchmarks_taking(const std::string& key) {
  std::vector<std::string> names;
  for (const auto& b : list_benchmarks())
    if (std::count(b.option_keys.begin(), b.option_keys.end(), key)) names.push_back(b.name);
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return "the " + text + (names.size() > 1 ? " benchmarks" : " benchmark");
}

// The options only some benchmarks take (Benchmark::option_keys).
void parse_benchmark_options(const nlohmann::json& value, const std::string& path,
                             const KeyError& err, const std::filesystem::path& config_path,
                             const Benchmark& benchmark, BenchmarkSpec& spec) {
  for (const char* key : {"depths", "template", "data_dir", "family", "generate"}) {
    if (!value.contains(key) ||
        std::count(benchmark.option_keys.begin(), benchmark.option_keys.end(), key))
      continue;
    const std::string note = std::string(key) == "data_dir"
                                 ? " (the sweep-wide \"data_dir\" holds essays and word lists)"
                                 : "";
    err.fail(path + "." + key, "applies to " + benchmarks_taking(key) + " only" + note);
  }
  if (std::count(benchmark.option_keys.begin(), benchmark.option_keys.end(), "data_dir")) {
    const std::string folder = value.contains("data_dir")
                                   ? get_string(value["data_dir"], path + ".data_dir", err)
                                   : "data/" + spec.benchmark;
    spec.data_dir = resolve_config_path(folder, config_path);
  }
  if (value.contains("family")) spec.family = get_string(value["family"], path + ".family", err);
  if (value.contains("generate")) {
    if (!value["generate"].is_boolean())
      err.fail(path + ".generate", "must be true or false, got " + value["generate"].dump());
    spec.generate = value["generate"].get<bool>();
  }
  if (value.contains("depths")) {
    const auto& depths = get_array(value["depths"], path + ".depths", err);
    for (size_t i = 0; i < depths.size(); ++i) {
      const std::string at = path + ".depths[" + std::to_string(i) + "]";
      if (!depths[i].is_number()) err.fail(at, "must be a number in [0, 100]");
      const double depth = depths[i].get<double>();
      if (depth < 0 || depth > 100) err.fail(at, "must be in [0, 100], got " + depths[i].dump());
      spec.depths.push_back(depth);
    }
  }
  if (value.contains("template")) {
    const std::string name =
        value["template"].is_string() ? value["template"].get<std::string>() : "";
    if (name != "raw" && name != "chat")
      err.fail(path + ".template",
               "must be \"raw\" (the KV papers' prompt) or \"chat\" (the model's chat "
               "template), got " +
                   value["template"].dump());
    spec.chat_template = name == "chat";
  }
}

BenchmarkSpec parse_benchmark(const nlohmann::json& value, const std::string& path,
                              const KeyError& err, const std::filesystem::path& config_path) {
  if (!value.is_object()) err.fail(path, "must be an object with \"benchmark\", \"lengths\", ...");
  allow_only_keys(value,
                  {"benchmark", "tasks", "lengths", "depths", "samples", "seed", "max_new_tokens",
                   "data_dir", "family", "generate", "template"},
                  path + ".", err);
  BenchmarkSpec spec;
  spec.key = path;
  spec.benchmark =
      get_string(require(value, "benchmark", path + ".", err), path + ".benchmark", err);
  const Benchmark* benchmark = lookup_benchmark(spec.benchmark);
  if (!benchmark) {
    std::string known;
    for (const auto& b : list_benchmarks()) known += (known.empty() ? "" : ", ") + b.name;
    err.fail(path + ".benchmark", "'" + spec.benchmark + "' is not one of " + known);
  }
  parse_benchmark_options(value, path, err, config_path, *benchmark, spec);
  if (value.contains("tasks")) {
    const auto& tasks = get_array(value["tasks"], path + ".tasks", err);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const std::string at = path + ".tasks[" + std::to_string(i) + "]";
      const std::string task = get_string(tasks[i], at, err);
      if (std::find(spec.tasks.begin(), spec.tasks.end(), task) != spec.tasks.end())
        err.fail(at, "repeats task " + task);
      if (benchmark->check_task) {
        try {
          benchmark->check_task(task);
        } catch (const InputError& e) {
          err.fail(at, e.what());
        }
      }
      spec.tasks.push_back(task);
    }
  } else if (!benchmark->default_tasks.empty()) {
    spec.tasks = benchmark->default_tasks;
  } else {
    err.fail(path + ".tasks", "is required for " + spec.benchmark);
  }
  const bool lengths_optional = benchmark->lengths_optional;
  if (value.contains("lengths") || !lengths_optional) {
    const auto& lengths =
        get_array(require(value, "lengths", path + ".", err), path + ".lengths", err);
    for (size_t i = 0; i < lengths.size(); ++i) {
      const int length = get_positive_int(lengths[i], path + ".lengths[" + std::to_string(i) + "]",
                                          err, lengths_optional);
      if (std::find(spec.lengths.begin(), spec.lengths.end(), length) != spec.lengths.end())
        err.fail(path + ".lengths[" + std::to_string(i) + "]",
                 "repeats length " + std::to_string(length));
      spec.lengths.push_back(length);
    }
  } else {
    spec.lengths = {0};
  }
  if (value.contains("samples")) {
    spec.samples = get_positive_int(value["samples"], path + ".samples", err);
    spec.samples_given = true;
  }
  if (value.contains("seed")) {
    if (!value["seed"].is_number_unsigned())
      err.fail(path + ".seed", "must be an integer >= 0, got " + value["seed"].dump());
    spec.seed = value["seed"].get<uint64_t>();
  }
  if (value.contains("max_new_tokens"))
    spec.max_new_tokens = get_positive_int(value["max_new_tokens"], path + ".max_new_tokens", err);
  if (benchmark->complete_spec) {
    try {
      benchmark->complete_spec(spec);
    } catch (const OptionError& e) {
      err.fail(path + "." + e.option, e.what());
    } catch (const InputError& e) {
      err.fail(path, e.what());
    }
  }
  return spec;
}

PolicySpec parse_policy(const nlohmann::json& value, const std::string& path, const KeyError& err,
                        const std::vector<std::optional<Budget>>& sweep_budgets) {
  PolicySpec policy;
  if (value.is_string()) {
    policy.name = get_string(value, path, err);
  } else if (value.is_object()) {
    allow_only_keys(value, {"name", "params", "budgets"}, path + ".", err);
    policy.name = get_string(require(value, "name", path + ".", err), path + ".name", err);
    if (value.contains("params")) {
      if (!value["params"].is_object())
        err.fail(path + ".params", "must be an object of parameter values");
      policy.params = value["params"];
    }
    if (value.contains("budgets"))
      policy.budgets = parse_budgets(value["budgets"], path + ".budgets", err);
  } else {
    err.fail(path, "must be a policy name or {\"name\", \"params\", \"budgets\"}");
  }
  std::transform(policy.name.begin(), policy.name.end(), policy.name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (policy_is_budgetless(policy.name)) {
    if (!policy.budgets.empty())
      err.fail(path + ".budgets",
               "'" + policy.name + "' keeps the whole cache and takes no budget");
    policy.budgets = {std::nullopt};
  } else if (policy.budgets.empty()) {
    if (sweep_budgets.empty())
      err.fail("budgets",
               "is required: policy '" + policy.name + "' at " + path +
                   " needs at least one budget (or give the policy its own \"budgets\")");
    policy.budgets = sweep_budgets;
  }
  return policy;
}

}  // namespace

std::string to_string(PromptMode mode) {
  return mode == PromptMode::kQueryAware ? "query-aware" : "question-agnostic";
}

PromptMode parse_prompt_mode(const std::string& text) {
  if (text == "query-aware") return PromptMode::kQueryAware;
  if (text == "question-agnostic") return PromptMode::kQuestionAgnostic;
  throw InputError("prompt mode '" + text + "' is not query-aware or question-agnostic");
}

bool policy_is_budgetless(const std::string& name) { return !policy_takes_budget(name); }

std::string resolve_config_path(const std::string& path, const std::filesystem::path& config_path) {
  namespace fs = std::filesystem;
  // The non-throwing overloads: a name the file system refuses (too long, say) is a path that
  // does not exist here, reported later by whoever opens it.
  std::error_code ec;
  const fs::path given(path);
  if (given.is_absolute() || fs::exists(given, ec)) return path;
  fs::path folder = fs::absolute(config_path, ec).parent_path();
  while (!folder.empty()) {
    if (fs::exists(folder / given, ec)) return (folder / given).lexically_normal().string();
    if (folder == folder.parent_path()) break;
    folder = folder.parent_path();
  }
  return path;
}

SweepConfig parse_sweep_config(const nlohmann::json& json,
                               const std::filesystem::path& config_path) {
  const KeyError err(config_path.string());
  if (!json.is_object()) err.fail("(top level)", "the config must be a JSON object");
  allow_only_keys(json,
                  {"name", "description", "models", "benchmarks", "policies", "budgets",
                   "prompt_mode", "dense_layers", "max_new_tokens", "data_dir", "device",
                   "latency_samples", "kv_dtype", "numerics"},
                  "", err);
  SweepConfig config;
  config.source = json;
  config.name =
      json.contains("name") ? get_string(json["name"], "name", err) : config_path.stem().string();

  const auto& models = get_array(require(json, "models", "", err), "models", err);
  for (size_t i = 0; i < models.size(); ++i)
    config.models.push_back(
        parse_model(models[i], "models[" + std::to_string(i) + "]", err, config_path));

  const auto& benchmarks = get_array(require(json, "benchmarks", "", err), "benchmarks", err);
  for (size_t i = 0; i < benchmarks.size(); ++i)
    config.benchmarks.push_back(
        parse_benchmark(benchmarks[i], "benchmarks[" + std::to_string(i) + "]", err, config_path));

  std::vector<std::optional<Budget>> budgets;
  if (json.contains("budgets")) budgets = parse_budgets(json["budgets"], "budgets", err);
  const auto& policies = get_array(require(json, "policies", "", err), "policies", err);
  std::set<std::string> seen;
  for (size_t i = 0; i < policies.size(); ++i) {
    const std::string path = "policies[" + std::to_string(i) + "]";
    PolicySpec policy = parse_policy(policies[i], path, err, budgets);
    const std::string identity = policy.name + policy.params.dump();
    if (!seen.insert(identity).second)
      err.fail(path, "repeats policy '" + policy.name + "' with the same params");
    config.policies.push_back(std::move(policy));
  }

  const std::string mode = json.contains("prompt_mode")
                               ? get_string(json["prompt_mode"], "prompt_mode", err)
                               : "query-aware";
  if (mode == "both") {
    config.prompt_modes = {PromptMode::kQueryAware, PromptMode::kQuestionAgnostic};
  } else if (mode == "query-aware" || mode == "question-agnostic") {
    config.prompt_modes = {parse_prompt_mode(mode)};
  } else {
    err.fail("prompt_mode", "must be query-aware, question-agnostic or both, got '" + mode + "'");
  }

  if (json.contains("dense_layers")) {
    const auto& layers = get_array(json["dense_layers"], "dense_layers", err, true);
    for (size_t i = 0; i < layers.size(); ++i)
      config.dense_layers.push_back(
          get_positive_int(layers[i], "dense_layers[" + std::to_string(i) + "]", err, true));
  }
  if (json.contains("max_new_tokens"))
    config.max_new_tokens = get_positive_int(json["max_new_tokens"], "max_new_tokens", err);
  if (json.contains("data_dir")) {
    config.data_dir =
        resolve_config_path(get_string(json["data_dir"], "data_dir", err), config_path);
    std::error_code ec;
    if (!std::filesystem::is_directory(config.data_dir, ec))
      err.fail("data_dir", "folder '" + config.data_dir +
                               "' does not exist (leave the key out to "
                               "use data/, which harness/scripts/setup.sh fills)");
  }
  if (json.contains("latency_samples"))
    config.latency_samples =
        get_positive_int(json["latency_samples"], "latency_samples", err, /*allow_zero=*/true);
  if (json.contains("kv_dtype")) {
    const std::string name = get_string(json["kv_dtype"], "kv_dtype", err);
    config.kv_dtype = parse_kv_dtype(name);
    if (!config.kv_dtype) err.fail("kv_dtype", "must be f32, f16 or bf16, got '" + name + "'");
  }
  if (json.contains("numerics")) {
    const std::string name = get_string(json["numerics"], "numerics", err);
    config.numerics = parse_forward_precision(name);
    if (!config.numerics) err.fail("numerics", "must be f32 or bf16-device, got '" + name + "'");
    if (config.numerics == ForwardPrecision::kBf16Device && config.kv_dtype == KvDtype::kF16)
      err.fail("numerics",
               "bf16-device stores bf16 keys and values, which the f16 cache of 'kv_dtype' would "
               "round again; give kv_dtype bf16 or f32, or leave it out");
  }
  if (json.contains("device")) {
    config.device = get_string(json["device"], "device", err);
    if (config.device != "cpu" && config.device != "cuda" && config.device != "auto")
      err.fail("device", "must be cpu, cuda or auto, got '" + config.device + "'");
  }
  return config;
}

SweepConfig load_sweep_config(const std::filesystem::path& config_path) {
  std::ifstream in(config_path);
  if (!in)
    throw InputError("cannot read config " + config_path.string() +
                     " (check the path; examples are in configs/)");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in, nullptr, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw FormatError(config_path.string() + " is not valid JSON: " + e.what());
  }
  return parse_sweep_config(json, config_path);
}

void check_policy_names(const SweepConfig& config, const std::vector<std::string>& known) {
  const std::set<std::string> names(known.begin(), known.end());
  for (size_t i = 0; i < config.policies.size(); ++i) {
    const std::string& name = config.policies[i].name;
    if (names.count(name)) continue;
    // A composition "a+b" is fine when every part is known.
    bool all_parts_known = true;
    std::stringstream parts(name);
    for (std::string part; std::getline(parts, part, '+');)
      all_parts_known &= names.count(part) > 0;
    if (all_parts_known) continue;
    const std::string list = join(known, ", ");
    throw InputError("key 'policies[" + std::to_string(i) + "].name': unknown policy '" + name +
                     "' (known: " + list + ")");
  }
}

}  // namespace kvb
