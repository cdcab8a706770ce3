// kvbench compare --baseline FILE --candidate FILE.db [--max-accuracy-drop X]
//                 [--max-latency-ratio Y] [--json]
// kvbench compare --candidate FILE.db --write-baseline FILE.json
// Exit code 0 when nothing regressed, 1 on a regression (the diff table says which).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/errors.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/report/compare.h"

namespace kvb::cli {

int compare(const std::vector<std::string>& argv) {
  Args args("compare", argv, {"json"});
  args.allow_only({"baseline", "candidate", "max-accuracy-drop", "max-latency-ratio",
                   "write-baseline", "json"});
  const std::string candidate_path = args.get("candidate");
  if (auto out = args.maybe("write-baseline")) {
    const nlohmann::json summary = load_summary(candidate_path);
    // Written beside the target and renamed over it, so a failed write keeps the old baseline.
    const std::string partial = *out + ".partial";
    {
      std::ofstream file(partial);
      if (!file) throw InputError("cannot write " + *out + " (check that its folder exists)");
      file << summary.dump(2) << "\n";
      file.close();
      if (!file) {
        std::filesystem::remove(partial);
        throw InputError("writing " + *out + " failed (" + *out + " was left as it was)");
      }
    }
    std::error_code ec;
    std::filesystem::rename(partial, *out, ec);
    if (ec) {
      std::filesystem::remove(partial);
      throw InputError("cannot replace " + *out + ": " + ec.message());
    }
    std::printf("wrote %s (%zu accuracy and %zu latency entries)\n", out->c_str(),
                summary["accuracy"].size(), summary["latency"].size());
    return 0;
  }
  CompareOptions options;
  options.max_accuracy_drop = args.get_double("max-accuracy-drop", options.max_accuracy_drop);
  options.max_latency_ratio = args.get_double("max-latency-ratio", options.max_latency_ratio);
  if (options.max_accuracy_drop < 0) throw InputError("--max-accuracy-drop must be >= 0 (points)");
  if (options.max_latency_ratio < 1)
    throw InputError("--max-latency-ratio must be >= 1 (a factor over the baseline's ratio)");
  const auto baseline = load_summary(args.get("baseline"));
  const auto candidate = load_summary(candidate_path);
  const CompareResult result = compare_summaries(baseline, candidate, options);
  if (args.flag("json")) {
    std::cout << result.to_json().dump(2) << "\n";
  } else {
    std::cout << render_tables({result.diff}, "md");
    std::printf(
        "\n%d of %d checks regressed (accuracy drop > %.2f points, TPOT/Full ratio > "
        "%.2fx baseline)\n",
        result.regressions, result.compared, options.max_accuracy_drop, options.max_latency_ratio);
  }
  return result.regressions > 0 ? 1 : 0;
}

}  // namespace kvb::cli
