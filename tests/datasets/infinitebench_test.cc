// InfiniteBench scorers (datasets/infinitebench/scorers.h) against the official compute_scores.py:
// hand-scored files and, where found, the published GPT-4 table from InfiniteBench's own result
// files (tests/test_paths.h: infinitebench_goldens), and hand cases for
// each scorer quirk listed in docs/benchmarks.md §4.5 (expected values follow from the official
// code's rules, stated next to each case).
#include <gtest/gtest.h>

#include <fstream>

#include "common/errors.h"
#include "datasets/infinitebench/loader.h"
#include "datasets/infinitebench/prompts.h"
#include "datasets/infinitebench/scorers.h"
#include "datasets/jsonl_reader.h"
#include "datasets/longbench/longbench.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

using nlohmann::json;

double score_file(const std::string& task, const std::filesystem::path& path) {
  double sum = 0;
  size_t n = 0;
  for_each_jsonl_record(path.string(), [&](const json& record, size_t) {
    sum += infinitebench_score_one(task, record.at("prediction").get<std::string>(),
                                   record.at("ground_truth"), "gpt4");
    ++n;
  });
  return n ? 100.0 * sum / static_cast<double>(n) : -1;
}

// Files with known scores (tests/test_paths.h): the hand-scored ones, and GPT-4's published result
// files reproducing the InfiniteBench README's table where a data folder holds them.
TEST(InfiniteBenchGolden, FilesReproduceTheirKnownScores) {
  for (const auto& golden : test::infinitebench_goldens()) {
    ASSERT_TRUE(std::filesystem::exists(golden.file)) << golden.file;
    EXPECT_NEAR(python_round2(score_file(golden.task, golden.file)), golden.score, 0.005)
        << golden.file;
  }
}

TEST(InfiniteBenchScorers, PasskeyTakesTheFirstAsciiDigitRun) {
  EXPECT_EQ(infinitebench_score_one("passkey", "The pass key is 71432.", "71432"), 1.0);
  EXPECT_EQ(infinitebench_score_one("passkey", "Key 1: 71432", "71432"), 0.0);  // "1" comes first
  EXPECT_EQ(infinitebench_score_one("passkey", "The pass key is 071432", "71432"), 0.0);
  EXPECT_EQ(infinitebench_score_one("number_string", "abc", "123"), 0.0);
  EXPECT_EQ(infinitebench_score_one("passkey", "71432", json::array({"71432"})),
            1.0);  // list label unwrapped
}

TEST(InfiniteBenchScorers, KvRetrievalSplitsOnPunctuationAndWhitespace) {
  const std::string uuid = "c14cb8ba-002b-43be-bdc7-8a83f0fe1ac8";
  EXPECT_EQ(infinitebench_score_one("kv_retrieval", "is: \"" + uuid + "\".", uuid), 1.0);
  EXPECT_EQ(infinitebench_score_one("kv_retrieval", "is " + uuid + "x", uuid), 0.0);
  EXPECT_EQ(infinitebench_score_one("kv_retrieval", "{" + uuid + "}", uuid), 1.0);
}

TEST(InfiniteBenchScorers, ChoiceJudgesByTheFirstCapitalLetter) {
  const json label = json::array({"Snowfield", "C"});
  EXPECT_EQ(infinitebench_score_one("longbook_choice_eng", "C. Snowfield", label), 1.0);
  // Any answer starting with A-D is judged by that letter: "Based on ..." -> "B" -> wrong.
  EXPECT_EQ(
      infinitebench_score_one("longbook_choice_eng", "Based on the text, the answer is C", label),
      0.0);
  EXPECT_EQ(infinitebench_score_one("longbook_choice_eng", "Snowfield", label),
            1.0);  // equals a label
  EXPECT_EQ(infinitebench_score_one("longbook_choice_eng", "The answer is: C", label), 1.0);
  // The first prefix found decides; nothing after it -> wrong.
  EXPECT_EQ(infinitebench_score_one("longbook_choice_eng", "The answer is:", label), 0.0);
  EXPECT_EQ(infinitebench_score_one("longbook_choice_eng", "I think option is D, not C", label),
            0.0);
  EXPECT_EQ(infinitebench_score_one("longbook_choice_eng", "I pick C here", label),
            1.0);  // first A-D word
  EXPECT_EQ(infinitebench_score_one("longbook_choice_eng", "   ", label), 0.0);
}

TEST(InfiniteBenchScorers, DialogueComparesOnlyTheFirstLabelUppercased) {
  const json label = json::array({"ACE", "ACE ROTHSTEIN"});
  EXPECT_EQ(infinitebench_score_one("longdialogue_qa_eng", "It is ace.", label), 1.0);
  EXPECT_EQ(infinitebench_score_one("longdialogue_qa_eng", "Ace Rothstein", label), 1.0);
  EXPECT_EQ(infinitebench_score_one("longdialogue_qa_eng", "José!", json::array({"JOSÉ"})),
            1.0);  // str.upper
  // A multi-word or lowercase first label can never match.
  EXPECT_EQ(
      infinitebench_score_one("longdialogue_qa_eng", "remo Gaggi", json::array({"remo Gaggi"})),
      0.0);
  EXPECT_EQ(infinitebench_score_one("longdialogue_qa_eng", "GAGGI", json::array({"Remo", "GAGGI"})),
            0.0);
}

TEST(InfiniteBenchScorers, MathFindComparesByLabelType) {
  EXPECT_EQ(infinitebench_score_one("math_find", "The answer is 88.", 88), 1.0);
  EXPECT_EQ(infinitebench_score_one("math_find", "-88", 88), 1.0);   // minus signs are ignored
  EXPECT_EQ(infinitebench_score_one("math_find", "88.0", 88), 0.0);  // int("88.0") raises -> wrong
  EXPECT_EQ(infinitebench_score_one("math_find", "49.50", 49.5), 1.0);
  EXPECT_EQ(infinitebench_score_one("math_find", "50", 50.0), 1.0);
  EXPECT_EQ(infinitebench_score_one("math_find", "no number", 5), 0.0);
  EXPECT_EQ(infinitebench_score_one("math_find", "49.5", "49.5"), 1.0);  // string label parsed back
  EXPECT_EQ(infinitebench_score_one("math_find", "7", json::array({7})), 1.0);
}

TEST(InfiniteBenchScorers, CodeRunUsesTheLastToken) {
  EXPECT_EQ(infinitebench_score_one("code_run", "The value of func_1(3) is `-12`.", -12), 1.0);
  EXPECT_EQ(infinitebench_score_one("code_run", "-12 is the value", -12), 0.0);
  EXPECT_EQ(infinitebench_score_one("code_run", "", 3), 0.0);
}

TEST(InfiniteBenchScorers, CodeDebugPrefixRules) {
  const json label = json::array({"Configer._set_option", "B"});
  EXPECT_EQ(infinitebench_score_one("code_debug", "B. Configer", label), 1.0);
  EXPECT_EQ(infinitebench_score_one("code_debug", " B. Configer", label),
            0.0);  // no prefix, no "B." at 0
  EXPECT_EQ(infinitebench_score_one("code_debug", "The answer is: parse_args",
                                    json::array({"parse_args", "C"})),
            1.0);
  // "option" is deleted from the prediction before the name comparison, so a function whose name
  // contains "option" can only be matched by its letter.
  EXPECT_EQ(infinitebench_score_one("code_debug", "The answer is: Configer._set_option", label),
            0.0);
  EXPECT_EQ(infinitebench_score_one("code_debug", "The correct option is: B", label),
            1.0);  // via "is:"
  EXPECT_EQ(infinitebench_score_one("code_debug", "The function is: A", label), 0.0);
}

TEST(InfiniteBenchScorers, ChineseQaIsCharacterF1WithoutJieba) {
  // pred chars {北,京,大,学} vs label {北,京}: P = 2/4, R = 1, F1 = 2/3.
  EXPECT_NEAR(infinitebench_score_one("longbook_qa_chn", "北京大学。", json::array({"北京"})),
              2.0 / 3.0, 1e-12);
}

TEST(InfiniteBenchScorers, MathCalcCountsLeadingMatches) {
  const json label = json::array({1, 4, 8, 3});
  EXPECT_EQ(infinitebench_score_one("math_calc", "[1, 4, 9, 3]", label), 0.5);
  EXPECT_EQ(infinitebench_score_one("math_calc", "0 1 4 8 3", label, "gpt4"),
            1.0);  // gpt4 drops the first
}

TEST(InfiniteBenchScorers, SummaryIsRougeLsumOverNewlineSentences) {
  // Reference tokens [a b c] [d e]; candidate [a c] [e]: union LCS hits a, c for sentence 1 and e
  // for sentence 2 -> hits 3, R = 3/5, P = 3/3, F = 0.75.
  EXPECT_NEAR(
      infinitebench_score_one("longbook_sum_eng", "A, c!\n\nE", json::array({"a b c\nd e"})), 0.75,
      1e-12);
  EXPECT_EQ(infinitebench_score_one("longbook_sum_eng", "", json::array({"a b"})), 0.0);
}

// rougeLsum values printed by Google's rouge_score 0.1.2 (pip, CPython 3.11.7) called as HF
// evaluate's "rouge" does for a list label:
//   RougeScorer(["rougeLsum"], use_stemmer=False).score_multi(references,
//   prediction)["rougeLsum"].fmeasure
// (script: tests/datasets/reference/expected_lsum.py).
struct LsumCase {
  std::vector<std::string> references;
  std::string prediction;
  double expected;
};
const std::vector<LsumCase> kLsumCases = {
    {{"The cat sat on the mat.\nIt was happy."},
     "A cat was on a mat.\nThe cat was happy!",
     0.631578947368421},
    {{"first line\n\nsecond line here"}, "second line\nfirst line", 0.888888888888889},
    {{"Café au lait, naïve résumé."}, "cafe au lait naive resume", 0.3333333333333333},
    {{"one two three", "completely different words"},
     "different words entirely",
     0.6666666666666666},
    {{"the the the cat"}, "the cat the", 0.5714285714285715},
    {{"x y z"}, "\n\n", 0.0},
    {{"alpha beta. gamma delta\nepsilon"},
     "alpha gamma\nbeta delta epsilon alpha",
     0.9090909090909091},
};

TEST(InfiniteBenchScorers, SummaryMatchesRougeScoreRougeLsum) {
  for (const auto& c : kLsumCases)
    EXPECT_DOUBLE_EQ(infinitebench_score_one("longbook_sum_eng", c.prediction, json(c.references)),
                     c.expected)
        << c.prediction;
}

TEST(InfiniteBenchScorers, UnknownTaskIsAnError) {
  EXPECT_THROW(infinitebench_score_one("passkeys", "1", "1"), InputError);
}

TEST(InfiniteBenchPrompts, OpenModelTemplatesAreFilledAsCreatePromptDoes) {
  const json record = {{"context", "CTX"},
                       {"input",
                        "You should answer with only one number, no other words. The largest "
                        "number of the list is: "},
                       {"answer", json::array({88})}};
  const auto p = infinitebench_prompt("math_find", record, InfiniteBenchFamily::kOpenModels, "r");
  EXPECT_EQ(p.context_part, "What is the largest number in the following list?\n\nCTX");
  EXPECT_EQ(p.question_part, "\n\n" + record["input"].get<std::string>());

  const json code = {{"context", "def f(): pass"},
                     {"input", "What is func_12(-3)?"},
                     {"answer", json::array({5})}};
  const auto c = infinitebench_prompt("code_run", code, InfiniteBenchFamily::kOpenModels, "r");
  EXPECT_EQ(c.context_part,
            "There is a function called func_12 in the following Python code.\n\ndef f(): pass");
  EXPECT_EQ(c.question_part,
            "\n\nPlease compute the exact value of func_12(-3). The value of func_12(-3) is");
  EXPECT_EQ(infinitebench_max_new_tokens("code_run"), 5);
  EXPECT_EQ(infinitebench_truncation_limit(InfiniteBenchFamily::kOpenModels), 131072);
}

TEST(InfiniteBenchLoader, ChoiceLabelsCarryTheLetterAndBadDataIsReported) {
  const auto dir = std::filesystem::temp_directory_path() / "kvb_infinitebench_loader_test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "longbook_choice_eng.jsonl");
    out << json{{"id", 0},
                {"context", "book"},
                {"input", "Who?"},
                {"answer", json::array({"Bob"})},
                {"options", json::array({"Ann", "Bob", "Cid", "Dan"})}}
               .dump()
        << "\n{\"id\": 1, \"context\": \n";
  }
  EXPECT_THROW(load_infinitebench(dir.string(), "longbook_choice_eng"), FormatError);
  try {
    load_infinitebench(dir.string(), "longbook_choice_eng");
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("longbook_choice_eng.jsonl:2"), std::string::npos)
        << e.what();
  }
  const auto samples = load_infinitebench(dir.string(), "longbook_choice_eng", {.limit = 1});
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].extra["label"], json::array({"Bob", "B"}));
  EXPECT_EQ(samples[0].max_new_tokens, 40);
  EXPECT_NE(samples[0].question_part.find("B. Bob\nC. Cid"), std::string::npos);
  EXPECT_THROW(load_infinitebench((dir / "absent").string(), "passkey"), InputError);
  EXPECT_THROW(load_infinitebench(dir.string(), "passkey"), InputError);  // file missing
  EXPECT_THROW(load_infinitebench(dir.string(), "no_such_task"), InputError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvb
