// InfiniteBench synthetic generators: the released record layout, needle/answer consistency, the
// official answer rules (ties skipped, float median), and the length budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "common/errors.h"
#include "datasets/infinitebench/generate.h"
#include "engine/gguf.h"
#include "tests/datasets/fake_tokenizer.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

std::vector<nlohmann::json> make(const std::string& task, int length, int num,
                                 const Tokenizer& tokenizer) {
  return generate_infinitebench_records({task, length, num, 42, {}}, tokenizer);
}

void expect_fits(const nlohmann::json& record, int length, int max_new,
                 const Tokenizer& tokenizer) {
  const int tokens = static_cast<int>(
      tokenizer.encode(record["context"].get<std::string>() + record["input"].get<std::string>())
          .size());
  EXPECT_LE(tokens + kInfiniteBenchPromptReserve + max_new, length);
  EXPECT_GE(tokens, 0.85 * length);
}

TEST(InfiniteBenchGenerate, PasskeyAndNumberString) {
  test::FakeTokenizer tokenizer;
  const auto passkeys = make("passkey", 4096, 5, tokenizer);
  ASSERT_EQ(passkeys.size(), 5u);
  size_t previous_position = 0;
  for (size_t i = 0; i < passkeys.size(); ++i) {
    const auto& r = passkeys[i];
    const std::string key = r["answer"];
    EXPECT_TRUE(std::regex_match(key, std::regex("[0-9]{5}")));
    const std::string context = r["context"];
    const std::string needle =
        "The pass key is " + key + ". Remember it. " + key + " is the pass key.\n";
    const size_t at = context.find(needle);
    ASSERT_NE(at, std::string::npos);
    if (i > 0) {
      EXPECT_GT(at, previous_position);  // the depth sweeps the context
    }
    previous_position = at;
    EXPECT_EQ(r["input"], "What is the pass key?");
    expect_fits(r, 4096, 6, tokenizer);
  }
  EXPECT_EQ(passkeys[0]["context"].get<std::string>().rfind("The pass key is", 0), 0u);
  for (const auto& r : make("number_string", 4096, 3, tokenizer)) {
    const std::string key = r["answer"];
    EXPECT_TRUE(std::regex_match(key, std::regex("[0-9]{10}")));
    EXPECT_NE(r["context"].get<std::string>().find("The sequence of digits is " + key +
                                                   ". Remember it. " + key +
                                                   " is the sequence of digits.\n"),
              std::string::npos);
    EXPECT_EQ(r["input"], "What is the sequence of digits?");
  }
}

TEST(InfiniteBenchGenerate, KvRetrieval) {
  test::FakeTokenizer tokenizer;
  const auto records = make("kv_retrieval", 4096, 4, tokenizer);
  for (const auto& r : records) {
    const std::string context = r["context"];
    const std::string input = r["input"];
    EXPECT_EQ(context.rfind("JSON data:\n{\"", 0), 0u);
    EXPECT_EQ(context.back(), '}');
    std::smatch match;
    ASSERT_TRUE(
        std::regex_match(input, match,
                         std::regex("\nKey: \"([0-9a-f-]{36})\"\nThe value associated with the "
                                    "specified key is: ")));
    EXPECT_NE(
        context.find("\"" + match[1].str() + "\": \"" + r["answer"].get<std::string>() + "\""),
        std::string::npos);
    expect_fits(r, 4096, 50, tokenizer);
  }
}

TEST(InfiniteBenchGenerate, MathFindAnswersFollowTheRules) {
  test::FakeTokenizer tokenizer;
  const auto records = make("math_find", 4096, 7, tokenizer);
  const std::vector<std::string> targets = {
      "largest number",  "second largest number",  "third largest number",
      "smallest number", "second smallest number", "third smallest number",
      "median"};
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    EXPECT_EQ(r["input"], "You should answer with only one number, no other words. The " +
                              targets[i] + " of the list is: ");
    std::vector<int> values;
    const std::string context = r["context"];
    ASSERT_EQ(context.front(), '[');
    const std::regex number("\\d+");
    for (auto it = std::sregex_iterator(context.begin(), context.end(), number);
         it != std::sregex_iterator(); ++it)
      values.push_back(std::stoi(it->str()));
    std::set<int> distinct(values.begin(), values.end());
    std::vector<int> ascending(distinct.begin(), distinct.end());
    if (i < 3) {
      EXPECT_EQ(r["answer"].get<int>(), ascending[ascending.size() - 1 - i]);
    }
    if (i >= 3 && i < 6) {
      EXPECT_EQ(r["answer"].get<int>(), ascending[i - 3]);
    }
    if (i == 6) {
      std::sort(values.begin(), values.end());
      const size_t n = values.size();
      const double median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
      EXPECT_TRUE(r["answer"].is_number_float());
      EXPECT_DOUBLE_EQ(r["answer"].get<double>(), median);
    }
    expect_fits(r, 4096, 3, tokenizer);
  }
}

TEST(InfiniteBenchGenerate, EveryTaskFitsWithSmolLm2Tokenizer) {
  KVB_REQUIRE_FILE(test::default_model_path());
  const auto tokenizer = tokenizer_from_gguf(*GgufFile::open(test::default_model_path()));
  const std::map<std::string, int> max_new = {
      {"passkey", 6}, {"number_string", 12}, {"kv_retrieval", 50}, {"math_find", 3}};
  for (const auto& [task, tokens] : max_new)
    for (const auto& record : make(task, 8192, 2, *tokenizer)) {
      SCOPED_TRACE(task);
      expect_fits(record, 8192, tokens, *tokenizer);
    }
}

TEST(InfiniteBenchGenerate, UnknownTaskIsAClearError) {
  test::FakeTokenizer tokenizer;
  EXPECT_THROW(make("longbook_qa_eng", 4096, 1, tokenizer), InputError);
}

}  // namespace
}  // namespace kvb
