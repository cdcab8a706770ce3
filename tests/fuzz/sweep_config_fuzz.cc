// libFuzzer target for a sweep config (harness/sweep/config.cc: load_sweep_config and its
// validation), then what `kvbench run` does with it before the first row
// (harness/commands/cli_run.cc): the policy names against the registry, the plan
// (harness/sweep/sweep.cc) and each cell's cache plan (EngineBackend::check_cells). Any input must
// pass or raise InputError / FormatError naming the key. Seeds: make_fuzz_seeds.cc (the configs of
// configs/ and the parsed configs re-serialised).
#include <cstddef>
#include <cstdint>

#include "harness/sweep/config.h"
#include "harness/sweep/engine_backend.h"
#include "harness/sweep/sweep.h"
#include "policies/registry.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

// plan_sweep lists every work unit; `samples` may be up to 2^30 per group, a sweep that runs for
// years. Plans beyond this many units are validated but not listed (memory and time, not a parser
// fault): a shipped config's 78,000 units took 2.3 s to list under ASan and passed libFuzzer's
// 10 s limit on a loaded machine (third round, results/fuzzing.md).
constexpr int64_t kMaxUnits = 20000;

int64_t unit_bound(const kvb::SweepConfig& config) {
  int64_t units = 0;
  for (const auto& b : config.benchmarks) {
    const int64_t per_task = static_cast<int64_t>(b.lengths.size()) * b.samples *
                             static_cast<int64_t>(std::max<size_t>(1, b.depths.size()));
    units += per_task * static_cast<int64_t>(std::max<size_t>(1, b.tasks.size())) *
             static_cast<int64_t>(config.models.size());
  }
  return units;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> known = [] {
    std::vector<std::string> names;
    for (const auto& info : kvb::list_policies()) names.push_back(info.name);
    return names;
  }();
  const auto path = kvb::fuzz::scratch_dir() / "sweep.json";
  kvb::fuzz::write_file(path, kvb::fuzz::as_text(data, size));
  kvb::fuzz::accepts([&] {
    const kvb::SweepConfig config = kvb::load_sweep_config(path);
    kvb::check_policy_names(config, known);
    if (unit_bound(config) > kMaxUnits) return;
    const kvb::SweepPlan plan = kvb::plan_sweep(config, kvb::Shard{});
    kvb::EngineBackend backend(config, kvb::DataSearch::only({}), nullptr,
                               kvb::EngineBackendOptions{.device = "cpu"});
    backend.check_cells(plan.groups);
    // The same config parsed again from what was stored (the run record keeps `source`) must
    // give the same cells: a resumed run matches rows by cell key.
    const kvb::SweepConfig again = kvb::parse_sweep_config(config.source, path);
    const kvb::SweepPlan replan = kvb::plan_sweep(again, kvb::Shard{});
    if (replan.groups.size() != plan.groups.size())
      kvb::fuzz::violated("re-parsing the stored config changed the groups");
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      if (replan.groups[g].cells.size() != plan.groups[g].cells.size())
        kvb::fuzz::violated("re-parsing the stored config changed the cells");
      for (size_t c = 0; c < plan.groups[g].cells.size(); ++c) {
        const kvb::Cell& cell = plan.groups[g].cells[c];
        if (replan.groups[g].cells[c].key() != cell.key())
          kvb::fuzz::violated("re-parsing the stored config changed cell key " + cell.key());
        // The store keeps cells as JSON (harness/sweep/store.cc); reading one back keeps its key.
        if (kvb::cell_from_json(cell.to_json()).key() != cell.key())
          kvb::fuzz::violated("cell_from_json(to_json()) changed cell key " + cell.key());
      }
    }
  });
  return 0;
}
