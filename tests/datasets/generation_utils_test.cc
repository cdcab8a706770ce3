// PythonRandom against CPython's own numbers (printed by python3 with the calls named in each
// test), the Python-compatible text helpers, and the piecewise token counter.
#include <gtest/gtest.h>

#include "common/strings.h"
#include "datasets/generation.h"
#include "datasets/python_random.h"
#include "datasets/text_utils.h"
#include "tests/datasets/fake_tokenizer.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

TEST(PythonRandom, MatchesCPythonSeed42) {
  // r = random.Random(42); [r.getrandbits(32) for _ in range(3)]; r.random();
  // [r.randint(1000000, 9999999) for _ in range(3)]
  PythonRandom r(42);
  EXPECT_EQ(r.next_uint32(), 2746317213u);
  EXPECT_EQ(r.next_uint32(), 478163327u);
  EXPECT_EQ(r.next_uint32(), 107420369u);
  EXPECT_DOUBLE_EQ(r.random(), 0.7415504997598329);
  EXPECT_EQ(r.randint(1000000, 9999999), 5108603);
  EXPECT_EQ(r.randint(1000000, 9999999), 4744854);
  EXPECT_EQ(r.randint(1000000, 9999999), 3341057);
}

TEST(PythonRandom, ShuffleSampleChoicesUuidMatchCPython) {
  // l = list(range(10)); random.Random(42).shuffle(l)
  std::vector<int> items = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  PythonRandom(42).shuffle(items);
  EXPECT_EQ(items, (std::vector<int>{7, 3, 2, 8, 5, 6, 9, 4, 0, 1}));
  // r = random.Random(42); r.sample(range(40), 4); r.sample(range(1000), 8); r.sample(range(30),
  // 10)
  PythonRandom r(42);
  EXPECT_EQ(r.sample_indices(40, 4), (std::vector<size_t>{7, 1, 17, 15}));
  EXPECT_EQ(r.sample_indices(1000, 8),
            (std::vector<size_t>{228, 142, 754, 104, 692, 758, 913, 558}));
  EXPECT_EQ(r.sample_indices(30, 10), (std::vector<size_t>{2, 18, 13, 1, 0, 29, 6, 7, 16, 19}));
  // str(uuid.UUID(int=random.Random(7).getrandbits(128), version=4))
  EXPECT_EQ(PythonRandom(7).uuid4(), "6513270e-269e-4d37-b2a7-4de452e6b438");
  // random.Random(42).choices(range(26), k=5)
  std::vector<int> letters(26);
  for (int i = 0; i < 26; ++i) letters[i] = i;
  EXPECT_EQ(PythonRandom(42).choices(letters, 5), (std::vector<int>{16, 0, 7, 5, 19}));
  // random.Random(2**40 + 5).getrandbits(32): a seed wider than 32 bits
  EXPECT_EQ(PythonRandom((1ull << 40) + 5).next_uint32(), 2166296868u);
}

TEST(TextUtils, PythonSplitCollapseStrip) {
  EXPECT_EQ(split_whitespace("  a\tb\n\nc \xc2\xa0 d "),
            (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(collapse_whitespace("a \n\t b\xe2\x80\x83"
                                "c"),
            "a b c");
  EXPECT_EQ(strip(" \n x y \t"), "x y");
  EXPECT_EQ(replace_all("are you aware", "are", "is"), "is you awis");
}

TEST(TextUtils, SentencesSplitAtEndsNotAbbreviations) {
  const std::string text =
      "Mr. Smith went to Washington. He saw e.g. the Capitol! Did he? Yes, said J. Doe. \"Done.\" "
      "End";
  const std::vector<std::string> sentences = split_sentences(text);
  EXPECT_EQ(sentences,
            (std::vector<std::string>{"Mr. Smith went to Washington.", "He saw e.g. the Capitol!",
                                      "Did he?", "Yes, said J. Doe.", "\"Done.\"", "End"}));
  EXPECT_EQ(join(sentences, " "), text);
}

TEST(TokenCounter, PiecewiseCountEqualsWholeCount) {
  KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays/addiction.txt"));
  test::FakeTokenizer tokenizer;
  TokenCounter counter(tokenizer);
  const std::string text = "<|im_start|>user\n" +
                           read_text_file(test::fixture("haystack/pg_essays/addiction.txt")) +
                           " 1. alpha 2. beta, 12345 <|im_end|>";
  EXPECT_EQ(counter.fast(text), counter.exact(text));
  EXPECT_EQ(counter.fast(text), counter.fast(text));  // memoised second pass
}

}  // namespace
}  // namespace kvb
