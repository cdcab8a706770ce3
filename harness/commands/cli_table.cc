// kvbench table --db FILE.db --layout ruler|ruler-lengths|longbench|niah|infinitebench|
//               infinitebench-lengths|latency|memory
//               --format md|csv|latex [--json]
// kvbench table --db FILE.db --layout paired --against POLICY [--format ...] [--json]
//   (each policy against POLICY on the same samples: harness/report/paired.h)
#include <cstdio>
#include <iostream>

#include "common/errors.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/report/paired.h"
#include "harness/report/tables.h"
#include "harness/sweep/store.h"

namespace kvb::cli {

int table(const std::vector<std::string>& argv) {
  Args args("table", argv, {"json"});
  args.allow_only({"db", "layout", "format", "json", "against"});
  const std::string layout = args.get("layout");
  const std::string format = args.get_or("format", "md");
  const bool paired = layout == "paired";
  // Validate the choices before reading anything.
  if (paired && !args.has("against"))
    throw InputError(
        "--layout paired compares every policy with one: add --against POLICY "
        "(e.g. --against snapkv)");
  if (!paired && args.has("against"))
    throw InputError("--against goes with --layout paired (got --layout " + layout + ")");
  if (!paired) build_tables({}, layout);
  render_tables({}, format);
  ResultStore store(args.get("db"), ResultStore::Mode::kReadOnly);
  const auto tables = paired ? build_paired_tables(store.load_rows(), args.get("against"))
                             : build_tables(store.load_rows(), layout);
  if (args.flag("json")) {
    std::cout << nlohmann::json{{"layout", layout}, {"tables", tables_to_json(tables)}}.dump(2)
              << "\n";
    return 0;
  }
  if (tables.empty()) {
    std::fprintf(stderr, "kvbench table: %s has no results for layout '%s'\n",
                 args.get("db").c_str(), layout.c_str());
    return 0;
  }
  std::cout << render_tables(tables, format);
  return 0;
}

}  // namespace kvb::cli
