// libFuzzer target for the benchmark data files kvbench reads: LongBench's "{dataset}.jsonl"
// (datasets/longbench/loader.cc) and InfiniteBench's "{task}.jsonl" (datasets/infinitebench/
// loader.cc), both through the JSONL reader (datasets/jsonl_reader.cc). Byte 0 picks the file
// (a LongBench or LongBench-E dataset, or an InfiniteBench task, and a model family), byte 1 bit 0
// whether prompts are middle-truncated with the default model's tokenizer; the rest is the file.
// Any input must load or raise InputError / FormatError naming the file and line.
// Seeds: make_fuzz_seeds.cc.
#include <cstddef>
#include <cstdint>

#include "datasets/infinitebench/loader.h"
#include "datasets/longbench/loader.h"
#include "tests/fuzz/fuzz_choices.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const std::vector<std::pair<std::string, std::string>>& targets() {
  static const auto all = kvb::fuzz::benchmark_files(/*with_scored=*/false);
  return all;
}

// The official prompt templates always add text around the record's fields, and a sample written
// as JSON (gen-data's files) reads back as the same sample.
void check_sample(const kvb::Sample& s, const std::string& file) {
  if (s.full_user_message().empty())
    kvb::fuzz::violated(file + ": a sample with an empty prompt was accepted");
  const nlohmann::json written = s;
  if (nlohmann::json(written.get<kvb::Sample>()) != written)
    kvb::fuzz::violated(file + ": sample " + s.id + " does not survive to_json/from_json");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto& choice = targets()[data[0] % targets().size()];
  const std::string& benchmark = choice.first;
  const std::string& name = choice.second;
  const bool truncate = data[1] & 1;
  const bool gpt4 = data[1] & 2;
  const auto folder = kvb::fuzz::scratch_dir() / "bench";
  std::filesystem::create_directories(folder);
  const auto file = folder / (name + ".jsonl");
  kvb::fuzz::write_file(file, kvb::fuzz::as_text(data + 2, size - 2));
  kvb::fuzz::accepts([&] {
    if (benchmark == "longbench") {
      kvb::LongBenchLoadOptions options;
      if (truncate) {
        options.tokenizer = &kvb::fuzz::default_tokenizer();
        options.max_length = 64;
      }
      for (const kvb::Sample& s : kvb::load_longbench(folder.string(), name, options))
        check_sample(s, file.string());
    } else {
      kvb::InfiniteBenchLoadOptions options;
      options.family =
          gpt4 ? kvb::InfiniteBenchFamily::kGpt4 : kvb::InfiniteBenchFamily::kOpenModels;
      if (truncate) {
        options.tokenizer = &kvb::fuzz::default_tokenizer();
        options.max_length = 96;
      }
      for (const kvb::Sample& s : kvb::load_infinitebench(folder.string(), name, options))
        check_sample(s, file.string());
    }
  });
  std::filesystem::remove(file);
  return 0;
}
