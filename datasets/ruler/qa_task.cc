// RULER QA (scripts/data/synthetic/qa.py, HEAD; docs/benchmarks.md §1.2): qa_1 from SQuAD v2 dev,
// qa_2 from HotpotQA dev (distractor). The gold documents plus distractors, shuffled with a fresh
// Random(seed), rendered "Document i:\n..." and joined with "\n\n"; sample i asks question i.
#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/ruler/ruler_constants.h"
#include "datasets/ruler/ruler_task.h"
#include "datasets/text_utils.h"

namespace kvb::ruler {
namespace fs = std::filesystem;

namespace {

struct Question {
  std::string query;
  std::vector<std::string> answers;
  std::vector<size_t> gold;  // document indices, in order
  std::vector<size_t> more;  // SQuAD: the article's other paragraphs
};

struct QaCorpus {
  std::vector<std::string> documents;  // sorted, unique
  std::vector<Question> questions;
};

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw FormatError(path.string() + " is not valid JSON: " + error.what());
  }
}

size_t index_of(const std::vector<std::string>& sorted_documents, const std::string& document) {
  return std::lower_bound(sorted_documents.begin(), sorted_documents.end(), document) -
         sorted_documents.begin();
}

std::vector<std::string> sorted_unique(std::vector<std::string> list) {
  std::sort(list.begin(), list.end());
  list.erase(std::unique(list.begin(), list.end()), list.end());
  return list;
}

// read_squad(): unique paragraphs sorted; answerable questions in file order, gold paragraph
// first, the article's other paragraphs as preferred distractors.
QaCorpus read_squad(const fs::path& path) {
  const nlohmann::json data = read_json(path);
  QaCorpus corpus;
  try {
    std::vector<std::string> all;
    for (const auto& article : data.at("data"))
      for (const auto& paragraph : article.at("paragraphs"))
        all.push_back(paragraph.at("context").get<std::string>());
    corpus.documents = sorted_unique(all);
    for (const auto& article : data.at("data")) {
      std::vector<size_t> article_docs;
      for (const auto& paragraph : article.at("paragraphs"))
        article_docs.push_back(
            index_of(corpus.documents, paragraph.at("context").get<std::string>()));
      for (const auto& paragraph : article.at("paragraphs")) {
        const size_t gold = index_of(corpus.documents, paragraph.at("context").get<std::string>());
        for (const auto& qa : paragraph.at("qas")) {
          if (qa.value("is_impossible", false)) continue;
          Question question;
          question.query = qa.at("question").get<std::string>();
          for (const auto& answer : qa.at("answers"))
            question.answers.push_back(answer.at("text").get<std::string>());
          question.gold = {gold};
          for (size_t doc : article_docs)
            if (doc != gold) question.more.push_back(doc);
          corpus.questions.push_back(std::move(question));
        }
      }
    }
  } catch (const nlohmann::json::exception& error) {
    throw FormatError(path.string() +
                      " does not have SQuAD v2's layout (data[].paragraphs[]."
                      "context/qas[].question/answers/is_impossible): " +
                      error.what());
  }
  return corpus;
}

// read_hotpotqa(): documents "title\n" + the paragraph's sentences concatenated; all 10
// paragraphs of a question are its gold documents.
QaCorpus read_hotpotqa(const fs::path& path) {
  const nlohmann::json data = read_json(path);
  QaCorpus corpus;
  const auto document = [](const nlohmann::json& entry) {
    std::string text = entry.at(0).get<std::string>() + "\n";
    for (const auto& sentence : entry.at(1)) text += sentence.get<std::string>();
    return text;
  };
  try {
    std::vector<std::string> all;
    for (const auto& item : data)
      for (const auto& entry : item.at("context")) all.push_back(document(entry));
    corpus.documents = sorted_unique(all);
    for (const auto& item : data) {
      Question question;
      question.query = item.at("question").get<std::string>();
      question.answers = {item.at("answer").get<std::string>()};
      for (const auto& entry : item.at("context"))
        question.gold.push_back(index_of(corpus.documents, document(entry)));
      corpus.questions.push_back(std::move(question));
    }
  } catch (const nlohmann::json::exception& error) {
    throw FormatError(path.string() +
                      " does not have HotpotQA's layout ([{question, answer, "
                      "context: [[title, [sentences]]]}]): " +
                      error.what());
  }
  return corpus;
}

fs::path find_qa_file(const fs::path& folder, const std::vector<std::string>& names,
                      const std::string& what) {
  for (const std::string& name : names)
    if (fs::exists(folder / name)) return folder / name;
  throw InputError("RULER " + what + ": expected " + (folder / names.front()).string() + " (or " +
                   join(std::vector<std::string>(names.begin() + 1, names.end()), ", ") +
                   " there); download it and set the sweep config's \"data_dir\" (gen-data: "
                   "--data-dir) to DIR with the file in DIR or DIR/qa");
}

// The official QA file of qa_1 (SQuAD v2 dev) or qa_2 (HotpotQA dev distractor).
fs::path qa_file(const std::string& name, const fs::path& folder) {
  if (name == "qa_1")
    return find_qa_file(folder, {"squad.json", "dev-v2.0.json"}, "qa_1 (SQuAD v2 dev)");
  if (name == "qa_2")
    return find_qa_file(folder, {"hotpotqa.json", "hotpot_dev_distractor_v1.json"},
                        "qa_2 (HotpotQA dev distractor)");
  throw InputError("unknown RULER task '" + name + "'");
}

class QaTask : public RulerTask {
 public:
  QaTask(const std::string& name, const TaskContext& context)
      : frame_(*context.frame), rng_seed_(context.seed) {
    const fs::path file = qa_file(name, context.data->qa_dir);
    corpus_ = name == "qa_1" ? read_squad(file) : read_hotpotqa(file);
    if (corpus_.questions.empty())
      throw InputError("RULER " + name + ": the QA file has no answerable questions");
    if (corpus_.documents.empty())  // build() draws documents modulo their count
      throw FormatError(file.string() + ": RULER " + name +
                        " found no documents in it (every question's context is empty)");
  }

  int tokens_to_generate() const override { return kQaTokensToGenerate; }
  int incremental() const override { return 10; }

  Draft build(int num_docs, int index, PythonRandom& rng) override {
    if (static_cast<size_t>(index) >= corpus_.questions.size())
      throw InputError("RULER qa: --num " + std::to_string(index + 1) + " exceeds the " +
                       std::to_string(corpus_.questions.size()) + " questions in the QA file");
    const Question& question = corpus_.questions[index];
    const size_t total = corpus_.documents.size();
    std::vector<size_t> chosen;
    if (static_cast<size_t>(num_docs) < total) {
      const size_t wanted = static_cast<size_t>(std::max<int>(0, num_docs - question.gold.size()));
      chosen = question.gold;
      if (wanted > question.more.size()) {
        chosen.insert(chosen.end(), question.more.begin(), question.more.end());
        std::set<size_t> used(chosen.begin(), chosen.end());
        std::vector<size_t> others;
        for (size_t i = 0; i < total; ++i)
          if (!used.count(i)) others.push_back(i);
        const size_t extra = std::min(others.size(), wanted - question.more.size());
        for (size_t doc : rng.sample(others, extra)) chosen.push_back(doc);
      } else {
        for (size_t doc : rng.sample(question.more, wanted)) chosen.push_back(doc);
      }
    } else {
      // HEAD: the sorted corpus repeated cyclically, without forcing the gold document.
      for (int i = 0; i < num_docs; ++i) chosen.push_back(static_cast<size_t>(i) % total);
    }
    PythonRandom(rng_seed_).shuffle(chosen);
    std::vector<std::string> rendered;
    for (size_t i = 0; i < chosen.size(); ++i)
      rendered.push_back(format_template(
          kQaDocument, {{"i", std::to_string(i + 1)}, {"document", corpus_.documents[chosen[i]]}}));
    const std::map<std::string, std::string> fields = {{"context", join(rendered, "\n\n")},
                                                       {"query", question.query}};
    const std::string framed = frame_.prefix + kQaTemplate + frame_.suffix + kQaAnswerPrefix;
    Draft draft = split_prompt(format_template(framed, fields), kQaAnswerPrefix, kQaQuestionMarker);
    draft.references = question.answers;
    draft.extra["num_docs"] = num_docs;
    return draft;
  }

 private:
  ChatFrame frame_;
  uint64_t rng_seed_;
  QaCorpus corpus_;
};

}  // namespace

void check_qa_task_data(const std::string& name, const RulerDataPaths& data) {
  qa_file(name, data.qa_dir);
}

std::unique_ptr<RulerTask> make_qa_task(const std::string& name, const TaskContext& context) {
  return std::make_unique<QaTask>(name, context);
}

}  // namespace kvb::ruler
