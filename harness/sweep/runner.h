// The sweep runner: walks the work units of a plan, hands the backend each sample's replayable
// cells of one prompt mode together (one prefill: engine/batch_generation.h), runs the other cells
// on their own, and writes one row per (cell, sample) to the store, each in its own transaction.
//
// The inference side is behind SweepBackend, so the runner's bookkeeping (resume, sharding,
// interruption, progress) is tested with a fake backend in milliseconds, and the real engine is
// one implementation of it (harness/sweep/engine_backend.h).
#pragma once

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "harness/sweep/store.h"
#include "harness/sweep/sweep.h"

namespace kvb {

class SweepBackend {
 public:
  virtual ~SweepBackend() = default;
  // Called before the first unit of each group (load the model, generate the group's samples).
  virtual void begin_group(const SampleGroup& group) = 0;
  // True when the cell's policy starts from a full-attention prefill (every kind except methods
  // that evict during prefill, such as CAKE's cascading or chunked prefill).
  virtual bool replays_prefill(const Cell& cell) const = 0;
  // Runs `cells` (all of one prompt mode) on one sample from one full-attention prefill that each
  // cell replays (a copy of it per cell, decoded together where the backend can). A single cell
  // that does not replay prefills for itself. One result per cell, in `cells` order.
  virtual std::vector<SampleResult> run_cells(const SampleGroup& group,
                                              const std::vector<const Cell*>& cells,
                                              int sample_index, PromptMode mode) = 0;
};

struct RunOptions {
  bool resume = false;
  bool prefill_reuse = true;
  // Set (e.g. by a SIGINT handler) to stop after the row in flight.
  const std::atomic<bool>* stop = nullptr;
  FILE* progress = stderr;  // nullptr: silent
  bool progress_is_tty = false;
};

struct RunSummary {
  int64_t run_id = 0;
  int64_t rows_written = 0;
  int64_t rows_skipped = 0;  // already in the database (resume)
  int64_t rows_planned = 0;
  int64_t prefills = 0;
  double seconds = 0;
  bool interrupted = false;
};

// Runs the plan into the store. `info` describes the run (begin_run fills its uuid and time).
// Without options.resume, a database that already holds rows of this plan is an InputError (so a
// repeated command never silently mixes two runs); with it, those rows are skipped.
RunSummary run_sweep(const SweepPlan& plan, SweepBackend& backend, ResultStore& store, RunInfo info,
                     const RunOptions& options);

// Progress on a terminal: one self-overwriting bar with rate and ETA. Elsewhere (logs, Slurm):
// plain lines, at most one per `plain_interval_s` and one at the end.
class ProgressReporter {
 public:
  ProgressReporter(FILE* out, bool tty, int64_t total, double plain_interval_s = 10.0);
  void set_done_before(int64_t rows) { done_ = skipped_ = rows; }
  void advance(const std::string& what);
  void finish();
  static std::string format_duration(double seconds);

 private:
  void print(bool final_line);

  FILE* out_;
  bool tty_;
  int64_t total_;
  int64_t done_ = 0;
  int64_t skipped_ = 0;
  double plain_interval_s_;
  double started_;
  double last_print_ = -1e9;
  std::string what_;
};

}  // namespace kvb
