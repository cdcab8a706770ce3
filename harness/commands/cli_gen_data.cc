// kvbench gen-data: generate a benchmark's samples as JSONL (one kvb::Sample per line), fitted to
// --length with the model's own tokenizer and chat template: the samples a sweep would run for the
// same (task, length), made by the benchmark's own generator (datasets/registry.h).
//
//   kvbench gen-data --benchmark ruler|niah|infinitebench --task T --length N[,N...] --num K
//                    --seed S --model PATH --out FILE.jsonl [--data-dir DIR]
//                    [--template chat|base] [--family yarn-mistral|gpt4] [--json]
//
// --length may be a comma list: one group per length, in that order. --num is the benchmark's
// count (Benchmark::set_generated_count): samples per length, or for niah the number of depths
// (round(linspace(0, 100, K)), default 10). --task defaults to the benchmark's only default task
// (niah). ruler: the 13 tasks; --template base drops the chat frame (kvpress's setting).
// infinitebench: passkey, number_string, kv_retrieval, math_find, prompted as --family does; its
// other tasks and LongBench are loaded from data files, which gen-data refuses with a message.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/errors.h"
#include "datasets/generation.h"
#include "datasets/registry.h"
#include "engine/chat_template.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"

namespace kvb::cli {
namespace fs = std::filesystem;

namespace {

constexpr char kUsage[] =
    "usage: kvbench gen-data --benchmark ruler|niah|infinitebench --task T --length N[,N...] "
    "--num K --seed S --model PATH --out FILE.jsonl [--data-dir DIR] [--template chat|base] "
    "[--family yarn-mistral|gpt4] [--json]";

struct LoadedModel {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // chat_template() name
};

LoadedModel load_tokenizer(const fs::path& path) {
  if (!fs::exists(path))
    throw InputError("--model " + path.string() +
                     " does not exist (a GGUF file or an HF folder; "
                     "run harness/scripts/setup.sh for the default SmolLM2 model)");
  LoadedModel model;
  if (fs::is_directory(path)) {
    model.tokenizer = tokenizer_from_hf_folder(path.string());
    model.chat_template = chat_template_name_for_hf_folder(path.string());
  } else {
    const auto gguf = GgufFile::open(path);
    model.tokenizer = tokenizer_from_gguf(*gguf);
    model.chat_template = chat_template_name_for(*gguf);
  }
  return model;
}

// The chat template around one user message, split at the message (RULER counts the frame).
ChatFrame chat_frame(const std::string& template_name) {
  static constexpr char kMarker[] = "\x01kvbench-user-message\x01";
  const std::string rendered = apply_chat_template(chat_template(template_name), kMarker);
  const size_t at = rendered.find(kMarker);
  if (at == std::string::npos)
    throw FormatError("chat template " + template_name + " does not contain the user message");
  return ChatFrame{rendered.substr(0, at), rendered.substr(at + std::string(kMarker).size())};
}

// The task: --task, else the benchmark's only default task.
std::string task_of(const Args& args, const Benchmark& benchmark) {
  if (args.has("task")) return args.get("task");
  if (benchmark.default_tasks.size() == 1) return benchmark.default_tasks.front();
  throw InputError(std::string("kvbench gen-data: missing --task\n") + kUsage);
}

std::vector<int> parse_lengths(const std::string& text) {
  std::vector<int> lengths;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) {
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value <= 0)
      throw InputError("kvbench gen-data: --length expects positive integers, got '" + text + "'");
    lengths.push_back(static_cast<int>(value));
  }
  return lengths;
}

// The benchmark options a sweep config would give, from the flags.
BenchmarkSpec generation_spec(const Args& args, const Benchmark& benchmark, const std::string& task,
                              const fs::path& data_dir) {
  BenchmarkSpec spec;
  spec.benchmark = benchmark.name;
  spec.key = "kvbench gen-data";
  spec.tasks = {task};
  spec.lengths = parse_lengths(args.get("length"));
  spec.seed = static_cast<uint64_t>(args.get_int("seed", 42));
  spec.data_dir = data_dir.string();
  spec.family = args.get_or("family", spec.family);
  if (benchmark.complete_spec) benchmark.complete_spec(spec);
  const int count = args.get_int("num", benchmark.generated_count_default);
  if (count < 1) throw InputError("--num must be at least 1");
  spec.samples = count;
  spec.samples_given = true;
  if (benchmark.set_generated_count) benchmark.set_generated_count(spec, count);
  return spec;
}

void write_samples(const std::vector<Sample>& samples, const std::string& out_path) {
  std::ofstream out(out_path);
  if (!out) throw InputError("cannot write --out " + out_path);
  for (const Sample& sample : samples) out << nlohmann::json(sample).dump() << "\n";
  out.close();
  if (!out) throw InputError("failed writing --out " + out_path);
}

}  // namespace

int gen_data(const std::vector<std::string>& argv) {
  const Args args("gen-data", argv, {"json"});
  args.allow_only({"benchmark", "task", "length", "num", "seed", "model", "out", "data-dir",
                   "template", "family", "json"});
  if (!args.has("benchmark") || !args.has("model") || !args.has("out") || !args.has("length"))
    throw InputError(std::string("kvbench gen-data: --benchmark, --length, --model and --out are "
                                 "required\n") +
                     kUsage);
  const Benchmark& benchmark = find_benchmark(args.get("benchmark"));
  const std::string out_path = args.get("out");
  const fs::path data_dir = args.get_or("data-dir", "");
  if (!data_dir.empty() && !fs::is_directory(data_dir))
    throw InputError("--data-dir " + data_dir.string() + " is not a folder");
  const std::string template_mode = args.get_or("template", "chat");
  if (template_mode != "chat" && template_mode != "base")
    throw InputError("--template must be chat or base, got '" + template_mode + "'");
  const std::string task = task_of(args, benchmark);
  const BenchmarkSpec spec = generation_spec(args, benchmark, task, data_dir);
  GroupSampleInputs inputs;
  inputs.data = DataSearch(data_dir);
  check_generated_task(benchmark, spec, task, inputs.data);  // before the model loads

  const LoadedModel model = load_tokenizer(args.get("model"));
  inputs.tokenizer = model.tokenizer.get();
  if (template_mode == "chat") inputs.frame = chat_frame(model.chat_template);
  std::vector<Sample> samples;
  for (const int length : spec.lengths) {
    inputs.progress = [&](int done, int total) {
      std::fprintf(stderr, "\r[gen-data] %s %s %d: %d/%d samples", benchmark.name.c_str(),
                   task.c_str(), length, done, total);
      if (done == total) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
    for (Sample& sample : generated_group_samples(benchmark, spec, task, length, inputs))
      samples.push_back(std::move(sample));
  }
  write_samples(samples, out_path);

  if (args.flag("json")) {
    std::printf("%s\n", nlohmann::json{{"benchmark", benchmark.name},
                                       {"task", task},
                                       {"samples", samples.size()},
                                       {"out", out_path},
                                       {"chat_template", model.chat_template}}
                            .dump()
                            .c_str());
  } else {
    std::printf("wrote %zu %s %s samples to %s\n", samples.size(), benchmark.name.c_str(),
                task.c_str(), out_path.c_str());
  }
  return 0;
}

}  // namespace kvb::cli
