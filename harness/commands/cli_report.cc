// kvbench report --db FILE.db --out DIR [--title TEXT] [--json]
// Writes DIR/index.html: a self-contained page with SVG plots and the tables.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/report/report.h"
#include "harness/sweep/store.h"

namespace kvb::cli {

int report(const std::vector<std::string>& argv) {
  Args args("report", argv, {"json"});
  args.allow_only({"db", "out", "title", "json"});
  const std::string db = args.get("db");
  const std::string out_dir = args.get("out");
  ResultStore store(db, ResultStore::Mode::kReadOnly);
  const auto rows = store.load_rows();
  const auto runs = store.load_runs();
  const auto path =
      write_report(rows, runs, args.get_or("title", "kvbench report: " + db), out_dir);
  if (args.flag("json")) {
    std::cout << nlohmann::json{{"report", path.string()}, {"results", rows.size()}}.dump(2)
              << "\n";
  } else {
    std::printf("report: %s (%zu results)\n", path.c_str(), rows.size());
  }
  return 0;
}

}  // namespace kvb::cli
