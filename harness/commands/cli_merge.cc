// kvbench merge --out FILE.db SHARD.db...
// Merges shard databases (or any kvbench databases) into one. Rows already in --out are kept and
// a repeated row is skipped, so merging is idempotent. The output is written in one transaction
// per input: a bad input leaves --out as it was before that input.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/sweep/store.h"

namespace kvb::cli {

int merge(const std::vector<std::string>& argv) {
  Args args("merge", argv, {"json"});
  args.allow_only({"out", "json", ""});
  const std::string out_path = args.get("out");
  const auto inputs = args.all("");
  if (inputs.empty())
    throw InputError("kvbench merge: give the shard databases to merge after --out FILE.db");
  // Open every input first, so that a missing or corrupt input fails before --out is touched.
  std::vector<std::unique_ptr<ResultStore>> shards;
  for (const auto& input : inputs) {
    if (std::filesystem::weakly_canonical(input) == std::filesystem::weakly_canonical(out_path))
      throw InputError("kvbench merge: input " + input + " is also --out");
    shards.push_back(std::make_unique<ResultStore>(input, ResultStore::Mode::kReadOnly));
  }
  ResultStore out(out_path, ResultStore::Mode::kReadWrite);
  nlohmann::json report = nlohmann::json::array();
  for (size_t i = 0; i < shards.size(); ++i) {
    const auto stats = out.merge_from(*shards[i]);
    report.push_back({{"input", inputs[i]},
                      {"runs_added", stats.runs_added},
                      {"rows_added", stats.rows_added},
                      {"rows_skipped", stats.rows_skipped}});
    if (!args.flag("json"))
      std::printf("merged %s: %lld rows added, %lld already present, %lld runs added\n",
                  inputs[i].c_str(), static_cast<long long>(stats.rows_added),
                  static_cast<long long>(stats.rows_skipped),
                  static_cast<long long>(stats.runs_added));
  }
  if (args.flag("json")) {
    std::cout << nlohmann::json{{"out", out_path}, {"rows", out.result_count()}, {"inputs", report}}
                     .dump(2)
              << "\n";
  } else {
    std::printf("%s now holds %lld results\n", out_path.c_str(),
                static_cast<long long>(out.result_count()));
  }
  return 0;
}

}  // namespace kvb::cli
