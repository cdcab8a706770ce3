// NIAH generation: the needle sits at the requested depth, moved back by at most one sentence,
// at a sentence boundary; the grid and the scoring fields are recorded.
#include "datasets/niah/niah.h"

#include <gtest/gtest.h>

#include "common/errors.h"
#include "engine/gguf.h"
#include "tests/datasets/fake_tokenizer.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

void check_needle_placement(const std::vector<Sample>& samples, const Tokenizer& tokenizer,
                            int expected_count) {
  ASSERT_EQ(static_cast<int>(samples.size()), expected_count);
  const std::string needle = kNiahNeedle;
  const std::string head = kNiahPromptHead;
  for (const Sample& s : samples) {
    SCOPED_TRACE(s.id);
    ASSERT_EQ(s.context_part.rfind(head, 0), 0u);
    const std::string haystack_and_needle = s.context_part.substr(
        head.size(), s.context_part.size() - head.size() - std::string(kNiahPromptBookEnd).size());
    const size_t at = haystack_and_needle.find(needle);
    ASSERT_NE(at, std::string::npos);
    const std::string before = haystack_and_needle.substr(0, at);
    const std::string after = haystack_and_needle.substr(at + needle.size());
    // Depth, measured in haystack tokens before the needle, at most one sentence short of the
    // requested depth: the haystack between the insertion and the target holds no sentence end.
    const int tokens_before = static_cast<int>(tokenizer.encode(before).size());
    const int haystack_tokens = tokens_before + static_cast<int>(tokenizer.encode(after).size());
    const int target =
        s.depth >= 100 ? haystack_tokens : static_cast<int>(haystack_tokens * (s.depth / 100.0));
    EXPECT_LE(tokens_before, target + 1);
    const std::vector<TokenId> after_ids = tokenizer.encode(after);
    const std::string gap = tokenizer.decode(std::vector<TokenId>(
        after_ids.begin(), after_ids.begin() + std::max(0, target - tokens_before - 1)));
    EXPECT_EQ(gap.find(". "), std::string::npos) << "skipped a whole sentence: " << gap;
    // A sentence boundary: the haystack before the needle ends with a period (or is empty);
    // depth 100 appends the needle after the last token.
    if (!before.empty() && s.depth < 100) {
      EXPECT_EQ(before.back(), '.') << before.substr(before.size() - 40);
    }
    EXPECT_EQ(s.references,
              std::vector<std::string>{"eat a sandwich and sit in Dolores Park on a sunny day."});
    EXPECT_EQ(s.extra.at("rouge_target"),
              "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on "
              "a sunny day.");
    EXPECT_EQ(s.extra.at("substring_answer"),
              "eat a sandwich and sit in Dolores Park on a sunny day");
    EXPECT_EQ(s.question_part,
              " Based on the content of the book, Question: The best thing to do in San Francisco "
              "is: \nAnswer:");
    EXPECT_EQ(s.max_new_tokens, 30);
    const int prompt_tokens = static_cast<int>(
        tokenizer.encode(s.context_part + s.question_part + s.answer_prefix).size());
    EXPECT_LE(prompt_tokens + s.max_new_tokens, s.length);
    EXPECT_GE(prompt_tokens, s.length - 260);
  }
}

TEST(Niah, DepthGridIsNumpyRoundedLinspace) {
  EXPECT_EQ(niah_depths(10), (std::vector<double>{0, 11, 22, 33, 44, 56, 67, 78, 89, 100}));
  EXPECT_EQ(niah_depths(3), (std::vector<double>{0, 50, 100}));
}

TEST(Niah, NeedleAtRequestedDepthWithinOneSentence) {
  KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays"));
  test::FakeTokenizer tokenizer;
  NiahRequest request{{1000, 4000}, niah_depths(10), test::fixture("haystack/pg_essays")};
  const std::vector<Sample> samples = generate_niah(request, tokenizer);
  check_needle_placement(samples, tokenizer, 20);
  EXPECT_EQ(samples[13].extra.at("length_index"), 1);
  EXPECT_EQ(samples[13].extra.at("depth_index"), 3);
  EXPECT_EQ(samples[13].depth, 33);
  EXPECT_EQ(samples[13].length, 4000);
  // Depth 0 puts the needle first; depth 100 last.
  EXPECT_EQ(samples[0].context_part.find(kNiahNeedle), std::string(kNiahPromptHead).size());
  EXPECT_EQ(samples[9].context_part.rfind(std::string(kNiahNeedle) + kNiahPromptBookEnd),
            samples[9].context_part.size() - std::string(kNiahNeedle).size() -
                std::string(kNiahPromptBookEnd).size());
}

TEST(Niah, NeedleAtRequestedDepthWithSmolLm2Tokenizer) {
  KVB_REQUIRE_FILE(test::default_model_path());
  KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays"));
  const auto tokenizer = tokenizer_from_gguf(*GgufFile::open(test::default_model_path()));
  NiahRequest request{{2000, 8000}, niah_depths(5), test::fixture("haystack/pg_essays")};
  check_needle_placement(generate_niah(request, *tokenizer), *tokenizer, 10);
}

// "template": "chat" keeps the book and the question but leaves the framing to the model's chat
// template (the raw prompt's literal "<|im_start|> " head would open a second turn inside it).
TEST(Niah, ChatTemplateFormDropsTheRawTurnMarker) {
  KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays"));
  test::FakeTokenizer tokenizer;
  NiahRequest raw{{1000}, {50}, test::fixture("haystack/pg_essays")};
  NiahRequest chat = raw;
  chat.chat_template = true;
  const Sample raw_sample = generate_niah(raw, tokenizer).at(0);
  const Sample chat_sample = generate_niah(chat, tokenizer).at(0);
  EXPECT_FALSE(raw_sample.use_chat_template);
  EXPECT_TRUE(chat_sample.use_chat_template);
  EXPECT_EQ(
      raw_sample.context_part.rfind("<|im_start|> This is a very long story book: <book> ", 0), 0u);
  EXPECT_EQ(chat_sample.context_part.rfind("This is a very long story book: <book> ", 0), 0u);
  EXPECT_EQ("<|im_start|> " + chat_sample.context_part, raw_sample.context_part);
  EXPECT_EQ(chat_sample.question_part, raw_sample.question_part);
}

TEST(Niah, MissingEssaysAreAClearError) {
  test::FakeTokenizer tokenizer;
  try {
    generate_niah({{2000}, {50}, "/nonexistent/essays"}, tokenizer);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/essays"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvb
