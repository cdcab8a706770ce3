#include "harness/sweep/store.h"

#include <sqlite3.h>

#include <chrono>
#include <ctime>
#include <map>
#include <random>

#include "common/errors.h"

namespace kvb {
namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
  run_id INTEGER PRIMARY KEY,
  run_uuid TEXT NOT NULL UNIQUE,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL,
  git_commit TEXT,
  config_name TEXT,
  config_json TEXT,
  shard TEXT,
  host TEXT,
  cpu TEXT,
  gpu TEXT,
  library_versions TEXT,
  models TEXT,
  command_line TEXT,
  prefill_reuse INTEGER);
CREATE TABLE IF NOT EXISTS cells(
  cell_id INTEGER PRIMARY KEY,
  cell_key TEXT NOT NULL UNIQUE,
  model TEXT NOT NULL,
  benchmark TEXT NOT NULL,
  task TEXT NOT NULL,
  length INTEGER NOT NULL,
  policy TEXT NOT NULL,
  params TEXT NOT NULL,
  budget TEXT NOT NULL,
  prompt_mode TEXT NOT NULL,
  dense_layers TEXT NOT NULL,
  max_new_tokens INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS results(
  cell_id INTEGER NOT NULL REFERENCES cells(cell_id),
  sample_index INTEGER NOT NULL,
  run_id INTEGER REFERENCES runs(run_id),
  sample_id TEXT,
  depth REAL,
  prediction TEXT,
  references_json TEXT,
  score REAL,
  ttft_ms REAL, tpot_ms REAL, prefill_ms REAL, compress_ms REAL, total_ms REAL,
  tokens_in INTEGER, tokens_out INTEGER,
  kept_entries INTEGER, kv_bytes INTEGER, peak_bytes INTEGER,
  prefill_reused INTEGER,
  extra TEXT,
  created_at TEXT NOT NULL,
  PRIMARY KEY(cell_id, sample_index));
)sql";

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string random_uuid() {
  std::random_device device;
  std::mt19937_64 rng(
      (static_cast<uint64_t>(device()) << 32) ^ device() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const uint64_t a = rng(), b = rng();
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%08x-%04x-4%03x-%04x-%012llx",
                static_cast<unsigned>(a >> 32), static_cast<unsigned>((a >> 16) & 0xffff),
                static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | (b >> 48 & 0x3fff)),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buffer;
}

// A prepared statement that finalizes itself. Binding is positional (1-based).
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) : db_(db) {
    code_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  int prepare_code() const { return code_; }
  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Statement& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  int step() { return sqlite3_step(stmt_); }
  std::string text(int col) const {
    const auto* p = sqlite3_column_text(stmt_, col);
    return p ? reinterpret_cast<const char*>(p) : "";
  }
  int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int code_ = SQLITE_OK;
};

nlohmann::json parse_json_column(const std::string& text, nlohmann::json fallback) {
  if (text.empty()) return fallback;
  return nlohmann::json::parse(text, nullptr, false).is_discarded() ? fallback
                                                                    : nlohmann::json::parse(text);
}

}  // namespace

[[noreturn]] void ResultStore::fail(int code, const std::string& doing) const {
  const std::string detail = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(code);
  const int primary = code & 0xff;
  const std::string where = path_.string();
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
    throw InputError("database " + where +
                     " is locked by another process (another kvbench run, "
                     "or an open sqlite3 shell with a transaction) while " +
                     doing +
                     "; wait for it to finish or use another --db. Stored results are untouched");
  if (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT)
    throw FormatError(where + " is not a healthy SQLite database (" + detail + ") while " + doing +
                      "; it was left as it is. Use another --db, or restore it from a copy");
  if (primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN || primary == SQLITE_PERM ||
      primary == SQLITE_IOERR || primary == SQLITE_FULL)
    throw InputError("cannot write database " + where + " (" + detail + ") while " + doing +
                     "; check that its folder exists and is writable and the disk has space");
  throw InputError("database " + where + ": " + detail + " while " + doing);
}

void ResultStore::exec(const std::string& sql) const {
  char* message = nullptr;
  const int code = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
  sqlite3_free(message);
  if (code != SQLITE_OK) fail(code, "running '" + sql.substr(0, 40) + "'");
}

ResultStore::ResultStore(const std::filesystem::path& path, Mode mode, int busy_timeout_ms)
    : path_(path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (mode == Mode::kReadOnly && !exists)
    throw InputError("database " + path.string() + " does not exist (run `kvbench run` first)");
  if (exists && fs::is_directory(path, ec))
    throw InputError("database path " + path.string() + " is a folder; give a file name");
  if (!exists) {
    const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
    if (!fs::is_directory(parent, ec))
      throw InputError("cannot create database " + path.string() + ": folder " + parent.string() +
                       " does not exist (create it first)");
  }
  const int flags =
      mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  const int code = sqlite3_open_v2(path.c_str(), &db_, flags, nullptr);
  if (code != SQLITE_OK) {
    const std::string detail = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(code);
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError("cannot open database " + path.string() + ": " + detail +
                     " (check the path and its permissions)");
  }
  sqlite3_busy_timeout(db_, busy_timeout_ms);
  try {
    check_health(mode);
    if (mode == Mode::kReadWrite) create_schema();
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    if (!exists) fs::remove(path, ec);  // leave no empty file behind after a failed create
    throw;
  }
}

ResultStore::~ResultStore() {
  if (db_) sqlite3_close(db_);
}

void ResultStore::check_health(Mode mode) {
  // Reading the schema is the first access to the file: a non-database fails here, before any
  // write could touch it.
  Statement tables(db_, "SELECT name FROM sqlite_master WHERE type='table'");
  if (tables.prepare_code() != SQLITE_OK) fail(tables.prepare_code(), "reading its schema");
  std::set<std::string> names;
  for (int code; (code = tables.step()) != SQLITE_DONE;) {
    if (code != SQLITE_ROW) fail(code, "reading its schema");
    names.insert(tables.text(0));
  }
  const bool empty = names.empty();
  if (!empty && !names.count("meta"))
    throw FormatError(path_.string() +
                      " is a SQLite database but not a kvbench results database "
                      "(no 'meta' table); it was left as it is. Use another --db");
  if (empty && mode == Mode::kReadOnly)
    throw FormatError(path_.string() + " is empty, not a kvbench results database");
  if (!empty) {
    Statement version(db_, "SELECT value FROM meta WHERE key='schema_version'");
    if (version.prepare_code() != SQLITE_OK) fail(version.prepare_code(), "reading its version");
    const int code = version.step();
    if (code != SQLITE_ROW && code != SQLITE_DONE) fail(code, "reading its version");
    if (code != SQLITE_ROW || version.text(0) != std::to_string(kSchemaVersion))
      throw FormatError(path_.string() + " has kvbench schema version '" +
                        (code == SQLITE_ROW ? version.text(0) : std::string("none")) +
                        "', this build reads version " + std::to_string(kSchemaVersion));
    // A damaged page would otherwise surface halfway through a sweep.
    Statement check(db_, "PRAGMA quick_check");
    if (check.prepare_code() != SQLITE_OK) fail(check.prepare_code(), "checking its integrity");
    const int check_code = check.step();
    if (check_code != SQLITE_ROW) fail(check_code, "checking its integrity");
    if (check.text(0) != "ok")
      throw FormatError(path_.string() + " is corrupt (integrity check: " + check.text(0) +
                        "); it was left as it is. Use another --db, or restore it from a copy");
    check_every_result_has_its_cell();
  }
}

// SQLite's integrity check passes a file whose rows are intact but whose references are not (a
// bit flipped in a cell_id): such results would drop out of every table, report and merge without
// a word, so they stop the opening instead (found by tests/fuzz/results_db_fuzz.cc).
void ResultStore::check_every_result_has_its_cell() const {
  Statement orphans(db_,
                    "SELECT count(*), min(r.cell_id) FROM results r "
                    "LEFT JOIN cells c USING(cell_id) WHERE c.cell_id IS NULL");
  if (orphans.prepare_code() != SQLITE_OK) fail(orphans.prepare_code(), "checking its cells");
  if (const int code = orphans.step(); code != SQLITE_ROW) fail(code, "checking its cells");
  if (orphans.integer(0) == 0) return;
  throw FormatError(path_.string() + " is damaged: " + std::to_string(orphans.integer(0)) +
                    " result rows refer to cells it does not hold (first cell_id " +
                    std::to_string(orphans.integer(1)) +
                    "); it was left as it is. Use another --db, or restore it from a copy");
}

void ResultStore::create_schema() {
  // WAL: readers (tables, report) never block the writer; a killed writer loses only its open
  // transaction. Switching modes needs a moment of exclusive access: a lock is reported clearly.
  {
    Statement wal(db_, "PRAGMA journal_mode=WAL");
    if (wal.prepare_code() != SQLITE_OK) fail(wal.prepare_code(), "enabling WAL");
    const int code = wal.step();
    if (code != SQLITE_ROW && code != SQLITE_DONE) fail(code, "enabling WAL");
  }  // finalized here: an open statement would hold a read lock and block COMMIT
  exec("PRAGMA synchronous=NORMAL");
  exec("PRAGMA foreign_keys=ON");
  exec("BEGIN IMMEDIATE");
  try {
    exec(kSchema);
    Statement insert(db_, "INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?), (?, ?)");
    insert.bind(1, std::string("schema_version")).bind(2, std::to_string(kSchemaVersion));
    insert.bind(3, std::string("created_at")).bind(4, utc_now());
    if (const int c = insert.step(); c != SQLITE_DONE) fail(c, "writing its version");
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

int64_t ResultStore::begin_run(RunInfo& info) {
  if (info.run_uuid.empty()) info.run_uuid = random_uuid();
  if (info.started_at.empty()) info.started_at = utc_now();
  if (info.status.empty()) info.status = "running";
  Statement insert(db_,
                   "INSERT INTO runs(run_uuid, started_at, finished_at, status, git_commit, "
                   "config_name, config_json, shard, host, cpu, gpu, library_versions, models, "
                   "command_line, prefill_reuse) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  insert.bind(1, info.run_uuid).bind(2, info.started_at).bind(3, info.finished_at);
  insert.bind(4, info.status).bind(5, info.git_commit).bind(6, info.config_name);
  insert.bind(7, info.config.dump()).bind(8, info.shard).bind(9, info.host).bind(10, info.cpu);
  insert.bind(11, info.gpu).bind(12, info.library_versions.dump()).bind(13, info.models.dump());
  insert.bind(14, info.command_line).bind(15, info.prefill_reuse ? 1 : 0);
  if (const int code = insert.step(); code != SQLITE_DONE) fail(code, "recording the run");
  return sqlite3_last_insert_rowid(db_);
}

void ResultStore::finish_run(int64_t run_id, const std::string& status) {
  Statement update(db_, "UPDATE runs SET status=?, finished_at=? WHERE run_id=?");
  update.bind(1, status).bind(2, utc_now()).bind(3, run_id);
  if (const int code = update.step(); code != SQLITE_DONE) fail(code, "closing the run");
}

int64_t ResultStore::ensure_cell(const Cell& cell) {
  const std::string key = cell.key();
  {
    Statement find(db_, "SELECT cell_id FROM cells WHERE cell_key=?");
    find.bind(1, key);
    const int code = find.step();
    if (code == SQLITE_ROW) return find.integer(0);
    if (code != SQLITE_DONE) fail(code, "looking up a cell");
  }
  Statement insert(db_,
                   "INSERT INTO cells(cell_key, model, benchmark, task, length, policy, params, "
                   "budget, prompt_mode, dense_layers, max_new_tokens) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?,?)");
  insert.bind(1, key).bind(2, cell.model).bind(3, cell.benchmark).bind(4, cell.task);
  insert.bind(5, cell.length).bind(6, cell.policy).bind(7, cell.params.dump());
  insert.bind(8, cell.budget_text()).bind(9, to_string(cell.prompt_mode));
  insert.bind(10, nlohmann::json(cell.dense_layers).dump()).bind(11, cell.max_new_tokens);
  if (const int code = insert.step(); code != SQLITE_DONE) fail(code, "recording a cell");
  return sqlite3_last_insert_rowid(db_);
}

std::set<std::pair<std::string, int>> ResultStore::finished_rows() const {
  std::set<std::pair<std::string, int>> rows;
  Statement query(db_,
                  "SELECT c.cell_key, r.sample_index FROM results r JOIN cells c USING(cell_id)");
  for (int code; (code = query.step()) != SQLITE_DONE;) {
    if (code != SQLITE_ROW) fail(code, "listing finished rows");
    rows.emplace(query.text(0), static_cast<int>(query.integer(1)));
  }
  return rows;
}

void ResultStore::insert_result(int64_t cell_id, int sample_index, int64_t run_id,
                                const SampleResult& r) {
  Statement insert(db_,
                   "INSERT INTO results(cell_id, sample_index, run_id, sample_id, depth, "
                   "prediction, references_json, score, ttft_ms, tpot_ms, prefill_ms, "
                   "compress_ms, total_ms, tokens_in, tokens_out, kept_entries, kv_bytes, "
                   "peak_bytes, prefill_reused, extra, created_at) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  insert.bind(1, cell_id).bind(2, sample_index).bind(3, run_id).bind(4, r.sample_id);
  insert.bind(5, r.depth).bind(6, r.prediction).bind(7, nlohmann::json(r.references).dump());
  insert.bind(8, r.score).bind(9, r.ttft_ms).bind(10, r.tpot_ms).bind(11, r.prefill_ms);
  insert.bind(12, r.compress_ms).bind(13, r.total_ms).bind(14, r.tokens_in);
  insert.bind(15, r.tokens_out).bind(16, r.kept_entries).bind(17, r.kv_bytes);
  insert.bind(18, r.peak_bytes).bind(19, r.prefill_reused ? 1 : 0).bind(20, r.extra.dump());
  insert.bind(21, utc_now());
  // Autocommit: the INSERT is its own transaction, durable once step() returns.
  if (const int code = insert.step(); code != SQLITE_DONE) fail(code, "storing a result");
}

std::vector<StoredRow> ResultStore::load_rows() const {
  Statement query(db_,
                  "SELECT c.cell_key, r.sample_index, r.run_id, r.sample_id, r.depth, "
                  "r.prediction, r.references_json, r.score, r.ttft_ms, r.tpot_ms, r.prefill_ms, "
                  "r.compress_ms, r.total_ms, r.tokens_in, r.tokens_out, r.kept_entries, "
                  "r.kv_bytes, r.peak_bytes, r.prefill_reused, r.extra "
                  "FROM results r JOIN cells c USING(cell_id) ORDER BY c.cell_id, r.sample_index");
  if (query.prepare_code() != SQLITE_OK) fail(query.prepare_code(), "reading results");
  std::vector<StoredRow> rows;
  for (int code; (code = query.step()) != SQLITE_DONE;) {
    if (code != SQLITE_ROW) fail(code, "reading results");
    StoredRow row;
    row.sample_index = static_cast<int>(query.integer(1));
    // The cell key and the references are JSON text; a file that passes SQLite's integrity check
    // can still hold damaged text there (an edited or bit-flipped database).
    try {
      row.cell = cell_from_json(nlohmann::json::parse(query.text(0)));
      row.result.references =
          parse_json_column(query.text(6), nlohmann::json::array()).get<std::vector<std::string>>();
    } catch (const std::exception& e) {
      throw FormatError(path_.string() + ": the result row of sample " +
                        std::to_string(row.sample_index) +
                        " has a damaged cell key or references (" + e.what() +
                        "); the database was left as it is. Restore it from a copy");
    }
    row.run_id = query.integer(2);
    SampleResult& r = row.result;
    r.sample_id = query.text(3);
    r.depth = query.real(4);
    r.prediction = query.text(5);
    r.score = query.real(7);
    r.ttft_ms = query.real(8);
    r.tpot_ms = query.real(9);
    r.prefill_ms = query.real(10);
    r.compress_ms = query.real(11);
    r.total_ms = query.real(12);
    r.tokens_in = static_cast<int>(query.integer(13));
    r.tokens_out = static_cast<int>(query.integer(14));
    r.kept_entries = query.integer(15);
    r.kv_bytes = query.integer(16);
    r.peak_bytes = query.integer(17);
    r.prefill_reused = query.integer(18) != 0;
    r.extra = parse_json_column(query.text(19), nlohmann::json::object());
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<RunRecord> ResultStore::load_runs() const {
  Statement query(db_,
                  "SELECT run_id, run_uuid, started_at, finished_at, status, git_commit, "
                  "config_name, config_json, shard, host, cpu, gpu, library_versions, models, "
                  "command_line, prefill_reuse FROM runs ORDER BY run_id");
  if (query.prepare_code() != SQLITE_OK) fail(query.prepare_code(), "reading runs");
  std::vector<RunRecord> runs;
  for (int code; (code = query.step()) != SQLITE_DONE;) {
    if (code != SQLITE_ROW) fail(code, "reading runs");
    RunRecord run;
    run.run_id = query.integer(0);
    RunInfo& i = run.info;
    i.run_uuid = query.text(1);
    i.started_at = query.text(2);
    i.finished_at = query.text(3);
    i.status = query.text(4);
    i.git_commit = query.text(5);
    i.config_name = query.text(6);
    i.config = parse_json_column(query.text(7), nlohmann::json::object());
    i.shard = query.text(8);
    i.host = query.text(9);
    i.cpu = query.text(10);
    i.gpu = query.text(11);
    i.library_versions = parse_json_column(query.text(12), nlohmann::json::object());
    i.models = parse_json_column(query.text(13), nlohmann::json::array());
    i.command_line = query.text(14);
    i.prefill_reuse = query.integer(15) != 0;
    runs.push_back(std::move(run));
  }
  return runs;
}

int64_t ResultStore::result_count() const {
  Statement query(db_, "SELECT count(*) FROM results");
  const int code = query.step();
  if (code != SQLITE_ROW) fail(code, "counting results");
  return query.integer(0);
}

ResultStore::MergeStats ResultStore::merge_from(const ResultStore& other) {
  MergeStats stats;
  const auto runs = other.load_runs();
  const auto rows = other.load_rows();
  std::set<std::string> known_uuids;
  for (const auto& run : load_runs()) known_uuids.insert(run.info.run_uuid);
  const auto finished = finished_rows();
  exec("BEGIN IMMEDIATE");
  try {
    std::map<int64_t, int64_t> run_ids;  // other's run_id -> ours
    for (const auto& run : runs) {
      if (known_uuids.count(run.info.run_uuid)) {
        for (const auto& mine : load_runs())
          if (mine.info.run_uuid == run.info.run_uuid) run_ids[run.run_id] = mine.run_id;
        continue;
      }
      RunInfo info = run.info;
      run_ids[run.run_id] = begin_run(info);
      ++stats.runs_added;
    }
    for (const auto& row : rows) {
      if (finished.count({row.cell.key(), row.sample_index})) {
        ++stats.rows_skipped;
        continue;
      }
      insert_result(ensure_cell(row.cell), row.sample_index, run_ids[row.run_id], row.result);
      ++stats.rows_added;
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return stats;
}

}  // namespace kvb
