// kvbench tokenize --model PATH (--text STR | --text-file FILE) [--bos] [--parse-special] [--json]
// Token ids of a text, no BOS unless --bos. Only the tokenizer is loaded (a vocab-only GGUF with
// no tensors works), so this is also how the tokenizer fixtures are checked end to end.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "engine/tokenizer.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"

namespace kvb::cli {
namespace {

constexpr const char* kUsage =
    "usage: kvbench tokenize --model PATH (--text STR | --text-file FILE) [--bos] "
    "[--parse-special] [--json]";

std::string read_text(const Args& args) {
  if (args.has("text") == args.has("text-file"))
    throw InputError(std::string("give exactly one of --text and --text-file; ") + kUsage);
  if (args.has("text")) return args.get("text");
  const std::string path = args.get("text-file");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError("cannot open --text-file '" + path + "'");
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

}  // namespace

int tokenize(const std::vector<std::string>& argv) {
  const Args args("tokenize", argv, {"bos", "parse-special", "json"});
  args.allow_only({"model", "text", "text-file", "bos", "parse-special", "json"});
  if (!args.has("model")) throw InputError(std::string("missing --model; ") + kUsage);
  const std::string text = read_text(args);
  const auto tokenizer = tokenizer_from_path(args.get("model"));
  const std::vector<TokenId> ids =
      tokenizer->encode(text, args.flag("bos"), args.flag("parse-special"));

  if (args.flag("json")) {
    const nlohmann::json out = {{"ids", ids}, {"tokenizer", tokenizer->kind()}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%zu tokens (%s)\n", ids.size(), tokenizer->kind().c_str());
  for (TokenId id : ids) {
    const std::string piece = tokenizer->decode({id});
    std::printf("%8d  %s\n", id,
                nlohmann::json(piece)
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                    .c_str());
  }
  return 0;
}

}  // namespace kvb::cli
