// A SweepBackend that runs no model: each (cell, sample) gets a result derived from a hash of its
// identity, so two runs of the same plan produce identical rows whatever order or process they
// ran in. It counts prefills and can sleep per row to make kill tests land mid-sweep.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "harness/sweep/runner.h"

namespace kvb::test {

class FakeBackend : public SweepBackend {
 public:
  int prefills = 0;
  int groups_begun = 0;
  int rows_run = 0;
  int sleep_ms = 0;
  // Policies named here start from scratch (like CAKE), the rest replay the snapshot.
  std::string own_prefill_policy = "cake";

  void begin_group(const SampleGroup&) override { ++groups_begun; }
  bool replays_prefill(const Cell& cell) const override {
    return cell.policy != own_prefill_policy;
  }
  std::vector<SampleResult> run_cells(const SampleGroup& group,
                                      const std::vector<const Cell*>& cells, int sample_index,
                                      PromptMode) override {
    ++prefills;
    std::vector<SampleResult> results;
    for (const Cell* cell : cells) results.push_back(run_cell(group, *cell, sample_index));
    return results;
  }
  virtual SampleResult run_cell(const SampleGroup& group, const Cell& cell, int sample_index) {
    if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    ++rows_run;
    const size_t h = std::hash<std::string>{}(cell.key() + "#" + std::to_string(sample_index));
    SampleResult r;
    r.sample_id =
        group.task + "/" + std::to_string(group.length) + "/" + std::to_string(sample_index);
    r.depth = group.benchmark.depths.empty()
                  ? -1
                  : group.benchmark.depths[sample_index % group.benchmark.depths.size()];
    r.prediction = "answer " + std::to_string(h % 1000);
    r.references = {"answer " + std::to_string(h % 997)};
    r.score = static_cast<double>(h % 5) / 4.0;
    r.tokens_in = cell.length;
    r.tokens_out = 8;
    r.prefill_ms = 10;
    r.compress_ms = cell.policy == "full" ? 0 : 1;
    r.tpot_ms = cell.policy == "full" ? 20 : 10;
    r.ttft_ms = r.prefill_ms + r.compress_ms + r.tpot_ms;
    r.kept_entries = cell.length;
    r.kv_bytes = 1000 * (cell.budget ? 25 : 100);
    r.peak_bytes = 1 << 20;
    return r;
  }
};

}  // namespace kvb::test
