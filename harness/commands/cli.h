// The kvbench subcommands. Each lives in harness/commands/cli_<name>.cc, parses its own Args,
// prints JSON on stdout with --json (human text otherwise) and returns the exit code. Errors are
// thrown (common/errors.h) and turned into a message on stderr and a non-zero exit by main().
#pragma once

#include <string>
#include <vector>

namespace kvb::cli {

using Command = int (*)(const std::vector<std::string>& argv);

int info(const std::vector<std::string>& argv);
int tokenize(const std::vector<std::string>& argv);
int logits(const std::vector<std::string>& argv);
int generate(const std::vector<std::string>& argv);
int gen_data(const std::vector<std::string>& argv);
int score(const std::vector<std::string>& argv);
int select(const std::vector<std::string>& argv);
int calibrate(const std::vector<std::string>& argv);
int run(const std::vector<std::string>& argv);
int merge(const std::vector<std::string>& argv);
int table(const std::vector<std::string>& argv);
int report(const std::vector<std::string>& argv);
int compare(const std::vector<std::string>& argv);
int bench(const std::vector<std::string>& argv);
int art_trace(const std::vector<std::string>& argv);
int make_checkpoint(const std::vector<std::string>& argv);

}  // namespace kvb::cli
