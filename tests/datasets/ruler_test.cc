// RULER generation: budget, utilisation, references in the context, exact template text, the
// single-needle rewrite, clear errors, with a fake GPT-2-like tokenizer (fast, always available).
// ruler_fit_test.cc runs the acceptance check with SmolLM2's own tokenizer and chat template.
#include "datasets/ruler/ruler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "common/errors.h"
#include "datasets/ruler/ruler_task.h"
#include "tests/datasets/fake_tokenizer.h"
#include "tests/datasets/ruler_tasks.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

const ChatFrame kChatMl{
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n<|im_start|>user\n",
    "<|im_end|>\n<|im_start|>assistant\n"};
// The same frame after RULER's single-needle rewrite ("are" -> "is" everywhere in the template).
const std::string kRewrittenPrefix =
    "<|im_start|>system\nYou is a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n<|im_start|>user\n";

bool starts_with(const std::string& text, const std::string& head) {
  return text.rfind(head, 0) == 0;
}
bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() &&
         text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

RulerDataPaths fixture_paths(const fs::path& qa_dir) {
  RulerDataPaths paths;
  paths.essays_dir = test::fixture("haystack/pg_essays");
  paths.wordlists_dir = test::fixture("wordlists");
  paths.qa_dir = qa_dir;
  return paths;
}

// A tiny SQuAD v2 / HotpotQA pair of files, enough to exercise the QA code path.
void write_synthetic_qa(const fs::path& folder) {
  fs::create_directories(folder);
  nlohmann::json squad = {{"data", nlohmann::json::array()}};
  for (int article = 0; article < 6; ++article) {
    nlohmann::json paragraphs = nlohmann::json::array();
    for (int p = 0; p < 5; ++p) {
      const std::string city = "Cityname" + std::to_string(article * 5 + p);
      const std::string context = "The river of region " + std::to_string(article) + " paragraph " +
                                  std::to_string(p) + " flows past " + city +
                                  " and then into the sea after a long journey through hills.";
      paragraphs.push_back(
          {{"context", context},
           {"qas",
            {{{"question", "Which town does the river of region " + std::to_string(article) +
                               " paragraph " + std::to_string(p) + " pass?"},
              {"id", std::to_string(article * 5 + p)},
              {"answers",
               {{{"text", city}, {"answer_start", 0}}, {{"text", city}, {"answer_start", 0}}}},
              {"is_impossible", false}},
             {{"question", "Unanswerable?"},
              {"id", "x"},
              {"answers", nlohmann::json::array()},
              {"is_impossible", true}}}}});
    }
    squad["data"].push_back({{"title", "T" + std::to_string(article)}, {"paragraphs", paragraphs}});
  }
  std::ofstream(folder / "squad.json") << squad.dump();
  nlohmann::json hotpot = nlohmann::json::array();
  for (int q = 0; q < 8; ++q) {
    nlohmann::json context = nlohmann::json::array();
    for (int p = 0; p < 10; ++p)
      context.push_back({"Title " + std::to_string(q) + "-" + std::to_string(p),
                         {"Sentence one about item " + std::to_string(q * 10 + p) + ". ",
                          "Sentence two mentions Answer" + std::to_string(q) + "."}});
    hotpot.push_back({{"question", "What is answer " + std::to_string(q) + "?"},
                      {"answer", "Answer" + std::to_string(q)},
                      {"context", context}});
  }
  std::ofstream(folder / "hotpotqa.json") << hotpot.dump();
}

// The synthetic QA files in a folder of this test process's own, removed with it: ctest runs this
// file's tests side by side, and one test rewriting a shared squad.json while another parsed it
// failed the reader ("missing closing quote").
struct SyntheticQa {
  SyntheticQa() { write_synthetic_qa(folder); }
  ~SyntheticQa() {
    std::error_code ignored;
    fs::remove_all(folder, ignored);
  }
  const fs::path folder =
      fs::temp_directory_path() / ("kvb_ruler_test_qa_" + std::to_string(::getpid()));
};

// Checks every task's invariants on a set of samples.
void check_samples(const std::string& task, int length, const std::vector<Sample>& samples,
                   const Tokenizer& tokenizer, const ChatFrame& frame) {
  const int to_generate = ruler_tokens_to_generate(task);
  for (const Sample& s : samples) {
    SCOPED_TRACE(s.id);
    const std::string prompt = s.context_part + s.question_part + s.answer_prefix;
    const int tokens = static_cast<int>(tokenizer.encode(prompt, false, true).size());
    EXPECT_LE(tokens + to_generate, length) << "over budget";
    // The per-sample fit (ruler.h) leaves every sample within about one unit of the budget.
    EXPECT_GE(tokens + to_generate, 0.9 * length) << "uses under 90% of the budget";
    EXPECT_EQ(s.extra.at("prompt_tokens").get<int>(), tokens);
    EXPECT_EQ(s.max_new_tokens, to_generate);
    EXPECT_FALSE(s.use_chat_template);
    ASSERT_FALSE(s.references.empty());
    for (const std::string& reference : s.references)
      EXPECT_NE(s.context_part.find(reference), std::string::npos) << "reference " << reference;
    EXPECT_TRUE(ends_with(s.question_part, frame.suffix));
  }
}

class RulerFakeTokenizerTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RulerFakeTokenizerTest, FitsBudgetContainsAnswersFollowsTemplate) {
  const auto& [task, length] = GetParam();
  KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays"));
  KVB_REQUIRE_FILE(test::fixture("wordlists/nounlist.txt"));
  const SyntheticQa qa;
  const RulerDataPaths paths = fixture_paths(qa.folder);
  test::FakeTokenizer tokenizer;
  GenerationRequest request{task, length, 3, 42, {}};
  const std::vector<Sample> samples = generate_ruler(request, tokenizer, kChatMl, paths);
  ASSERT_EQ(samples.size(), 3u);
  check_samples(task, length, samples, tokenizer, kChatMl);
}

INSTANTIATE_TEST_SUITE_P(AllTasks, RulerFakeTokenizerTest, test::ruler_task_lengths(),
                         test::ruler_case_name);

class RulerTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays"));
    KVB_REQUIRE_FILE(test::fixture("wordlists/nounlist.txt"));
    paths_ = fixture_paths(qa_.folder);
  }
  Sample one(const std::string& task, int length = 4096) {
    return generate_ruler({task, length, 1, 7, {}}, tokenizer_, kChatMl, paths_).front();
  }
  const SyntheticQa qa_;
  RulerDataPaths paths_;
  test::FakeTokenizer tokenizer_;
};

TEST_F(RulerTemplateTest, SingleNeedleIsRewrittenIncludingTheFrame) {
  const Sample s = one("niah_single_2");
  EXPECT_TRUE(starts_with(s.context_part, kRewrittenPrefix +
                                              "A special magic number is hidden within the "
                                              "following text. Make sure to memorize it. I will "
                                              "quiz you about the number afterwards.\n"))
      << s.context_part.substr(0, 400);
  const std::regex question(
      "What is the special magic number for ([a-z' -]+-[a-z' -]+) mentioned in the provided "
      "text\\?<\\|im_end\\|>\n<\\|im_start\\|>assistant\n");
  std::smatch match;
  ASSERT_TRUE(std::regex_match(s.question_part, match, question)) << s.question_part;
  const std::string key = match[1];
  EXPECT_EQ(s.answer_prefix,
            " The special magic number for " + key + " mentioned in the provided text is");
  // Needles stay plural; the context ends with "\n" before the question.
  EXPECT_NE(s.context_part.find("One of the special magic numbers for " + key +
                                " is: " + s.references[0] + "."),
            std::string::npos);
  EXPECT_TRUE(ends_with(s.context_part, "\n"));
  EXPECT_TRUE(std::regex_match(s.references[0], std::regex("[1-9][0-9]{6}")));
}

TEST_F(RulerTemplateTest, UuidValuesAndNoiseHaystack) {
  const Sample uuid = one("niah_single_3");
  EXPECT_NE(uuid.context_part.find("I will quiz you about the uuid afterwards.\n"),
            std::string::npos);
  EXPECT_TRUE(std::regex_match(
      uuid.references[0],
      std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")));
  const Sample noise = one("niah_single_1");
  const std::string unit =
      "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
  EXPECT_NE(noise.context_part.find("afterwards.\n" + unit + "\n" + unit + "\n"),
            std::string::npos);
  const Sample needles = one("niah_multikey_3");
  EXPECT_NE(needles.context_part.find("afterwards.\nOne of the special magic uuids for "),
            std::string::npos);
}

TEST_F(RulerTemplateTest, PluralTasksKeepTheTemplateAndJoinQueries) {
  const Sample multiquery = one("niah_multiquery");
  EXPECT_TRUE(starts_with(multiquery.context_part,
                          kChatMl.prefix + "Some special magic numbers are hidden within the "
                                           "following text. Make sure to memorize it. I will quiz "
                                           "you about the numbers afterwards.\n"));
  const std::regex question(
      "What are all the special magic numbers for (\\S+), (\\S+), (\\S+), and (\\S+) mentioned "
      "in the provided text\\?<\\|im_end\\|>\n<\\|im_start\\|>assistant\n");
  EXPECT_TRUE(std::regex_match(multiquery.question_part, question)) << multiquery.question_part;
  EXPECT_TRUE(starts_with(multiquery.answer_prefix, " The special magic numbers for "));
  EXPECT_TRUE(ends_with(multiquery.answer_prefix, " mentioned in the provided text are"));
  EXPECT_EQ(multiquery.references.size(), 4u);
  const Sample multivalue = one("niah_multivalue");
  EXPECT_EQ(multivalue.references.size(), 4u);
  const Sample multikey = one("niah_multikey_1");
  EXPECT_EQ(multikey.references.size(), 1u);
  size_t needles = 0;
  for (size_t at = 0; (at = multikey.context_part.find("One of the special magic numbers for ",
                                                       at)) != std::string::npos;
       ++at)
    ++needles;
  EXPECT_EQ(needles, 4u);
}

TEST_F(RulerTemplateTest, VariableTrackingWithOneShotDemo) {
  const Sample s = one("vt");
  const std::string task_head =
      "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
  ASSERT_TRUE(starts_with(s.context_part, kChatMl.prefix + task_head));  // the demo comes first
  // Demo: its answer after "they are: " plus a space, then "\n\n" before the real task.
  const std::regex demo_end(
      "variables are assigned the value (\\d{5}), they are:  [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3} "
      "[A-Z]{3}\n\nMemorize and track");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(s.context_part, match, demo_end));
  const std::regex question(
      "Question: Find all variables that are assigned the value (\\d{5}) in the text "
      "above\\.<\\|im_end\\|>\n<\\|im_start\\|>assistant\n");
  ASSERT_TRUE(std::regex_match(s.question_part, match, question)) << s.question_part;
  const std::string value = match[1];
  EXPECT_EQ(s.answer_prefix,
            " Answer: According to the chain(s) of variable assignment in the "
            "text above, 5 variables are assigned the value " +
                value + ", they are: ");
  ASSERT_EQ(s.references.size(), 5u);
  EXPECT_NE(s.context_part.find("VAR " + s.references[0] + " = " + value + "\n"),
            std::string::npos);
  for (size_t j = 1; j < 5; ++j)
    EXPECT_NE(s.context_part.find("VAR " + s.references[j] + " = VAR " + s.references[j - 1] + " "),
              std::string::npos);
}

TEST_F(RulerTemplateTest, CommonWordsRepeatTheWholeFramedPromptAsDemo) {
  const Sample s = one("cwe");
  const std::string head = kChatMl.prefix +
                           "Below is a numbered list of words. In these words, some appear more "
                           "often than others. Memorize the ones that appear most often.\n1. ";
  ASSERT_TRUE(starts_with(s.context_part, head));
  const std::string demo_tail =
      "Question: What are the 10 most common words in the above list?" + kChatMl.suffix +
      " Answer: The top 10 words that appear most often in the list are: 1. ";
  const size_t demo_end = s.context_part.find(demo_tail);
  ASSERT_NE(demo_end, std::string::npos);
  const size_t main_start = s.context_part.find("\n" + head, demo_end);
  EXPECT_NE(main_start, std::string::npos);
  EXPECT_EQ(s.question_part,
            "Question: What are the 10 most common words in the above list?" + kChatMl.suffix);
  EXPECT_EQ(s.answer_prefix, " Answer: The top 10 words that appear most often in the list are:");
  ASSERT_EQ(s.references.size(), 10u);
  // Each common word appears 30 times in the main list (length >= 4096).
  const std::string main_list = s.context_part.substr(main_start);
  for (const std::string& word : s.references) {
    size_t count = 0;
    const std::regex entry("\\d+\\. " + word + "(?= \\d+\\. |\n)");
    for (auto it = std::sregex_iterator(main_list.begin(), main_list.end(), entry);
         it != std::sregex_iterator(); ++it)
      ++count;
    EXPECT_EQ(count, 30u) << word;
  }
}

TEST_F(RulerTemplateTest, FrequentWordsFollowZipfCounts) {
  const Sample s = one("fwe");
  const std::string head = kChatMl.prefix +
                           "Read the following coded text and track the frequency of each coded "
                           "word. Find the three most frequently appeared coded words. ";
  ASSERT_TRUE(starts_with(s.context_part, head));
  EXPECT_EQ(s.question_part,
            "Question: Do not provide any explanation. Please ignore the dots '....'. What are the "
            "three most frequently appeared words in the above coded text?" +
                kChatMl.suffix);
  EXPECT_EQ(s.answer_prefix,
            " Answer: According to the coded text above, the three most frequently appeared words "
            "are:");
  const std::string text = s.context_part.substr(head.size());
  std::map<std::string, int> counts;
  std::istringstream words(text);
  for (std::string word; words >> word;) ++counts[word];
  ASSERT_EQ(s.references.size(), 3u);
  EXPECT_GT(counts["..."], counts[s.references[0]]);
  EXPECT_GT(counts[s.references[0]], counts[s.references[1]]);
  EXPECT_GT(counts[s.references[1]], counts[s.references[2]]);
  for (const auto& [word, count] : counts)
    if (word != "..." && word != s.references[0] && word != s.references[1]) {
      EXPECT_LE(count, counts[s.references[2]]) << word;
    }
}

TEST_F(RulerTemplateTest, QuestionAnsweringDocuments) {
  const Sample s = one("qa_1");
  EXPECT_TRUE(starts_with(s.context_part,
                          kChatMl.prefix +
                              "Answer the question based on the given documents. Only give me the "
                              "answer and do not output any other words.\n\nThe following are "
                              "given documents.\n\nDocument 1:\n"));
  EXPECT_TRUE(ends_with(s.context_part, "\n\n"));
  EXPECT_EQ(s.question_part,
            "Answer the question based on the given documents. Only give me the answer and do not "
            "output any other words.\n\nQuestion: Which town does the river of region 0 paragraph "
            "0 pass?" +
                kChatMl.suffix);
  EXPECT_EQ(s.answer_prefix, " Answer:");
  EXPECT_EQ(s.references, (std::vector<std::string>{"Cityname0", "Cityname0"}));
  const Sample hotpot = one("qa_2");
  EXPECT_EQ(hotpot.references, std::vector<std::string>{"Answer0"});
  EXPECT_NE(hotpot.context_part.find("\nTitle 0-3\nSentence one about item 3. Sentence two"),
            std::string::npos);
}

TEST_F(RulerTemplateTest, SameSeedSameSamplesOtherSeedOthers) {
  const auto a = generate_ruler({"niah_single_2", 4096, 2, 42, {}}, tokenizer_, kChatMl, paths_);
  const auto b = generate_ruler({"niah_single_2", 4096, 2, 42, {}}, tokenizer_, kChatMl, paths_);
  const auto c = generate_ruler({"niah_single_2", 4096, 2, 43, {}}, tokenizer_, kChatMl, paths_);
  EXPECT_EQ(a[1].context_part, b[1].context_part);
  EXPECT_NE(a[1].references, c[1].references);
}

TEST_F(RulerTemplateTest, BaseTemplateHasNoFrame) {
  const Sample s =
      generate_ruler({"niah_single_1", 4096, 1, 42, {}}, tokenizer_, ChatFrame{}, paths_).front();
  EXPECT_TRUE(starts_with(s.context_part, "A special magic number is hidden"));
  EXPECT_TRUE(ends_with(s.question_part, "mentioned in the provided text?"));
}

// fit_sample against brute force: a deterministic haystack of one-token units behind a fixed
// 7-token head; the largest fitting size is budget - 7, whatever the start and (within reason)
// the tokens-per-unit estimate.
TEST(RulerFitSample, ReachesTheLargestFittingSizeFromAboveAndBelow) {
  test::FakeTokenizer tokenizer;
  TokenCounter counter(tokenizer);
  int builds = 0;
  const auto build = [&](int units) {
    ++builds;
    ruler::Draft draft;
    draft.context_part = "a b c d e f g";
    for (int i = 0; i < units; ++i) draft.context_part += " w";
    return draft;
  };
  ASSERT_EQ(counter.exact(build(10).prompt()), 17);
  const int budget = 1000, largest = budget - 7;
  for (int start : {1, 10, 500, 993, 994, 5000}) {
    for (double estimate : {1.0, 0.4}) {  // exact, and underestimated (overshoots, then bisects)
      builds = 0;
      const ruler::FittedDraft fit =
          ruler::fit_sample(build, start, estimate, budget, 1 << 30, counter, "test");
      EXPECT_EQ(fit.units, largest) << "start " << start << " estimate " << estimate;
      EXPECT_EQ(fit.tokens, budget);
      EXPECT_LE(builds, 24);
    }
    // Overestimated tokens per unit: stops once the slack is under one estimated unit.
    const ruler::FittedDraft fit =
        ruler::fit_sample(build, start, 3.0, budget, 1 << 30, counter, "t");
    EXPECT_LE(fit.tokens, budget);
    EXPECT_GT(fit.tokens, budget - 3);
  }
  // A cap on the units (CWE's word list) is respected.
  EXPECT_EQ(ruler::fit_sample(build, 10, 1.0, budget, 300, counter, "t").units, 300);
  // Not even one unit fits: a CapacityError naming the task.
  try {
    ruler::fit_sample(build, 5, 1.0, 7, 1 << 30, counter, "RULER test");
    FAIL() << "expected CapacityError";
  } catch (const CapacityError& error) {
    EXPECT_NE(std::string(error.what()).find("RULER test"), std::string::npos);
  }
}

// CWE beyond the word lists: HEAD's english_words.json (a JSON object index -> word) supplies the
// longer lists; without it the list is capped at the vocabulary and the samples say so. Small word
// lists stand in for wonderwords so that 8K tokens already exceed them.
TEST(RulerCwe, LongListsComeFromEnglishWordsOrAreCappedAndFlagged) {
  const fs::path folder =
      fs::temp_directory_path() / ("kvb_ruler_cwe_" + std::to_string(::getpid()));
  fs::create_directories(folder / "words");
  const auto write_list = [&](const std::string& name, const std::string& stem, int count) {
    std::ofstream out(folder / "words" / name);
    for (int i = 0; i < count; ++i)
      out << stem << static_cast<char>('a' + i % 26) << static_cast<char>('a' + i / 26) << "\n";
  };
  write_list("nounlist.txt", "noun", 20);
  write_list("adjectivelist.txt", "adj", 15);
  write_list("verblist.txt", "verb", 15);
  RulerDataPaths paths{"/nonexistent/essays", folder / "words", "/nonexistent/qa"};
  test::FakeTokenizer tokenizer;

  const Sample capped = generate_ruler({"cwe", 8192, 1, 42, {}}, tokenizer, kChatMl, paths).front();
  EXPECT_EQ(capped.extra.at("haystack_units").get<int>(), 50);
  EXPECT_TRUE(capped.extra.value("word_list_capped", false));
  EXPECT_LT(capped.extra.at("prompt_tokens").get<int>() + 120, 0.9 * 8192);

  nlohmann::json english = nlohmann::json::object();
  for (int i = 0; i < 3000; ++i) english[std::to_string(i)] = "eng" + std::to_string(i) + "x";
  std::ofstream(folder / "words" / "english_words.json") << english.dump();
  const Sample full = generate_ruler({"cwe", 8192, 1, 42, {}}, tokenizer, kChatMl, paths).front();
  EXPECT_GT(full.extra.at("haystack_units").get<int>(), 50);
  EXPECT_FALSE(full.extra.contains("word_list_capped"));
  const int tokens = full.extra.at("prompt_tokens").get<int>() + 120;
  EXPECT_LE(tokens, 8192);
  EXPECT_GE(tokens, 0.9 * 8192);
  for (const std::string& word : full.references) EXPECT_EQ(word.rfind("eng", 0), 0u) << word;
  fs::remove_all(folder);
}

TEST(RulerErrors, UnknownTaskAndMissingData) {
  test::FakeTokenizer tokenizer;
  RulerDataPaths missing{"/nonexistent/essays", "/nonexistent/words", "/nonexistent/qa"};
  EXPECT_THROW(generate_ruler({"niah_single_9", 4096, 1, 42, {}}, tokenizer, kChatMl, missing),
               InputError);
  try {
    generate_ruler({"niah_single_2", 4096, 1, 42, {}}, tokenizer, kChatMl, missing);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/essays"), std::string::npos);
  }
  try {
    generate_ruler({"qa_1", 4096, 1, 42, {}}, tokenizer, kChatMl, missing);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/qa/squad.json"), std::string::npos);
  }
  EXPECT_THROW(generate_ruler({"cwe", 4096, 1, 42, {}}, tokenizer, kChatMl, missing), InputError);
}

}  // namespace
}  // namespace kvb
