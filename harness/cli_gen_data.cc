// kvbench gen-data: generate RULER / NIAH / InfiniteBench samples as JSONL (one kvb::Sample per
// line), fitted to --length with the model's own tokenizer and chat template.
//
//   kvbench gen-data --benchmark ruler|niah|infinitebench --task T --length N --num K --seed S
//                    --model PATH --out FILE.jsonl [--data-dir DIR] [--template chat|base]
//                    [--family yarn-mistral|gpt4] [--json]
//
// ruler: the 13 tasks; --template base drops the chat frame (kvpress's setting).
// niah: --length may be a comma list (the grid's context lengths); --num is the number of depths
//       (round(linspace(0, 100, K)), default 10); --task is "niah".
// infinitebench: passkey, number_string, kv_retrieval, math_find, prompted as --family does.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "datasets/generation.h"
#include "datasets/infinitebench/generate.h"
#include "datasets/infinitebench/loader.h"
#include "datasets/niah/niah.h"
#include "datasets/ruler/ruler.h"
#include "datasets/text_utils.h"
#include "engine/chat_template.h"
#include "engine/errors.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "harness/args.h"
#include "harness/cli.h"

namespace kvb::cli {
namespace fs = std::filesystem;

namespace {

constexpr char kUsage[] =
    "usage: kvbench gen-data --benchmark ruler|niah|infinitebench --task T --length N --num K "
    "--seed S --model PATH --out FILE.jsonl [--data-dir DIR] [--template chat|base] "
    "[--family yarn-mistral|gpt4] [--json]";

struct LoadedModel {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // chat_template() name
};

LoadedModel load_tokenizer(const fs::path& path) {
  if (!fs::exists(path))
    throw InputError("--model " + path.string() + " does not exist (a GGUF file or an HF folder; "
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

}  // namespace

int gen_data(const std::vector<std::string>& argv) {
  const Args args("gen-data", argv, {"json"});
  args.allow_only({"benchmark", "task", "length", "num", "seed", "model", "out", "data-dir",
                   "template", "family", "json"});
  if (!args.has("benchmark") || !args.has("model") || !args.has("out") || !args.has("length"))
    throw InputError(std::string("kvbench gen-data: --benchmark, --length, --model and --out are "
                                 "required\n") + kUsage);
  const std::string benchmark = args.get("benchmark");
  const std::string out_path = args.get("out");
  const fs::path data_dir = args.get_or("data-dir", "");
  if (!data_dir.empty() && !fs::is_directory(data_dir))
    throw InputError("--data-dir " + data_dir.string() + " is not a folder");
  const std::string template_mode = args.get_or("template", "chat");
  if (template_mode != "chat" && template_mode != "base")
    throw InputError("--template must be chat or base, got '" + template_mode + "'");
  const int seed = args.get_int("seed", 42);
  const int num = args.get_int("num", benchmark == "niah" ? 10 : 1);
  if (num < 1) throw InputError("--num must be at least 1");

  if (benchmark != "ruler" && benchmark != "niah" && benchmark != "infinitebench")
    throw InputError("--benchmark must be ruler, niah or infinitebench (LongBench and the other "
                     "InfiniteBench tasks are loaded, not generated), got '" + benchmark + "'");
  const std::string task = args.get_or("task", benchmark == "niah" ? "niah" : "");
  if (task.empty()) throw InputError(std::string("kvbench gen-data: missing --task\n") + kUsage);

  const LoadedModel model = load_tokenizer(args.get("model"));
  const ProgressFn progress = [&](int done, int total) {
    std::fprintf(stderr, "\r[gen-data] %s %s: %d/%d samples", benchmark.c_str(), task.c_str(),
                 done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };

  std::vector<Sample> samples;
  if (benchmark == "ruler") {
    const ChatFrame frame = template_mode == "chat" ? chat_frame(model.chat_template) : ChatFrame{};
    GenerationRequest request{task, args.get_int("length"), num, static_cast<uint64_t>(seed), data_dir};
    const RulerDataPaths paths = ruler_data_paths(DataSearch(data_dir));
    check_ruler_task_data(task, paths);
    samples = generate_ruler(request, *model.tokenizer, frame, paths, progress);
  } else if (benchmark == "niah") {
    if (task != "niah") throw InputError("NIAH has one task, 'niah'; got '" + task + "'");
    const RulerDataPaths paths = ruler_data_paths(DataSearch(data_dir));
    essay_files(paths.essays_dir, "NIAH haystack", paths.searched);
    NiahRequest request{parse_lengths(args.get("length")), niah_depths(num), paths.essays_dir};
    samples = generate_niah(request, *model.tokenizer, progress);
  } else {
    GenerationRequest request{task, args.get_int("length"), num, static_cast<uint64_t>(seed), data_dir};
    InfiniteBenchLoadOptions options;
    options.family = infinitebench_family(args.get_or("family", "yarn-mistral"));
    const std::vector<nlohmann::json> records =
        generate_infinitebench_records(request, *model.tokenizer, progress);
    for (size_t i = 0; i < records.size(); ++i) {
      Sample sample = infinitebench_sample_from_record(
          records[i], task, "generated " + task + " record " + std::to_string(i), options);
      sample.id = task + "/" + std::to_string(request.length) + "/" + std::to_string(i);
      sample.length = request.length;
      sample.extra["seed"] = seed;
      sample.extra["generated"] = true;
      samples.push_back(std::move(sample));
    }
  }

  std::ofstream out(out_path);
  if (!out) throw InputError("cannot write --out " + out_path);
  for (const Sample& sample : samples) out << nlohmann::json(sample).dump() << "\n";
  out.close();
  if (!out) throw InputError("failed writing --out " + out_path);

  if (args.flag("json")) {
    std::printf("%s\n", nlohmann::json{{"benchmark", benchmark},
                                       {"task", task},
                                       {"samples", samples.size()},
                                       {"out", out_path},
                                       {"chat_template", model.chat_template}}
                            .dump()
                            .c_str());
  } else {
    std::printf("wrote %zu %s %s samples to %s\n", samples.size(), benchmark.c_str(), task.c_str(),
                out_path.c_str());
  }
  return 0;
}

}  // namespace kvb::cli
