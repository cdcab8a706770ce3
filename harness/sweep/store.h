// The SQLite results store. One database holds any number of runs; each result row is one
// (cell, sample) and is written in its own transaction, so a crash or kill loses at most the sample
// in flight. WAL journaling lets tables and reports read while a sweep writes.
//
// Schema (version 1):
//   meta(key, value)                        schema_version, created_at
//   runs(run_id, run_uuid, started_at, finished_at, status, git_commit, config_name, config_json,
//        shard, host, cpu, gpu, library_versions, models, command_line, prefill_reuse)
//   cells(cell_id, cell_key UNIQUE, model, benchmark, task, length, policy, params, budget,
//         prompt_mode, dense_layers, max_new_tokens)
//   results(cell_id, sample_index, run_id, sample_id, depth, prediction, references, score,
//           ttft_ms, tpot_ms, prefill_ms, compress_ms, total_ms, tokens_in, tokens_out,
//           kept_entries, kv_bytes, peak_bytes, prefill_reused, extra, created_at)
//           PRIMARY KEY (cell_id, sample_index)
//
// Errors: a missing folder or unwritable file is an InputError naming the path; a locked database
// is an InputError saying who may hold it; a file that is not a (healthy) kvbench database is a
// FormatError. In every case nothing is written and existing rows stay as they were.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "harness/sweep/sweep.h"

struct sqlite3;

namespace kvb {

// What one (cell, sample) produced. Scores are fractions in [0, 1]; tables show them x100.
struct SampleResult {
  std::string sample_id;
  double depth = -1;  // NIAH needle depth in percent, -1 elsewhere
  std::string prediction;
  std::vector<std::string> references;
  double score = 0;
  double ttft_ms = 0;
  double tpot_ms = 0;
  double prefill_ms = 0;
  double compress_ms = 0;
  double total_ms = 0;
  int tokens_in = 0;
  int tokens_out = 0;
  int64_t kept_entries = 0;     // live (layer, KV head, token) entries after compression
  int64_t kv_bytes = 0;         // bytes those entries hold
  int64_t peak_bytes = 0;       // peak memory of the process / device during the sample
  bool prefill_reused = false;  // replayed from a shared prefill snapshot
  nlohmann::json extra = nlohmann::json::object();
};

struct RunInfo {
  std::string run_uuid;    // filled by begin_run when empty
  std::string started_at;  // ISO-8601 UTC
  std::string finished_at;
  std::string status;  // running | finished | interrupted | failed
  std::string git_commit;
  std::string config_name;
  nlohmann::json config;
  std::string shard;  // "0/1"
  std::string host;
  std::string cpu;
  std::string gpu;
  nlohmann::json library_versions = nlohmann::json::object();
  nlohmann::json models = nlohmann::json::array();  // [{name, path, sha256, bytes}]
  std::string command_line;
  bool prefill_reuse = true;
};

struct StoredRow {
  Cell cell;
  int sample_index = 0;
  int64_t run_id = 0;
  SampleResult result;
};

struct RunRecord {
  int64_t run_id = 0;
  RunInfo info;
};

class ResultStore {
 public:
  enum class Mode { kReadWrite, kReadOnly };
  // kReadWrite creates the file (not its folder) when absent. busy_timeout_ms: how long to wait for
  // a lock held by another process before failing with a clear error.
  ResultStore(const std::filesystem::path& path, Mode mode, int busy_timeout_ms = 5000);
  ~ResultStore();
  ResultStore(const ResultStore&) = delete;
  ResultStore& operator=(const ResultStore&) = delete;

  const std::filesystem::path& path() const { return path_; }

  int64_t begin_run(RunInfo& info);  // returns run_id; fills run_uuid and started_at
  void finish_run(int64_t run_id, const std::string& status);
  // Inserts the cell when new; returns its id either way.
  int64_t ensure_cell(const Cell& cell);
  // (cell key, sample index) of every stored result.
  std::set<std::pair<std::string, int>> finished_rows() const;
  // One transaction. Throws when the row exists already (a resumed run never writes twice).
  void insert_result(int64_t cell_id, int sample_index, int64_t run_id, const SampleResult& result);

  std::vector<StoredRow> load_rows() const;
  std::vector<RunRecord> load_runs() const;
  int64_t result_count() const;

  // Copies every run, cell and result of `other` into this store in one transaction. Rows already
  // present (same cell key and sample) are skipped and counted; runs are matched by run_uuid.
  struct MergeStats {
    int64_t runs_added = 0;
    int64_t rows_added = 0;
    int64_t rows_skipped = 0;
  };
  MergeStats merge_from(const ResultStore& other);

 private:
  void exec(const std::string& sql) const;
  void check_health(Mode mode);
  void create_schema();
  void check_every_result_has_its_cell() const;
  [[noreturn]] void fail(int code, const std::string& doing) const;

  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
};

}  // namespace kvb
