// Tokenizer throughput on long prompts (RULER/NIAH fit lengths by re-tokenising 8K-128K-token
// texts). Text: the Paul Graham essays of the fixtures (~170K SmolLM2 tokens), tokenizer: SmolLM2
// (models/, or $KVB_MODEL), else the gpt-2 fixture vocab. Measured in the same run:
//   encode        the full path (special-token split, regex pre-tokenizer, cached piece merges)
//   uncached      pre-tokenizer + BPE merges of every piece, no cache (the baseline)
//   pretokenize   the regex split alone (a lower bound for any BPE encode)
// and the scaling of encode from 1x to 4x the text, which is ~4 when nothing is quadratic.
// Prints (CPU time, single thread): "<name>: <tokens/s> tokens/s (<ratio> x uncached)" and
// "scaling 4x text: <r> x time".
//
//   build/tests/benchmarks/tokenizer_bench [benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "engine/pretokenizer.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_bpe.h"

namespace {

namespace fs = std::filesystem;

struct Setup {
  std::unique_ptr<kvb::Tokenizer> tokenizer;
  std::unique_ptr<kvb::RegexPreTokenizer> pre_tokenizer;
  std::string text;
  size_t tokens = 0;
};

Setup& setup() {
  static Setup s = [] {
    Setup out;
    std::string model = KVB_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (const char* env = std::getenv("KVB_MODEL")) model = env;
    // data/ as harness/scripts/setup.sh fills it; ../shared/fixtures beside the checkout is only a
    // second place, tried when data/ has no essays.
    fs::path fixtures = fs::path(KVB_SOURCE_DIR) / "data";
    if (!fs::exists(fixtures / "haystack"))
      fixtures = fs::path(KVB_SOURCE_DIR).parent_path() / "shared" / "fixtures";
    if (!fs::exists(model)) model = (fixtures / "tokenizers" / "ggml-vocab-gpt-2.gguf").string();
    out.tokenizer = kvb::tokenizer_from_path(model);
    const std::string pre = out.tokenizer->kind().substr(out.tokenizer->kind().find(':') + 1);
    out.pre_tokenizer =
        std::make_unique<kvb::RegexPreTokenizer>(kvb::pre_tokenizer_spec(pre).regexes);
    const fs::path essays = fixtures / "haystack" / "pg_essays";
    if (fs::exists(essays)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::directory_iterator(essays)) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto& file : files) {
        std::ifstream in(file, std::ios::binary);
        std::stringstream buffer;
        buffer << in.rdbuf();
        out.text += buffer.str() + "\n\n";
      }
    } else {  // no fixtures: varied synthetic words
      for (int i = 0; i < 150000; ++i) out.text += "word" + std::to_string(i * 7919 % 5003) + " ";
    }
    out.tokens = out.tokenizer->encode(out.text).size();
    std::printf("tokenizer %s (%s), text %zu bytes = %zu tokens\n", model.c_str(),
                out.tokenizer->kind().c_str(), out.text.size(), out.tokens);
    return out;
  }();
  return s;
}

// Process CPU seconds per call: the work is single-threaded, and CPU time is what a shared
// machine's load does not inflate.
double seconds_of(const std::function<void()>& work, int repeats) {
  const auto cpu_now = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const double start = cpu_now();
  for (int i = 0; i < repeats; ++i) work();
  return (cpu_now() - start) / repeats;
}

void encode_full(const Setup& s) { benchmark::DoNotOptimize(s.tokenizer->encode(s.text)); }

void encode_uncached(const Setup& s) {
  const auto* bpe = dynamic_cast<const kvb::BpeTokenizer*>(s.tokenizer.get());
  std::vector<std::string_view> pieces;
  s.pre_tokenizer->split(s.text, &pieces);
  std::vector<kvb::TokenId> ids;
  for (std::string_view piece : pieces) bpe->encode_piece(piece, &ids);
  benchmark::DoNotOptimize(ids);
}

void pretokenize_only(const Setup& s) {
  std::vector<std::string_view> pieces;
  s.pre_tokenizer->split(s.text, &pieces);
  benchmark::DoNotOptimize(pieces);
}

void BM_Encode(benchmark::State& state, void (*work)(const Setup&)) {
  const Setup& s = setup();
  for (auto _ : state) work(s);
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(s.tokens) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_Encode, encode, encode_full)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, uncached, encode_uncached)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, pretokenize, pretokenize_only)->Unit(benchmark::kMillisecond);

void print_summary() {
  const Setup& s = setup();
  if (dynamic_cast<const kvb::BpeTokenizer*>(s.tokenizer.get()) == nullptr) return;
  encode_full(s);  // warm the piece cache, as repeated length fitting does
  const double encode = seconds_of([&] { encode_full(s); }, 3);
  const double uncached = seconds_of([&] { encode_uncached(s); }, 3);
  const double pretokenize = seconds_of([&] { pretokenize_only(s); }, 3);
  const auto rate = [&](double seconds) { return static_cast<double>(s.tokens) / seconds; };
  std::printf("encode: %.0f tokens/s (%.2f x uncached)\n", rate(encode), uncached / encode);
  std::printf("uncached: %.0f tokens/s (1.00 x uncached)\n", rate(uncached));
  std::printf("pretokenize: %.0f tokens/s (%.2f x uncached)\n", rate(pretokenize),
              uncached / pretokenize);
  const std::string four = s.text + s.text + s.text + s.text;
  const double one_x =
      seconds_of([&] { benchmark::DoNotOptimize(s.tokenizer->encode(s.text)); }, 2);
  const double four_x = seconds_of([&] { benchmark::DoNotOptimize(s.tokenizer->encode(four)); }, 2);
  std::printf("scaling 4x text: %.2f x time (4.00 = linear)\n", four_x / one_x);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  print_summary();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
