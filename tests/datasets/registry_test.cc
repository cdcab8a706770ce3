// The benchmark registry: each benchmark declares its options, tasks, data, answer cut, metric and
// table; the harness relies on these declarations instead of testing benchmark names.
#include "datasets/registry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/errors.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

TEST(BenchmarkRegistry, EveryBenchmarkIsCompleteAndNamedOnce) {
  std::set<std::string> names;
  for (const Benchmark& b : list_benchmarks()) {
    SCOPED_TRACE(b.name);
    EXPECT_TRUE(names.insert(b.name).second);
    EXPECT_FALSE(b.title.empty());
    EXPECT_FALSE(b.source.empty());
    EXPECT_FALSE(b.table_tasks.empty());
    EXPECT_TRUE(b.samples);
    EXPECT_TRUE(b.score);
    // A benchmark that reads data files says where to get them.
    if (b.loads_from_files) EXPECT_FALSE(b.download_hint.empty());
    EXPECT_EQ(&find_benchmark(b.name), &b);
  }
  EXPECT_EQ(names, (std::set<std::string>{"ruler", "niah", "longbench", "infinitebench"}));
  try {
    find_benchmark("rular");
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("known: ruler, niah, longbench, infinitebench"),
              std::string::npos);
  }
  EXPECT_EQ(lookup_benchmark("rular"), nullptr);
}

// The official task orders: RULER's scripts/synthetic.yaml (13 tasks), InfiniteBench's
// src/eval_utils.py (12), LongBench's 21 datasets each with its LongBench-E variant.
TEST(BenchmarkRegistry, TablesFollowTheOfficialTaskOrder) {
  const Benchmark& ruler = find_benchmark("ruler");
  ASSERT_EQ(ruler.table_tasks.size(), 13u);
  EXPECT_EQ(ruler.table_tasks.front(), "niah_single_1");
  EXPECT_EQ(ruler.table_tasks[8], "vt");
  EXPECT_EQ(ruler.table_tasks.back(), "qa_2");
  EXPECT_EQ(ruler.layout, TableLayout::kPerTask);
  const Benchmark& infinite = find_benchmark("infinitebench");
  ASSERT_EQ(infinite.table_tasks.size(), 12u);
  EXPECT_EQ(infinite.table_tasks.front(), "passkey");
  EXPECT_EQ(infinite.table_tasks.back(), "code_debug");
  const Benchmark& longbench = find_benchmark("longbench");
  ASSERT_EQ(longbench.table_tasks.size(), 42u);
  EXPECT_EQ(longbench.table_tasks[0], "narrativeqa");
  EXPECT_EQ(longbench.table_tasks[1], "narrativeqa_e");
  EXPECT_EQ(longbench.table_tasks.back(), "repobench-p_e");
  EXPECT_EQ(longbench.layout, TableLayout::kLongBenchCategories);
  EXPECT_EQ(find_benchmark("niah").layout, TableLayout::kDepthGrid);
}

TEST(BenchmarkRegistry, OptionsDefaultsAndTaskChecks) {
  const Benchmark& niah = find_benchmark("niah");
  EXPECT_EQ(niah.default_tasks, std::vector<std::string>{"niah"});
  BenchmarkSpec spec;
  spec.benchmark = "niah";
  niah.complete_spec(spec);
  EXPECT_EQ(spec.depths, (std::vector<double>{0, 25, 50, 75, 100}));
  EXPECT_THROW(niah.check_task("niah_single_1"), InputError);

  EXPECT_TRUE(find_benchmark("ruler").default_tasks.empty());  // tasks are required
  EXPECT_NO_THROW(find_benchmark("ruler").check_task("cwe"));
  EXPECT_THROW(find_benchmark("ruler").check_task("niah_single_9"), InputError);
  EXPECT_THROW(find_benchmark("longbench").check_task("qasperr"), InputError);
  EXPECT_NO_THROW(find_benchmark("longbench").check_task("qasper_e"));
  EXPECT_TRUE(find_benchmark("longbench").lengths_optional);
  EXPECT_EQ(find_benchmark("longbench").default_tasks.size(), 16u);  // the KV papers' set
  EXPECT_THROW(find_benchmark("infinitebench").check_task("passkeys"), InputError);
  BenchmarkSpec infinite;
  infinite.benchmark = "infinitebench";
  infinite.family = "gpt5";
  try {
    find_benchmark("infinitebench").complete_spec(infinite);
    ADD_FAILURE() << "expected an OptionError";
  } catch (const OptionError& e) {
    EXPECT_EQ(e.option, "family");
  }
}

TEST(BenchmarkRegistry, WhichTasksLoadFromFiles) {
  BenchmarkSpec spec;
  spec.benchmark = "infinitebench";
  EXPECT_FALSE(loads_from_files(spec, "passkey"));  // generated at each length
  EXPECT_TRUE(loads_from_files(spec, "longbook_qa_eng"));
  spec.generate = false;
  EXPECT_TRUE(loads_from_files(spec, "passkey"));
  spec.benchmark = "longbench";
  EXPECT_TRUE(loads_from_files(spec, "qasper"));
  spec.benchmark = "ruler";
  EXPECT_FALSE(loads_from_files(spec, "niah_single_1"));
  spec.benchmark = "niah";
  EXPECT_FALSE(loads_from_files(spec, "niah"));
}

TEST(BenchmarkRegistry, DataFilesAreFoundCountedOrNamedWithTheirKey) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvb_registry_data";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "qasper.jsonl") << "{\"a\": 1}\n\n  \n{\"a\": 2}\n";
  BenchmarkSpec spec;
  spec.benchmark = "longbench";
  spec.key = "benchmarks[2]";
  spec.data_dir = dir.string();
  EXPECT_EQ(count_data_records(spec, "qasper"), 2);
  try {
    benchmark_data_file(spec, "hotpotqa");
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("key 'benchmarks[2].data_dir'"), std::string::npos);
    EXPECT_NE(message.find("THUDM/LongBench"), std::string::npos);  // where to get it
  }
  std::filesystem::remove_all(dir);
}

// NIAH: the answer is the first non-blank line (KVCache-Factory's newline stop, applied to the
// text); word recall scores it; the case-insensitive substring match is recorded beside it.
TEST(BenchmarkRegistry, NiahCutsTheFirstLineAndRecordsTheSubstringMatch) {
  Sample sample;
  sample.benchmark = "niah";
  sample.task = "niah";
  sample.references = {"eat a sandwich"};
  sample.extra = {{"stop_at_newline", true}, {"substring_answer", "eat a sandwich"}};
  const ScoredAnswer scored = score_answer("\n  To EAT a Sandwich.\nThen nap.", sample);
  EXPECT_EQ(scored.answer, "To EAT a Sandwich.");
  // Recall of the expected words, case aside; words split at whitespace only, so "sandwich."
  // is not "sandwich": 2 of 3.
  EXPECT_DOUBLE_EQ(scored.score, 2.0 / 3.0);
  EXPECT_EQ(scored.extra, nlohmann::json({{"substring_match", true}}));
  // The second line is not part of the answer: neither recall nor the match may see it.
  const ScoredAnswer later = score_answer("\nNo idea.\neat a sandwich", sample);
  EXPECT_EQ(later.answer, "No idea.");
  EXPECT_DOUBLE_EQ(later.score, 0.0);
  EXPECT_EQ(later.extra["substring_match"], false);
  EXPECT_EQ(score_answer("\n\n", sample).answer, "");
}

// RULER: string_match_all (share of references found) except the QA tasks' string_match_part.
TEST(BenchmarkRegistry, RulerScoresAgainstItsReferences) {
  Sample sample;
  sample.benchmark = "ruler";
  sample.task = "niah_multivalue";
  sample.references = {"1234", "5678"};
  const ScoredAnswer all = score_answer("The values are 1234 and 9.", sample);
  EXPECT_EQ(all.answer, "The values are 1234 and 9.");  // RULER keeps the whole text
  EXPECT_DOUBLE_EQ(all.score, 0.5);
  EXPECT_TRUE(all.extra.empty());
  sample.task = "qa_1";
  sample.references = {"Paris", "paris, france"};
  EXPECT_DOUBLE_EQ(score_answer("It is PARIS.", sample).score, 1.0);
  sample.task = "not_a_task";
  EXPECT_THROW(score_answer("x", sample), InputError);
}

// `kvbench score` reaches every benchmark through the registry: each scores a predictions file in
// its own record layout or refuses with an InputError naming itself; an unknown task is refused
// before the file is read, an empty file is an error, not a NaN score.
TEST(BenchmarkRegistry, EveryBenchmarkScoresFilesOrRefusesClearly) {
  const std::filesystem::path dir = test::fresh_temp_dir("kvb_registry_score_files");
  // One correct record carrying every layout's fields (pred/prediction, answers/outputs/
  // ground_truth): each benchmark reads its own and scores it 1.
  const std::string record =
      R"({"pred": "123", "answers": ["123"], "outputs": ["123"], "ground_truth": ["123"]})";
  std::ofstream(dir / "one.jsonl") << record << "\n\n" << record << "\n";
  std::ofstream(dir / "empty.jsonl") << "\n";
  for (const Benchmark& b : list_benchmarks()) {
    SCOPED_TRACE(b.name);
    const std::string task = b.table_tasks.front();
    if (!b.score_file) {
      try {
        score_predictions_file(b, task, (dir / "one.jsonl").string(), {});
        ADD_FAILURE() << "expected an InputError";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(b.name), std::string::npos) << e.what();
      }
      continue;
    }
    const FileScores scores = score_predictions_file(b, task, (dir / "one.jsonl").string(), {});
    EXPECT_EQ(scores.per_record, (std::vector<double>{1.0, 1.0}));  // the blank line is no record
    EXPECT_DOUBLE_EQ(scores.percent, 100.0);
    try {
      score_predictions_file(b, "no_such_task", (dir / "absent.jsonl").string(), {});
      ADD_FAILURE() << "expected an InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("no_such_task"), std::string::npos) << e.what();
    }
    try {
      score_predictions_file(b, task, (dir / "empty.jsonl").string(), {});
      ADD_FAILURE() << "expected an InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("no records"), std::string::npos) << e.what();
    }
  }
  Benchmark unscored;
  unscored.name = "toybench";
  try {
    score_predictions_file(unscored, "t", (dir / "one.jsonl").string(), {});
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("toybench does not score predictions files"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// LongBench's table has an "X_e" column for every dataset; 13 of them exist.
bool is_known_task(const Benchmark& b, const std::string& task) {
  try {
    if (b.check_task) b.check_task(task);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

// `kvbench gen-data` asks the registry too: a task read from data files is refused before any
// model is loaded, with a message naming the benchmark and the task.
TEST(BenchmarkRegistry, GenDataRefusesTasksLoadedFromFiles) {
  int refused = 0;
  for (const Benchmark& b : list_benchmarks()) {
    BenchmarkSpec spec;
    spec.benchmark = b.name;
    for (const std::string& task : b.table_tasks) {
      if (!loads_from_files(spec, task) || !is_known_task(b, task)) continue;
      SCOPED_TRACE(b.name + " " + task);
      ++refused;
      try {
        check_generated_task(b, spec, task, DataSearch());
        ADD_FAILURE() << "expected an InputError";
      } catch (const InputError& e) {
        EXPECT_NE(
            std::string(e.what()).find(b.name + " " + task + " is loaded from its data files"),
            std::string::npos)
            << e.what();
      }
    }
  }
  EXPECT_GT(refused, 0);  // LongBench's datasets and InfiniteBench's loaded tasks
  // NIAH's gen-data count is its depth grid: --num 3 gives depths 0, 50, 100, one sample each.
  const Benchmark& niah = find_benchmark("niah");
  BenchmarkSpec spec;
  niah.set_generated_count(spec, 3);
  EXPECT_EQ(spec.depths, (std::vector<double>{0, 50, 100}));
  EXPECT_EQ(niah.generated_count_default, 10);
}

}  // namespace
}  // namespace kvb
