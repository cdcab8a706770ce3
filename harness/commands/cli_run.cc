// kvbench run --config FILE.json --db FILE.db [--resume] [--shard i/N] [--no-prefill-reuse]
//             [--no-batch-cells] [--device cpu|cuda|auto] [--report DIR | --no-report]
//             [--lock-timeout SECONDS] [--json]
// Runs a sweep into a SQLite database, then prints the tables that have data and writes the HTML
// report. Everything that can be checked is checked before the first row is written: the config,
// the policy names and parameters, the model files, the database and the report folder.
// Ctrl-C stops after the row in flight (exit code 130); --resume continues where it stopped.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "common/errors.h"
#include "harness/commands/args.h"
#include "harness/commands/cli.h"
#include "harness/commands/cpu_options.h"
#include "harness/report/report.h"
#include "harness/report/tables.h"
#include "harness/sweep/benchmark_data.h"
#include "harness/sweep/config.h"
#include "harness/sweep/engine_backend.h"
#include "harness/sweep/run_info.h"
#include "harness/sweep/runner.h"
#include "harness/sweep/store.h"
#include "policies/registry.h"

namespace kvb::cli {
namespace {

// A signal handler can only reach static storage; this flag is the runner's stop request.
std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested.store(true); }

class StopOnInterrupt {
 public:
  StopOnInterrupt() {
    g_stop_requested.store(false);
    previous_int_ = std::signal(SIGINT, request_stop);
    previous_term_ = std::signal(SIGTERM, request_stop);
  }
  ~StopOnInterrupt() {
    std::signal(SIGINT, previous_int_);
    std::signal(SIGTERM, previous_term_);
  }

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

// A resumed sweep adds rows beside those of earlier runs in the database; the weights must be the
// ones those runs recorded (runs.models[].sha256), or one model name in a table would mix rows of
// two files. Checked before the first row is written.
void check_models_unchanged(const ResultStore& store, const nlohmann::json& models) {
  for (const RunRecord& run : store.load_runs()) {
    for (const auto& before : run.info.models) {
      if (!before.is_object() || !before.contains("name") || !before.contains("sha256")) continue;
      for (const auto& now : models) {
        if (now["name"] != before["name"] || now["sha256"] == before["sha256"]) continue;
        const auto text = [](const nlohmann::json& v) {
          return v.is_string() ? v.get<std::string>() : v.dump();
        };
        throw InputError(
            "model '" + now["name"].get<std::string>() + "' (" + now["path"].get<std::string>() +
            ") has SHA-256 " + now["sha256"].get<std::string>() + ", but run " +
            std::to_string(run.run_id) + " in " + store.path().string() + " recorded " +
            text(before["sha256"]) + " for it (" + text(before.value("path", nlohmann::json("?"))) +
            "): the file changed or was truncated since. Restore the file that run "
            "used, or start a new --db; no row was written");
      }
    }
  }
}

// One `kvbench run` per database at a time: an exclusive flock(2) on the database file, held until
// the process ends (the kernel drops it when a run is killed, so --resume never waits for a dead
// run). SQLite's own locks are per transaction; two sweeps interleaving their rows would each fail
// on the other's rows midway. Readers (table, report, merge) do not take it.
class RunLock {
 public:
  explicit RunLock(const std::string& db_path)
      : fd_(::open(db_path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0)
      throw InputError("cannot open database " + db_path + " to lock it: " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      ::close(fd_);
      if (error == EWOULDBLOCK)
        throw InputError(
            "database " + db_path +
            " is in use by another kvbench run; wait for it to "
            "finish (then add --resume) or use another --db. Stored results are untouched");
      throw InputError("cannot lock database " + db_path + ": " + std::strerror(error));
    }
  }
  ~RunLock() { ::close(fd_); }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_;
};

std::filesystem::path default_report_dir(const std::string& db) {
  const std::filesystem::path path(db);
  return path.parent_path() / "reports" / path.stem();
}

}  // namespace

int run(const std::vector<std::string>& argv) {
  Args args("run", argv, {"resume", "no-prefill-reuse", "no-batch-cells", "no-report", "json"});
  args.allow_only(
      with_cpu_options({"config", "db", "resume", "shard", "no-prefill-reuse", "no-batch-cells",
                        "device", "report", "no-report", "lock-timeout", "json"}));
  const ThreadLimit threads(args);
  const std::string config_path = args.get("config");
  const std::string db_path = args.get("db");
  const Shard shard = args.has("shard") ? Shard::parse(args.get("shard")) : Shard{};
  const bool json = args.flag("json");
  const double lock_timeout = args.get_double("lock-timeout", 5.0);
  if (lock_timeout < 0) throw InputError("--lock-timeout must be >= 0 seconds");

  // 1. The config, its policies and parameters, and the model files.
  const SweepConfig config = load_sweep_config(config_path);
  std::vector<std::string> known;
  for (const auto& info : list_policies()) known.push_back(info.name);
  check_policy_names(config, known);
  const SweepPlan plan = plan_sweep(config, shard);
  const DataSearch data(config.data_dir);
  EngineBackendOptions engine_options;
  engine_options.device = args.get_or("device", config.device);
  engine_options.batch_cells = !args.flag("no-batch-cells");
  engine_options.latency_samples = config.latency_samples;
  engine_options.weight_format = weight_format_option(args);
  engine_options.cpu = cpu_engine_options(args);  // the flags win over the config's keys
  if (!engine_options.cpu.kv_dtype) engine_options.cpu.kv_dtype = config.kv_dtype;
  if (!engine_options.cpu.numerics) engine_options.cpu.numerics = config.numerics;
  EngineBackend backend(config, data, json ? nullptr : stderr, engine_options);
  backend.check_cells(plan.groups);
  check_group_data(plan.groups, data);
  for (size_t i = 0; i < config.models.size(); ++i) {
    const std::string& path = config.models[i].path;
    if (path.rfind("preset:", 0) != 0 && !std::filesystem::exists(path))
      throw InputError(config_path + ": key 'models[" + std::to_string(i) + "]': model file " +
                       path + " does not exist (run harness/scripts/setup.sh for the default)");
  }

  // 2. Where the results go: the database and the report folder.
  {
    // The database's folder must exist already: nothing below may create it as a side effect.
    const std::filesystem::path db(db_path);
    const std::filesystem::path folder = db.has_parent_path() ? db.parent_path() : ".";
    std::error_code ec;
    if (!std::filesystem::exists(db, ec) && !std::filesystem::is_directory(folder, ec))
      throw InputError("cannot create database " + db_path + ": folder " + folder.string() +
                       " does not exist (create it first)");
  }
  std::filesystem::path report_dir;
  if (!args.flag("no-report")) {
    report_dir = args.has("report") ? std::filesystem::path(args.get("report"))
                                    : default_report_dir(db_path);
    std::error_code ec;
    std::filesystem::create_directories(report_dir, ec);
    if (ec || !std::filesystem::is_directory(report_dir) || access(report_dir.c_str(), W_OK) != 0)
      throw InputError("cannot write the report folder " + report_dir.string() + " (" +
                       (ec ? ec.message() : std::string("not a writable folder")) +
                       "); pass --report DIR or --no-report");
  }
  ResultStore store(db_path, ResultStore::Mode::kReadWrite, static_cast<int>(lock_timeout * 1000));
  const RunLock run_lock(db_path);

  // 3. Provenance, then the sweep.
  const bool tty = isatty(fileno(stderr));
  RunInfo info;
  info.config_name = config.name;
  info.config = config.source;
  info.shard = shard.to_string();
  info.git_commit = git_commit_of_source();
  info.host = host_name();
  info.cpu = cpu_description();
  info.gpu = gpu_description();
  info.library_versions = library_versions();
  info.library_versions["data"] = data_provenance(plan.groups, data);
  info.command_line = "kvbench run";
  for (const auto& a : argv) info.command_line += " " + a;
  for (const auto& m : config.models) {
    const LoadedModel& loaded = backend.model(m.path);
    info.models.push_back({{"name", m.name}, {"path", m.path}, {"sha256", loaded.sha256}});
  }
  backend.check_device(plan.groups);  // every cell's plan runs on the device, before row 1
  RunOptions options;
  options.resume = args.flag("resume");
  if (options.resume) check_models_unchanged(store, info.models);
  options.prefill_reuse = !args.flag("no-prefill-reuse");
  options.progress = stderr;
  options.progress_is_tty = tty;
  StopOnInterrupt interrupt_guard;
  options.stop = &g_stop_requested;
  if (!json)
    std::fprintf(stderr,
                 "[kvbench run] %s: %zu work units, %lld rows, shard %s, device %s, prefill "
                 "reuse %s, cells decoded %s\n",
                 config.name.c_str(), plan.units.size(), static_cast<long long>(plan.total_rows()),
                 shard.to_string().c_str(), backend.device().c_str(),
                 options.prefill_reuse ? "on" : "off",
                 engine_options.batch_cells ? "together" : "one at a time");
  const RunSummary summary = run_sweep(plan, backend, store, info, options);

  // 4. Tables and the report from everything the database holds.
  const auto rows = store.load_rows();
  std::filesystem::path report_path;
  if (!report_dir.empty())
    report_path = write_report(rows, store.load_runs(), "kvbench: " + config.name, report_dir);
  if (json) {
    std::cout << nlohmann::json{{"db", db_path},
                                {"rows_written", summary.rows_written},
                                {"rows_skipped", summary.rows_skipped},
                                {"rows_planned", summary.rows_planned},
                                {"prefills", summary.prefills},
                                {"seconds", summary.seconds},
                                {"interrupted", summary.interrupted},
                                {"report", report_path.string()}}
                     .dump(2)
              << "\n";
  } else {
    std::vector<std::string> layouts;
    for (const auto& benchmark : list_benchmarks()) layouts.push_back(benchmark.name);
    layouts.push_back("latency");
    for (const auto& layout : layouts) {
      const auto tables = build_tables(rows, layout);
      if (!tables.empty()) std::cout << render_tables(tables, "md") << "\n";
    }
    std::printf("%lld rows written, %lld already there, %lld prefills, %.1f s%s\n",
                static_cast<long long>(summary.rows_written),
                static_cast<long long>(summary.rows_skipped),
                static_cast<long long>(summary.prefills), summary.seconds,
                summary.interrupted ? " (interrupted: add --resume to continue)" : "");
    std::printf("database: %s\n", db_path.c_str());
    if (!report_path.empty()) std::printf("report: %s\n", report_path.c_str());
  }
  return summary.interrupted ? 130 : 0;
}

}  // namespace kvb::cli
