// libFuzzer target for RULER's QA source files (datasets/ruler/qa_task.cc): qa_1 reads SQuAD v2 dev
// (squad.json), qa_2 HotpotQA dev distractor (hotpotqa.json). Byte 0 bit 0 picks the task; the
// rest is the file, from which one sample of 512 tokens is generated with the default model's
// tokenizer. Any input must generate or raise InputError / FormatError / CapacityError naming
// the file. Seeds: make_fuzz_seeds.cc (the layout tests/datasets/ruler_test.cc writes).
#include <cstddef>
#include <cstdint>

#include "datasets/ruler/ruler.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool squad = (data[0] & 1) == 0;
  static const kvb::Tokenizer& tokenizer = kvb::fuzz::default_tokenizer();
  const auto folder = kvb::fuzz::scratch_dir() / "qa";
  std::filesystem::create_directories(folder);
  const auto file = folder / (squad ? "squad.json" : "hotpotqa.json");
  kvb::fuzz::write_file(file, kvb::fuzz::as_text(data + 1, size - 1));
  kvb::RulerDataPaths paths;
  paths.qa_dir = folder;
  kvb::GenerationRequest request;
  request.task = squad ? "qa_1" : "qa_2";
  request.length = 512;
  request.num_samples = 1;
  request.seed = data[0] >> 1;
  kvb::fuzz::accepts([&] {
    const auto samples = kvb::generate_ruler(request, tokenizer, kvb::ChatFrame{}, paths);
    if (samples.size() != 1) kvb::fuzz::violated("asked for one sample, got another count");
  });
  std::filesystem::remove(file);
  return 0;
}
