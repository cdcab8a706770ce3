#include "harness/sweep/runner.h"

#include <chrono>
#include <cmath>

#include "common/errors.h"

namespace kvb {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool stop_requested(const RunOptions& options) {
  return options.stop && options.stop->load(std::memory_order_relaxed);
}

std::string row_label(const SampleGroup& group, const Cell& cell, int sample_index) {
  std::string label = group.benchmark.benchmark + "/" + group.task + "/" +
                      std::to_string(group.length) + " #" + std::to_string(sample_index) + " " +
                      cell.policy;
  if (cell.budget) label += " " + cell.budget_text();
  return label;
}

}  // namespace

ProgressReporter::ProgressReporter(FILE* out, bool tty, int64_t total, double plain_interval_s)
    : out_(out),
      tty_(tty),
      total_(total),
      plain_interval_s_(plain_interval_s),
      started_(now_seconds()) {}

std::string ProgressReporter::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--";
  const long total = std::lround(seconds);
  char buffer[32];
  if (total >= 3600)
    std::snprintf(buffer, sizeof buffer, "%ldh%02ldm", total / 3600, total / 60 % 60);
  else if (total >= 60)
    std::snprintf(buffer, sizeof buffer, "%ldm%02lds", total / 60, total % 60);
  else
    std::snprintf(buffer, sizeof buffer, "%lds", total);
  return buffer;
}

void ProgressReporter::advance(const std::string& what) {
  ++done_;
  what_ = what;
  print(false);
}

void ProgressReporter::finish() { print(true); }

void ProgressReporter::print(bool final_line) {
  if (!out_) return;
  const double now = now_seconds();
  if (!tty_ && !final_line && now - last_print_ < plain_interval_s_ && done_ != total_) return;
  last_print_ = now;
  const double elapsed = now - started_;
  const int64_t fresh = done_ - skipped_;  // rows run in this session: the rate's basis
  const double rate = elapsed > 0 ? fresh / elapsed : 0;
  const double eta = rate > 0 ? (total_ - done_) / rate : NAN;
  const double fraction = total_ > 0 ? static_cast<double>(done_) / total_ : 1.0;
  if (tty_) {
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "\r\033[K[%s] %lld/%lld %3.0f%%  %.2f rows/s  ETA %s  %s", bar.c_str(),
                 static_cast<long long>(done_), static_cast<long long>(total_), 100 * fraction,
                 rate, format_duration(eta).c_str(), what_.substr(0, 50).c_str());
    if (final_line) std::fprintf(out_, "\n");
  } else {
    std::fprintf(out_,
                 "[kvbench run] %lld/%lld rows (%.0f%%), %.2f rows/s, elapsed %s, ETA %s%s%s\n",
                 static_cast<long long>(done_), static_cast<long long>(total_), 100 * fraction,
                 rate, format_duration(elapsed).c_str(), format_duration(eta).c_str(),
                 what_.empty() ? "" : ", last: ", what_.c_str());
  }
  std::fflush(out_);
}

RunSummary run_sweep(const SweepPlan& plan, SweepBackend& backend, ResultStore& store, RunInfo info,
                     const RunOptions& options) {
  RunSummary summary;
  summary.rows_planned = plan.total_rows();
  const auto finished = store.finished_rows();
  int64_t already = 0;
  for (const auto& unit : plan.units)
    for (const auto& cell : plan.groups[unit.group].cells)
      already += finished.count({cell.key(), unit.sample_index});
  if (already > 0 && !options.resume)
    throw InputError("database " + store.path().string() + " already holds " +
                     std::to_string(already) + " of this sweep's " +
                     std::to_string(summary.rows_planned) +
                     " results; add --resume to finish the sweep, or use another --db");

  info.prefill_reuse = options.prefill_reuse;
  summary.run_id = store.begin_run(info);
  ProgressReporter progress(options.progress, options.progress_is_tty, summary.rows_planned);
  progress.set_done_before(already);
  summary.rows_skipped = already;
  const double started = now_seconds();

  int current_group = -1;
  try {
    for (const auto& unit : plan.units) {
      const SampleGroup& group = plan.groups[unit.group];
      // Which cells of this unit still need running, per prompt mode, split by replayability.
      std::vector<const Cell*> pending;
      for (const auto& cell : group.cells)
        if (!finished.count({cell.key(), unit.sample_index})) pending.push_back(&cell);
      if (pending.empty()) continue;
      if (unit.group != current_group) {
        backend.begin_group(group);
        current_group = unit.group;
      }
      for (const PromptMode mode : {PromptMode::kQueryAware, PromptMode::kQuestionAgnostic}) {
        std::vector<const Cell*> replayed, own;
        for (const Cell* cell : pending) {
          if (cell->prompt_mode != mode) continue;
          (options.prefill_reuse && backend.replays_prefill(*cell) ? replayed : own)
              .push_back(cell);
        }
        auto store_rows = [&](const std::vector<const Cell*>& cells, bool reused) {
          std::vector<SampleResult> results =
              backend.run_cells(group, cells, unit.sample_index, mode);
          ++summary.prefills;
          for (size_t i = 0; i < cells.size(); ++i) {
            results.at(i).prefill_reused = reused;
            store.insert_result(store.ensure_cell(*cells[i]), unit.sample_index, summary.run_id,
                                results[i]);
            ++summary.rows_written;
            progress.advance(row_label(group, *cells[i], unit.sample_index));
          }
        };
        if (!replayed.empty()) store_rows(replayed, true);
        for (const Cell* cell : own) {
          if (stop_requested(options)) break;
          store_rows({cell}, false);  // a cell run on its own prefills for itself
        }
        if (stop_requested(options)) break;
      }
      if (stop_requested(options)) {
        summary.interrupted = true;
        break;
      }
    }
  } catch (...) {
    progress.finish();
    try {
      store.finish_run(summary.run_id, "failed");
    } catch (...) {
      // The original error matters more than a failure to mark the run.
    }
    throw;
  }
  summary.seconds = now_seconds() - started;
  progress.finish();
  store.finish_run(summary.run_id, summary.interrupted ? "interrupted" : "finished");
  return summary;
}

}  // namespace kvb
