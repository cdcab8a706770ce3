#include "datasets/metrics/qa_f1.h"

#include <map>

#include "datasets/metrics/jieba.h"

namespace kvb {
namespace {

// The cn_punctuation string of LongBench's metrics.py and InfiniteBench's compute_scores.py
// (identical in both), followed in the scorers by string.punctuation.
constexpr std::u32string_view kChinesePunctuation =
    U"！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔"
    U"〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏.";

// re.sub(r"\b(a|an|the)\b", " ", text): the alternation tries "a", then "an", then "the" at each
// position; matches do not overlap and \b looks at the original text.
py::Text remove_articles(py::TextView text) {
  static const py::Text kArticles[] = {U"a", U"an", U"the"};
  py::Text out;
  size_t i = 0;
  while (i < text.size()) {
    const bool boundary_before = i == 0 || !py::is_word_char(text[i - 1]);
    size_t matched = 0;
    if (boundary_before) {
      for (const auto& article : kArticles) {
        if (text.substr(i, article.size()) != article) continue;
        const size_t end = i + article.size();
        if (end == text.size() || !py::is_word_char(text[end])) {
          matched = article.size();
          break;
        }
      }
    }
    if (matched) {
      out.push_back(U' ');
      i += matched;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

}  // namespace

py::Text normalize_answer(py::TextView text) {
  py::Text no_punctuation;
  for (char32_t c : py::lower(text))
    if (!py::is_ascii_punctuation(c)) no_punctuation.push_back(c);
  return py::join(py::split_whitespace(remove_articles(no_punctuation)), U" ");
}

py::Text normalize_zh_answer(py::TextView text) {
  py::Text out;
  for (char32_t c : py::lower(text)) {
    if (py::is_ascii_punctuation(c) || kChinesePunctuation.find(c) != std::u32string_view::npos)
      continue;
    if (py::is_space(c)) continue;
    out.push_back(c);
  }
  return out;
}

double token_f1(const std::vector<py::Text>& prediction,
                const std::vector<py::Text>& ground_truth) {
  std::map<py::Text, long> counts;
  for (const auto& t : prediction) ++counts[t];
  long same = 0;
  for (const auto& t : ground_truth) {
    auto it = counts.find(t);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0.0;
  const double precision = 1.0 * static_cast<double>(same) / static_cast<double>(prediction.size());
  const double recall = 1.0 * static_cast<double>(same) / static_cast<double>(ground_truth.size());
  return (2 * precision * recall) / (precision + recall);
}

double qa_f1_score(py::TextView prediction, py::TextView ground_truth) {
  return token_f1(py::split_whitespace(normalize_answer(prediction)),
                  py::split_whitespace(normalize_answer(ground_truth)));
}

double qa_f1_zh_score(py::TextView prediction, py::TextView ground_truth,
                      const JiebaSegmenter& jieba) {
  const auto tokens = [&](py::TextView text) {
    std::vector<py::Text> out;
    for (const auto& token : jieba.cut(text)) {
      py::Text normalized = normalize_zh_answer(token);
      if (!normalized.empty()) out.push_back(std::move(normalized));
    }
    return out;
  };
  return token_f1(tokens(prediction), tokens(ground_truth));
}

double char_f1_zh_score(py::TextView prediction, py::TextView ground_truth) {
  const auto chars = [](py::TextView text) {
    std::vector<py::Text> out;
    for (char32_t c : normalize_zh_answer(text)) out.emplace_back(1, c);
    return out;
  };
  return token_f1(chars(prediction), chars(ground_truth));
}

}  // namespace kvb
