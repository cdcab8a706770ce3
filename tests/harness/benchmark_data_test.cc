// LongBench v1 and InfiniteBench as sweep benchmarks: tiny official-format JSONL files written
// here, config validation, sample counts at plan time, loading (prompts, skip list, truncation),
// and a sweep on the fake backend scored with the official metrics into the LongBench /
// InfiniteBench table layouts.
#include "harness/sweep/benchmark_data.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/errors.h"
#include "datasets/longbench/longbench.h"
#include "datasets/scoring.h"
#include "harness/report/tables.h"
#include "tests/harness/fake_backend.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return test::fresh_temp_dir("kvb_bench_data_" + name);
}

void write_jsonl(const fs::path& path, const std::vector<nlohmann::json>& records) {
  std::ofstream out(path);
  for (const auto& r : records) out << r.dump() << "\n";
  out << "\n";  // a trailing blank line is not a record
}

nlohmann::json longbench_record(const std::string& context, const std::string& input,
                                const std::vector<std::string>& answers, const std::string& id,
                                const std::vector<std::string>& classes = {}) {
  nlohmann::json r = {{"input", input}, {"context", context}, {"answers", answers}, {"length", 120},
                      {"dataset", "x"}, {"language", "en"},   {"_id", id}};
  r["all_classes"] = classes.empty() ? nlohmann::json(nullptr) : nlohmann::json(classes);
  return r;
}

// Records in the released layout of THUDM/LongBench data.zip (field names as in the files).
fs::path make_longbench_dir(const std::string& name) {
  const fs::path dir = fresh_dir(name + "-lb") / "longbench";
  fs::create_directories(dir);
  write_jsonl(
      dir / "qasper.jsonl",
      {longbench_record("Paper A studies owls.", "What does paper A study?", {"owls"}, "q0"),
       longbench_record("Paper B studies bats.", "What does paper B study?", {"bats"}, "q1"),
       longbench_record("Paper C studies moles.", "What does paper C study?", {"moles"}, "q2")});
  write_jsonl(dir / "narrativeqa.jsonl",
              {longbench_record("Tom sails to Oslo.", "Where does Tom sail?", {"Oslo"}, "n0")});
  const std::vector<std::string> classes = {"Description", "Entity", "Location"};
  write_jsonl(dir / "trec.jsonl",
              {longbench_record("Question: What is a owl?\nType: Description", "What is a bat?",
                                {"Description"}, "t0", classes),
               longbench_record("Question: Where is Oslo?\nType: Location", "Where is Rome?",
                                {"Location"}, "t1", classes)});
  write_jsonl(dir / "lcc.jsonl",
              {longbench_record("def f(x):\n    return x\n", "", {"return x + 1"}, "c0")});
  write_jsonl(dir / "passage_count.jsonl",
              {longbench_record("Paragraph 1: a\nParagraph 2: b", "", {"2"}, "p0")});
  return dir;
}

// InfiniteBench's released layout: id, context, input, answer, options.
fs::path make_infinitebench_dir(const std::string& name) {
  const fs::path dir = fresh_dir(name + "-ib") / "infinitebench";
  fs::create_directories(dir);
  write_jsonl(dir / "longbook_choice_eng.jsonl", {{{"id", 0},
                                                   {"context", "The cat is named Tom."},
                                                   {"input", "What is the cat named?"},
                                                   {"answer", {"Tom"}},
                                                   {"options", {"Jerry", "Tom", "Spike", "Tyke"}}},
                                                  {{"id", 1},
                                                   {"context", "The dog is named Rex."},
                                                   {"input", "What is the dog named?"},
                                                   {"answer", {"Rex"}},
                                                   {"options", {"Rex", "Tom", "Max", "Bo"}}}});
  write_jsonl(dir / "kv_retrieval.jsonl",
              {{{"id", 0},
                {"context", "JSON data:\n{\"a1b2\": \"c3d4\", \"e5f6\": \"g7h8\"}"},
                {"input", "e5f6"},
                {"answer", "g7h8"},
                {"options", nlohmann::json::array()}}});
  return dir;
}

SweepConfig config_for(const fs::path& longbench, const fs::path& infinitebench,
                       const std::string& extra_longbench_keys = "") {
  const std::string text = R"({
    "models": ["m.gguf"],
    "benchmarks": [
      {"benchmark": "longbench", "tasks": ["qasper", "narrativeqa", "trec", "lcc", "passage_count"],
       "data_dir": ")" + longbench.string() +
                           "\"" + extra_longbench_keys + R"(},
      {"benchmark": "infinitebench", "tasks": ["longbook_choice_eng", "kv_retrieval"],
       "lengths": [4096], "generate": false, "data_dir": ")" +
                           infinitebench.string() + R"("}],
    "policies": ["full", "streamingllm"],
    "budgets": ["20%"]})";
  return parse_sweep_config(nlohmann::json::parse(text), "sweep.json");
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

TEST(LongBenchConfig, DefaultsToThePapersSixteenDatasetsAndTheModelsLimit) {
  const SweepConfig config = parse_sweep_config(
      nlohmann::json::parse(R"({"models": ["m.gguf"], "benchmarks": [{"benchmark": "longbench"}],
                                "policies": ["full"]})"),
      "sweep.json");
  const BenchmarkSpec& spec = config.benchmarks[0];
  EXPECT_EQ(spec.tasks, longbench_kv_paper_datasets());
  EXPECT_EQ(spec.tasks.size(), 16u);
  EXPECT_EQ(spec.lengths, std::vector<int>{0});
  EXPECT_FALSE(spec.samples_given);
  EXPECT_EQ(fs::path(spec.data_dir).filename(), "longbench");
  EXPECT_EQ(spec.key, "benchmarks[0]");
}

TEST(LongBenchConfig, ErrorsNameTheKey) {
  auto parse = [](const std::string& benchmark) {
    return [benchmark] {
      parse_sweep_config(nlohmann::json::parse(R"({"models": ["m.gguf"], "benchmarks": [)" +
                                               benchmark + R"(], "policies": ["full"]})"),
                         "sweep.json");
    };
  };
  std::string e = error_of(parse(R"({"benchmark": "longbench", "tasks": ["qasperr"]})"));
  EXPECT_NE(e.find("benchmarks[0].tasks[0]"), std::string::npos) << e;
  EXPECT_NE(e.find("qasperr"), std::string::npos) << e;
  e = error_of(parse(R"({"benchmark": "infinitebench", "tasks": ["passkeyy"], "lengths": [512]})"));
  EXPECT_NE(e.find("benchmarks[0].tasks[0]"), std::string::npos) << e;
  e = error_of(parse(R"({"benchmark": "infinitebench", "tasks": ["passkey"], "lengths": [512],
                         "family": "llama"})"));
  EXPECT_NE(e.find("benchmarks[0].family"), std::string::npos) << e;
  e = error_of(parse(R"({"benchmark": "infinitebench", "tasks": ["passkey"], "lengths": [512],
                         "generate": "no"})"));
  EXPECT_NE(e.find("benchmarks[0].generate"), std::string::npos) << e;
  e = error_of(parse(R"({"benchmark": "ruler", "tasks": ["vt"], "lengths": [512],
                         "data_dir": "x"})"));
  EXPECT_NE(e.find("benchmarks[0].data_dir"), std::string::npos) << e;
  e = error_of(parse(R"({"benchmark": "longbench", "family": "gpt4"})"));
  EXPECT_NE(e.find("benchmarks[0].family"), std::string::npos) << e;
  e = error_of(parse(R"({"benchmark": "infinitebench", "tasks": ["passkey"]})"));
  EXPECT_NE(e.find("benchmarks[0].lengths"), std::string::npos) << e;
}

TEST(LongBenchData, MissingFolderOrFileNamesTheKeyAtPlanTime) {
  const fs::path longbench = make_longbench_dir("missing");
  const fs::path infinitebench = make_infinitebench_dir("missing");
  const SweepConfig absent = config_for(longbench / "nowhere", infinitebench);
  std::string e = error_of([&] { plan_sweep(absent, Shard{}); });
  EXPECT_NE(e.find("benchmarks[0].data_dir"), std::string::npos) << e;
  EXPECT_NE(e.find("nowhere"), std::string::npos) << e;
  EXPECT_NE(e.find("LongBench"), std::string::npos) << e;
  fs::remove(longbench / "trec.jsonl");
  e = error_of([&] { plan_sweep(config_for(longbench, infinitebench), Shard{}); });
  EXPECT_NE(e.find("trec.jsonl"), std::string::npos) << e;
  EXPECT_NE(e.find("benchmarks[0].data_dir"), std::string::npos) << e;
  std::ofstream(longbench / "trec.jsonl") << "\n\n";
  e = error_of([&] { plan_sweep(config_for(longbench, infinitebench), Shard{}); });
  EXPECT_NE(e.find("no records"), std::string::npos) << e;
}

TEST(LongBenchData, SampleCountsComeFromTheFilesCappedBySamples) {
  const fs::path longbench = make_longbench_dir("counts");
  const fs::path infinitebench = make_infinitebench_dir("counts");
  std::map<std::string, int> counts;
  for (const auto& g : expand_groups(config_for(longbench, infinitebench)))
    counts[g.task] = g.sample_count;
  EXPECT_EQ(counts, (std::map<std::string, int>{{"qasper", 3},
                                                {"narrativeqa", 1},
                                                {"trec", 2},
                                                {"lcc", 1},
                                                {"passage_count", 1},
                                                {"longbook_choice_eng", 2},
                                                {"kv_retrieval", 1}}));
  counts.clear();
  for (const auto& g : expand_groups(config_for(longbench, infinitebench, R"(, "samples": 2)")))
    counts[g.task] = g.sample_count;
  EXPECT_EQ(counts["qasper"], 2);
  EXPECT_EQ(counts["trec"], 2);
  EXPECT_EQ(counts["lcc"], 1);
}

TEST(LongBenchData, SamplesCarryTheOfficialPromptsAndSkipList) {
  const fs::path longbench = make_longbench_dir("samples");
  const fs::path infinitebench = make_infinitebench_dir("samples");
  const auto groups = expand_groups(config_for(longbench, infinitebench));
  GroupSampleInputs inputs;  // no tokenizer: prompts stay whole
  for (const auto& group : groups) {
    const auto samples = samples_for_group(group, inputs);
    ASSERT_EQ(static_cast<int>(samples.size()), group.sample_count) << group.task;
    const Sample& s = samples[0];
    EXPECT_EQ(s.benchmark, group.benchmark.benchmark);
    if (group.task == "qasper") {
      const LongBenchDataset& d = longbench_dataset("qasper");
      EXPECT_EQ(s.full_user_message(),
                longbench_format_prompt(d, "Paper A studies owls.", "What does paper A study?"));
      EXPECT_TRUE(s.use_chat_template);
      EXPECT_EQ(s.max_new_tokens, d.max_new_tokens);
      EXPECT_EQ(s.references, std::vector<std::string>{"owls"});
      EXPECT_FALSE(s.question_part.empty());
    }
    if (group.task == "trec") {
      EXPECT_FALSE(s.use_chat_template);  // pred.py's skip list
      EXPECT_EQ(s.all_classes.size(), 3u);
    }
    if (group.task == "longbook_choice_eng") {
      EXPECT_EQ(s.references, (std::vector<std::string>{"Tom", "B"}));
    }
    if (group.task == "kv_retrieval") {
      EXPECT_NE(s.full_user_message().find("e5f6"), std::string::npos);
    }
  }
}

// The fake backend's rows, with predictions scored by the official metrics: "full" answers every
// sample right, "streamingllm" only sample 0, so the expected table is known by hand.
class ScoringBackend : public test::FakeBackend {
 public:
  void begin_group(const SampleGroup& group) override {
    FakeBackend::begin_group(group);
    samples_ = samples_for_group(group, GroupSampleInputs{});
  }
  SampleResult run_cell(const SampleGroup& group, const Cell& cell, int sample_index) override {
    SampleResult r = FakeBackend::run_cell(group, cell, sample_index);
    const Sample& s = samples_.at(sample_index);
    const bool right = cell.policy == "full" || sample_index == 0;
    // The answer, then a second line that only first-line post-processing removes (trec: a
    // second class name would halve the classification score).
    r.prediction = right ? s.references.back() + (s.task == "trec" ? "\nEntity" : "") : "";
    r.references = s.references;
    r.score = score_sample(s.benchmark, s.task, r.prediction, s);
    return r;
  }

 private:
  std::vector<Sample> samples_;
};

TEST(LongBenchSweep, FakeBackendEndToEndIntoTheLongBenchAndInfiniteBenchTables) {
  const fs::path longbench = make_longbench_dir("sweep");
  const fs::path infinitebench = make_infinitebench_dir("sweep");
  const fs::path db = longbench.parent_path() / "r.db";
  const SweepPlan plan = plan_sweep(config_for(longbench, infinitebench), Shard{});
  ResultStore store(db, ResultStore::Mode::kReadWrite);
  ScoringBackend backend;
  RunOptions options;
  options.progress = nullptr;
  const RunSummary summary = run_sweep(plan, backend, store, RunInfo{}, options);
  // (3 + 1 + 2 + 1 + 1 LongBench + 2 + 1 InfiniteBench samples) x 2 cells
  EXPECT_EQ(summary.rows_written, 22);
  const auto rows = store.load_rows();

  const auto lb = build_tables(rows, "longbench");
  ASSERT_EQ(lb.size(), 1u);
  EXPECT_EQ(lb[0].columns,
            (std::vector<std::string>{"Policy", "Budget", "narrativeqa", "qasper", "trec",
                                      "passage_count", "lcc", "SD-QA avg", "Few-shot avg",
                                      "Synth avg", "Code avg", "Avg", "Avg of categories"}));
  ASSERT_EQ(lb[0].rows.size(), 2u);
  // qasper: 3 of 3 (Wilson's 95% interval 43.9-100); trec: 2 samples, n and no interval.
  EXPECT_EQ(lb[0].rows[0], (std::vector<std::string>{"full", "full", "100.0", "100.0 (43.9–100.0)",
                                                     "100.0 (n=2)", "100.0", "100.0", "100.0",
                                                     "100.0", "100.0", "100.0", "100.0", "100.0"}));
  // streamingllm: narrativeqa 100, qasper 1/3, trec 1/2, passage_count 100, lcc 100.
  // SD-QA (100 + 33.3)/2 = 66.7; datasets (100+33.3+50+100+100)/5 = 76.7;
  // categories (66.7 + 50 + 100 + 100)/4 = 79.2.
  const auto& s = lb[0].rows[1];
  EXPECT_EQ(s[0], "streamingllm");
  EXPECT_EQ(s[2], "100.0");
  EXPECT_EQ(s[3].substr(0, 4), "33.3");
  EXPECT_EQ(s[4].substr(0, 4), "50.0");
  EXPECT_EQ(std::vector<std::string>(s.begin() + 7, s.end()),
            (std::vector<std::string>{"66.7", "50.0", "100.0", "100.0", "76.7", "79.2"}));

  const auto ib = build_tables(rows, "infinitebench");
  ASSERT_EQ(ib.size(), 1u);
  EXPECT_NE(ib[0].title.find("4096"), std::string::npos) << ib[0].title;
  EXPECT_EQ(ib[0].columns, (std::vector<std::string>{"Policy", "Budget", "kv_retrieval",
                                                     "longbook_choice_eng", "Avg"}));
  EXPECT_EQ(ib[0].rows[0],
            (std::vector<std::string>{"full", "full", "100.0", "100.0 (n=2)", "100.0"}));
  EXPECT_EQ(ib[0].rows[1][4], "75.0");  // (100 + 50) / 2
  EXPECT_NE(render_tables(lb, "md").find("| Avg of categories |"), std::string::npos);
}

}  // namespace
}  // namespace kvb
