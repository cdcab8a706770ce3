// kvbench: benchmark and evaluation harness for KV-cache compression. See README.md.
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "harness/commands/cli.h"

namespace {

struct Subcommand {
  const char* name;
  kvb::cli::Command run;
  const char* summary;
};

constexpr Subcommand kSubcommands[] = {
    {"info", kvb::cli::info, "model config, tokenizer kind, weight dtypes"},
    {"tokenize", kvb::cli::tokenize, "token ids of a text"},
    {"logits", kvb::cli::logits, "last-position logits for given ids"},
    {"generate", kvb::cli::generate, "greedy generation, optionally under a cache policy"},
    {"gen-data", kvb::cli::gen_data, "generate RULER / NIAH / InfiniteBench samples as JSONL"},
    {"score", kvb::cli::score, "score predictions with a benchmark's official metric"},
    {"select", kvb::cli::select, "kept / selected indices of a policy for given tensors"},
    {"calibrate", kvb::cli::calibrate, "offline BinaryPC projection calibration (OPC)"},
    {"run", kvb::cli::run, "run a sweep config into a SQLite database"},
    {"merge", kvb::cli::merge, "merge shard databases"},
    {"table", kvb::cli::table, "paper-style tables from a database"},
    {"report", kvb::cli::report, "HTML report with SVG plots"},
    {"compare", kvb::cli::compare, "regression check against a baseline"},
    {"bench", kvb::cli::bench, "TTFT / TPOT / memory with ratios to the hardware bound"},
    {"art-trace", kvb::cli::art_trace, "ART's stability readings on real decode steps"},
    {"make-checkpoint", kvb::cli::make_checkpoint, "synthetic bf16 HF folder of a preset"},
};

void print_usage(FILE* out) {
  std::fprintf(out,
               "usage: kvbench <command> [options]   (--json for machine-readable output)\n\n");
  for (const auto& sub : kSubcommands) std::fprintf(out, "  %-16s %s\n", sub.name, sub.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  for (const auto& sub : kSubcommands) {
    if (name != sub.name) continue;
    try {
      return sub.run(rest);
    } catch (const kvb::InputError& e) {
      std::fprintf(stderr, "kvbench %s: error: %s\n", sub.name, e.what());
      return 2;
    } catch (const kvb::FormatError& e) {
      std::fprintf(stderr, "kvbench %s: error: %s\n", sub.name, e.what());
      return 3;
    } catch (const kvb::CapacityError& e) {
      std::fprintf(stderr, "kvbench %s: error: %s\n", sub.name, e.what());
      return 4;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvbench %s: internal error: %s\n", sub.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "kvbench: unknown command '%s'\n\n", name.c_str());
  print_usage(stderr);
  return 2;
}
