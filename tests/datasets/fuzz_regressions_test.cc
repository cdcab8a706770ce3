// Regression tests for the dataset readers' bugs of issue 18: each says whether a fuzz target of
// tests/fuzz/ found it or a review of the reader it covers did (the target then reproduces it).
#include <gtest/gtest.h>

#include <fstream>

#include "common/errors.h"
#include "datasets/jsonl_reader.h"
#include "datasets/longbench/loader.h"
#include "datasets/ruler/ruler.h"
#include "tests/datasets/fake_tokenizer.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  return test::fresh_temp_dir("kvb_datasets_fuzz_regressions_" + name);
}

// Review, reproduced by ruler_qa_fuzz: a HotpotQA file whose questions all have an empty context
// gave a corpus without documents, and qa_2's build() took a document index modulo zero (UBSan:
// division by zero).
TEST(FuzzRegressions, HotpotQaWithoutDocumentsIsAFormatErrorNamingTheFile) {
  const fs::path dir = fresh_dir("hotpot");
  std::ofstream(dir / "hotpotqa.json") << R"([{"question": "q", "answer": "a", "context": []}])";
  RulerDataPaths paths;
  paths.qa_dir = dir;
  test::FakeTokenizer tokenizer;
  try {
    generate_ruler({"qa_2", 512, 1, 42, {}}, tokenizer, ChatFrame{}, paths);
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "hotpotqa.json").string()), std::string::npos)
        << e.what();
  }
  // One document is enough.
  std::ofstream(dir / "hotpotqa.json")
      << R"([{"question": "q", "answer": "a", "context": [["T", ["Some text about a."]]]}])";
  EXPECT_EQ(generate_ruler({"qa_2", 512, 1, 42, {}}, tokenizer, ChatFrame{}, paths).size(), 1u);
}

// Review, reproduced by benchmark_jsonl_fuzz: a LongBench record with "length": 1e300 went through
// get<int>(), undefined behaviour (UBSan: float-cast-overflow); it is now a FormatError naming the
// file and line.
TEST(FuzzRegressions, LongBenchLengthOutOfRangeIsAFormatError) {
  const fs::path dir = fresh_dir("longbench");
  const auto write = [&](const std::string& length) {
    std::ofstream(dir / "qasper.jsonl")
        << R"({"input": "q", "context": "c", "answers": ["a"], "length": )" << length << "}\n";
  };
  for (const char* bad : {"1e300", "-1", "-1e300", "2147483648"}) {
    write(bad);
    try {
      load_longbench(dir.string(), "qasper");
      ADD_FAILURE() << "length " << bad << " was accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("qasper.jsonl:1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("length"), std::string::npos) << e.what();
    }
  }
  write("3500");
  EXPECT_EQ(load_longbench(dir.string(), "qasper").at(0).length, 3500);
  write("3500.0");
  EXPECT_EQ(load_longbench(dir.string(), "qasper").at(0).length, 3500);
}

// sweep_config_fuzz found that nlohmann's parser throws out_of_range, not parse_error, for a
// number beyond double (1e999); a review found the JSONL reader caught only parse_error too, so
// such a line in a LongBench file or a predictions file ended kvbench with an uncaught exception.
TEST(FuzzRegressions, JsonlNumberOverflowIsAFormatErrorNamingFileAndLine) {
  const fs::path dir = fresh_dir("jsonl");
  std::ofstream(dir / "x.jsonl") << "{\"a\": 1}\n{\"a\": 1e999}\n";
  try {
    for_each_jsonl_record((dir / "x.jsonl").string(), [](const nlohmann::json&, size_t) {});
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("x.jsonl:2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvb
