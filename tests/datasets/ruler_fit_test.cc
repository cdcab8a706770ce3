// RULER with SmolLM2's own tokenizer and chat template, the acceptance check: for each of
// the 13 tasks at 4K and 8K, every sample fits the budget (prompt tokens, chat frame and answer
// prefix included, + tokens_to_generate <= length), uses at least 90% of it, holds every reference
// answer in its context, and is the official template exactly around its variable parts. The
// template strings below are typed from NVIDIA/RULER scripts/data/synthetic/constants.py (HEAD
// c3f5e3b), independently of datasets/ruler/ruler_constants.h, so a typo in either fails here.
//
// QA runs on SQuAD v2 / HotpotQA-layout files built from the essays with paragraphs of varying
// length (the real dev sets are not in the fixtures), so that document counts and lengths vary
// per question as they do with the real files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/strings.h"
#include "datasets/ruler/ruler.h"
#include "datasets/text_utils.h"
#include "engine/chat_template.h"
#include "engine/gguf.h"
#include "tests/datasets/ruler_tasks.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

// constants.py TASKS, split at {context} (and {query} where it sits at the end).
constexpr char kNiahHead[] =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to "
    "memorize it. I will quiz you about the {type_needle_v} afterwards.\n";
constexpr char kNiahQuestion[] =
    "\nWhat are all the special magic {type_needle_v} for {query} mentioned in the provided text?";
constexpr char kNiahAnswerPrefix[] =
    " The special magic {type_needle_v} for {query} mentioned in the provided text are";
constexpr char kVtHead[] =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
constexpr char kVtQuestion[] =
    "\nQuestion: Find all variables that are assigned the value {query} in the text above.";
constexpr char kVtAnswerPrefix[] =
    " Answer: According to the chain(s) of variable assignment in the text above, 5 variables are "
    "assigned the value {query}, they are: ";
constexpr char kCweHead[] =
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n";
constexpr char kCweQuestion[] = "\nQuestion: What are the 10 most common words in the above list?";
constexpr char kCweAnswerPrefix[] =
    " Answer: The top 10 words that appear most often in the list are:";
constexpr char kFweHead[] =
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. ";
constexpr char kFweQuestion[] =
    "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three "
    "most frequently appeared words in the above coded text?";
constexpr char kFweAnswerPrefix[] =
    " Answer: According to the coded text above, the three most frequently appeared words are:";
constexpr char kQaHead[] =
    "Answer the question based on the given documents. Only give me the answer and do not output "
    "any other words.\n\nThe following are given documents.\n\n";
constexpr char kQaQuestion[] =
    "\n\nAnswer the question based on the given documents. Only give me the answer and do not "
    "output any other words.\n\nQuestion: {query}";
constexpr char kQaAnswerPrefix[] = " Answer:";

std::string fill_field(std::string text, const std::string& field, const std::string& value) {
  return replace_all(text, "{" + field + "}", value);
}

// niah.py's single-needle rewrite, on the template text before formatting.
std::string singular(std::string text) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"Some", "A"}, {"are all", "is"}, {"are", "is"}, {"answers", "answer"}})
    text = replace_all(text, from, to);
  return text;
}

bool starts_with(const std::string& text, const std::string& head) {
  return text.rfind(head, 0) == 0;
}
bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() &&
         text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// SQuAD v2 and HotpotQA layouts from essay text: paragraphs of 45-240 words in a fixed cycle;
// each question's answer is three words of its gold paragraph.
struct EssayQa {
  fs::path folder;
  std::vector<std::string> squad_questions;  // answerable, in file order
  std::vector<std::string> hotpot_questions;
};

EssayQa write_essay_qa() {
  EssayQa qa;
  qa.folder = fs::temp_directory_path() / ("kvb_ruler_fit_qa_" + std::to_string(getpid()));
  fs::create_directories(qa.folder);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(test::fixture("haystack/pg_essays")))
    files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> words;
  for (const fs::path& file : files)
    for (std::string& word : split_whitespace(read_text_file(file))) words.push_back(word);
  const int kSizes[] = {60, 180, 110, 240, 90, 150, 45, 200, 130, 75};
  std::vector<std::vector<std::string>> paragraphs;
  for (size_t at = 0, i = 0; paragraphs.size() < 400; ++i) {
    const size_t size = kSizes[i % 10];
    paragraphs.emplace_back(words.begin() + at, words.begin() + at + size);
    at += size;
  }
  const auto text = [](const std::vector<std::string>& words, size_t from, size_t to) {
    return join(std::vector<std::string>(words.begin() + from, words.begin() + to), " ");
  };
  const auto question = [&](const std::vector<std::string>& p) {
    return "Which three words follow \"" + text(p, 0, 3) + "\" in the passage?";
  };
  nlohmann::json squad = {{"version", "v2.0"}, {"data", nlohmann::json::array()}};
  for (size_t article = 0; article < 50; ++article) {
    nlohmann::json article_paragraphs = nlohmann::json::array();
    for (size_t i = article * 8; i < article * 8 + 8; ++i) {
      const std::vector<std::string>& p = paragraphs[i];
      nlohmann::json qas = {{{"question", question(p)},
                             {"id", std::to_string(i)},
                             {"answers", {{{"text", text(p, 3, 6)}, {"answer_start", 0}}}},
                             {"is_impossible", false}}};
      if (i % 3 == 0)
        qas.push_back({{"question", "Unanswerable?"},
                       {"id", "x" + std::to_string(i)},
                       {"answers", nlohmann::json::array()},
                       {"is_impossible", true}});
      article_paragraphs.push_back({{"context", text(p, 0, p.size())}, {"qas", qas}});
      qa.squad_questions.push_back(question(p));
    }
    squad["data"].push_back(
        {{"title", "Essay " + std::to_string(article)}, {"paragraphs", article_paragraphs}});
  }
  std::ofstream(qa.folder / "squad.json") << squad.dump();
  nlohmann::json hotpot = nlohmann::json::array();
  for (size_t q = 0; q < 40; ++q) {
    nlohmann::json context = nlohmann::json::array();
    for (size_t i = q * 10; i < q * 10 + 10; ++i) {
      const std::vector<std::string>& p = paragraphs[i];
      const size_t half = p.size() / 2;
      context.push_back(
          {"Essay part " + std::to_string(i), {text(p, 0, half) + " ", text(p, half, p.size())}});
    }
    const std::vector<std::string>& gold = paragraphs[q * 10 + 3];
    hotpot.push_back(
        {{"question", question(gold)}, {"answer", text(gold, 3, 6)}, {"context", context}});
    qa.hotpot_questions.push_back(question(gold));
  }
  std::ofstream(qa.folder / "hotpotqa.json") << hotpot.dump();
  return qa;
}

// Removes the generated QA folder when the test program exits.
struct RemoveAtExit {
  fs::path path;
  ~RemoveAtExit() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

struct SmolLm2 {
  std::unique_ptr<Tokenizer> tokenizer;
  ChatFrame frame;
};

// The model's tokenizer and its chat template split around the user message (what gen-data does).
const SmolLm2& smollm2() {
  static const SmolLm2* loaded = [] {
    auto gguf = GgufFile::open(test::default_model_path());
    auto* model = new SmolLm2{tokenizer_from_gguf(*gguf), {}};
    static constexpr char kMarker[] = "\x01user\x01";
    const std::string rendered =
        apply_chat_template(chat_template(chat_template_name_for(*gguf)), kMarker);
    const size_t at = rendered.find(kMarker);
    model->frame = {rendered.substr(0, at), rendered.substr(at + std::string(kMarker).size())};
    return model;
  }();
  return *loaded;
}

// The prompt is frame prefix + head + (middle) + question + frame suffix + answer prefix, where
// the head and tail are the official text; returns the middle (the context).
std::string expect_framed(const std::string& prompt, const std::string& head,
                          const std::string& tail) {
  EXPECT_TRUE(starts_with(prompt, head)) << "head differs:\n" << prompt.substr(0, head.size() + 80);
  EXPECT_TRUE(ends_with(prompt, tail))
      << "tail differs:\n"
      << prompt.substr(prompt.size() - std::min(prompt.size(), tail.size() + 80));
  if (prompt.size() < head.size() + tail.size()) return "";
  return prompt.substr(head.size(), prompt.size() - head.size() - tail.size());
}

void expect_niah_template(const std::string& task, const Sample& s, const ChatFrame& frame) {
  const bool single = task.find("single") != std::string::npos || task == "niah_multikey_1" ||
                      task == "niah_multikey_2" || task == "niah_multikey_3";
  const std::string type =
      task == "niah_single_3" || task == "niah_multikey_3" ? "uuids" : "numbers";
  const std::string shown_type = single ? type.substr(0, type.size() - 1) : type;
  // The query: the key(s) from the question, "k1, k2, k3, and k4" for multiquery.
  const std::regex question(single
                                ? "What is the special magic \\w+ for (.+) mentioned in the "
                                  "provided text\\?[\\s\\S]*"
                                : "What are all the special magic \\w+ for (.+) mentioned in the "
                                  "provided text\\?[\\s\\S]*");
  std::smatch match;
  ASSERT_TRUE(std::regex_match(s.question_part, match, question)) << s.question_part;
  const std::string query = match[1];
  const auto rewrite = [&](const std::string& text) { return single ? singular(text) : text; };
  const std::string head =
      rewrite(frame.prefix) + fill_field(rewrite(kNiahHead), "type_needle_v", shown_type);
  const std::string tail =
      fill_field(fill_field(rewrite(kNiahQuestion), "type_needle_v", shown_type), "query", query) +
      rewrite(frame.suffix) +
      fill_field(fill_field(rewrite(kNiahAnswerPrefix), "type_needle_v", shown_type), "query",
                 query);
  const std::string context =
      expect_framed(s.context_part + s.question_part + s.answer_prefix, head, tail);
  // Needles stay plural; every queried value sits in its key's needle. Keys never hold commas.
  std::vector<std::string> keys;
  const std::string separated = replace_all(replace_all(query, ", and ", "\x1f"), ", ", "\x1f");
  for (size_t start = 0;;) {
    const size_t end = separated.find('\x1f', start);
    keys.push_back(separated.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (task == "niah_multivalue") {
    for (const std::string& value : s.references)
      EXPECT_NE(
          context.find("One of the special magic numbers for " + keys[0] + " is: " + value + "."),
          std::string::npos);
  } else {
    ASSERT_EQ(keys.size(), s.references.size()) << query;
    for (size_t i = 0; i < keys.size(); ++i)
      EXPECT_NE(context.find("One of the special magic " + type + " for " + keys[i] +
                             " is: " + s.references[i] + "."),
                std::string::npos)
          << keys[i];
  }
}

void expect_vt_template(const Sample& s, const ChatFrame& frame) {
  std::smatch match;
  ASSERT_TRUE(std::regex_search(s.question_part, match, std::regex("value (\\d{5}) in the text")));
  const std::string value = match[1];
  const std::string prompt = s.context_part + s.question_part + s.answer_prefix;
  // The one-shot demo (bare template + answer prefix + " " + its 5 names + "\n") comes first,
  // then "\n" and the task.
  const size_t task_at = prompt.find("\n\n" + std::string(kVtHead));
  ASSERT_NE(task_at, std::string::npos);
  const std::string demo = prompt.substr(frame.prefix.size(), task_at + 1 - frame.prefix.size());
  EXPECT_TRUE(starts_with(prompt, frame.prefix + kVtHead));
  const std::regex demo_tail(
      "\nQuestion: Find all variables that are assigned the value (\\d{5}) in the text above\\. "
      "Answer: According to the chain\\(s\\) of variable assignment in the text above, 5 variables "
      "are assigned the value \\1, they are:  [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3}\n$");
  const size_t demo_question = demo.rfind("\nQuestion:");
  ASSERT_NE(demo_question, std::string::npos);
  EXPECT_TRUE(std::regex_match(demo.substr(demo_question), demo_tail))
      << demo.substr(demo_question);
  const std::string context = expect_framed(prompt.substr(task_at + 2), kVtHead,
                                            fill_field(kVtQuestion, "query", value) + frame.suffix +
                                                fill_field(kVtAnswerPrefix, "query", value));
  EXPECT_NE(context.find("VAR " + s.references[0] + " = " + value + "\n"), std::string::npos);
  for (size_t j = 1; j < s.references.size(); ++j)
    EXPECT_NE(context.find("VAR " + s.references[j] + " = VAR " + s.references[j - 1] + " "),
              std::string::npos);
}

void expect_cwe_template(const Sample& s, const ChatFrame& frame) {
  const std::string prompt = s.context_part + s.question_part + s.answer_prefix;
  const std::string tail = kCweQuestion + frame.suffix + kCweAnswerPrefix;
  // The demo is the whole framed prompt with its answer, then "\n", then the framed task.
  const std::string task_head = "\n" + frame.prefix + kCweHead;
  const size_t task_at = prompt.find(task_head);
  ASSERT_NE(task_at, std::string::npos);
  const std::string demo = prompt.substr(0, task_at);
  const std::string demo_list = expect_framed(
      demo.substr(0, demo.rfind(kCweAnswerPrefix) + std::string(kCweAnswerPrefix).size()),
      frame.prefix + kCweHead, tail);
  EXPECT_TRUE(std::regex_match(
      demo.substr(demo.rfind(kCweAnswerPrefix) + std::string(kCweAnswerPrefix).size()),
      std::regex("( \\d+\\. [^0-9]+){9} 10\\. [^0-9]+")))
      << demo.substr(demo.rfind(kCweAnswerPrefix));
  EXPECT_TRUE(starts_with(demo_list, "1. "));
  const std::string list = expect_framed(prompt.substr(task_at + 1), frame.prefix + kCweHead, tail);
  EXPECT_TRUE(starts_with(list, "1. "));
  for (const std::string& word : s.references)
    EXPECT_NE(list.find(". " + word + " "), std::string::npos) << word;
}

void expect_fwe_template(const Sample& s, const ChatFrame& frame) {
  const std::string text =
      expect_framed(s.context_part + s.question_part + s.answer_prefix, frame.prefix + kFweHead,
                    kFweQuestion + frame.suffix + kFweAnswerPrefix);
  for (const std::string& word : s.references)
    EXPECT_NE((" " + text + " ").find(" " + word + " "), std::string::npos) << word;
}

void expect_qa_template(const Sample& s, const ChatFrame& frame, const std::string& query) {
  const std::string documents =
      expect_framed(s.context_part + s.question_part + s.answer_prefix, frame.prefix + kQaHead,
                    fill_field(kQaQuestion, "query", query) + frame.suffix + kQaAnswerPrefix);
  EXPECT_TRUE(starts_with(documents, "Document 1:\n"));
  EXPECT_NE(documents.find("\n\nDocument 2:\n"), std::string::npos);
}

class RulerSmolLm2Fit : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RulerSmolLm2Fit, FitsUsesNinetyPercentHoldsAnswersFollowsTemplate) {
  const auto& [task, length] = GetParam();
  KVB_REQUIRE_FILE(test::default_model_path());
  KVB_REQUIRE_FILE(test::fixture("haystack/pg_essays"));
  KVB_REQUIRE_FILE(test::fixture("wordlists/nounlist.txt"));
  static const EssayQa qa = write_essay_qa();
  static const RemoveAtExit cleanup{qa.folder};
  const RulerDataPaths paths{test::fixture("haystack/pg_essays"), test::fixture("wordlists"),
                             qa.folder};
  const SmolLm2& model = smollm2();
  ASSERT_TRUE(starts_with(model.frame.prefix, "<|im_start|>system\n")) << model.frame.prefix;
  ASSERT_TRUE(ends_with(model.frame.suffix, "<|im_start|>assistant\n")) << model.frame.suffix;
  constexpr int kSamples = 3;
  const std::vector<Sample> samples =
      generate_ruler({task, length, kSamples, 42, {}}, *model.tokenizer, model.frame, paths);
  ASSERT_EQ(samples.size(), static_cast<size_t>(kSamples));
  const int to_generate = ruler_tokens_to_generate(task);
  for (size_t index = 0; index < samples.size(); ++index) {
    const Sample& s = samples[index];
    SCOPED_TRACE(s.id);
    const std::string prompt = s.context_part + s.question_part + s.answer_prefix;
    // HF tokenizer.tokenize: special-token strings parsed, no BOS.
    const int tokens = static_cast<int>(model.tokenizer->encode(prompt, false, true).size());
    EXPECT_EQ(s.extra.at("prompt_tokens").get<int>(), tokens);
    EXPECT_LE(tokens + to_generate, length) << "over budget";
    EXPECT_GE(tokens + to_generate, 0.9 * length) << "uses under 90% of the budget";
    EXPECT_EQ(s.max_new_tokens, to_generate);
    EXPECT_FALSE(s.use_chat_template);  // the frame is in the text
    ASSERT_FALSE(s.references.empty());
    for (const std::string& reference : s.references)
      EXPECT_NE(s.context_part.find(reference), std::string::npos) << "reference " << reference;
    if (task.rfind("niah", 0) == 0) {
      expect_niah_template(task, s, model.frame);
    } else if (task == "vt") {
      expect_vt_template(s, model.frame);
    } else if (task == "cwe") {
      expect_cwe_template(s, model.frame);
    } else if (task == "fwe") {
      expect_fwe_template(s, model.frame);
    } else {
      expect_qa_template(s, model.frame,
                         task == "qa_1" ? qa.squad_questions[index] : qa.hotpot_questions[index]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTasks, RulerSmolLm2Fit, test::ruler_task_lengths(),
                         test::ruler_case_name);

}  // namespace
}  // namespace kvb
