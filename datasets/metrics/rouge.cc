#include "datasets/metrics/rouge.h"

#include <algorithm>
#include <map>
#include <set>

#include "datasets/metrics/porter_stemmer.h"

namespace kvb {
namespace {

using Words = std::vector<py::Text>;

// rouge.Rouge._get_avg_scores: pieces of the text between "." that are non-empty, each with its
// whitespace runs collapsed (a whitespace-only piece becomes "" and is kept).
std::vector<py::Text> pltrdy_sentences(py::TextView text) {
  std::vector<py::Text> sentences;
  for (const py::Text& piece : py::split(text, U".")) {
    if (piece.empty()) continue;
    sentences.push_back(py::join(py::split_whitespace(piece), U" "));
  }
  return sentences;
}

// LCS table of rouge_score._lcs (pltrdy): table[i][j] over x[:i], y[:j].
std::vector<std::vector<int>> lcs_table(const Words& x, const Words& y) {
  std::vector<std::vector<int>> table(x.size() + 1, std::vector<int>(y.size() + 1, 0));
  for (size_t i = 1; i <= x.size(); ++i)
    for (size_t j = 1; j <= y.size(); ++j)
      table[i][j] = x[i - 1] == y[j - 1] ? table[i - 1][j - 1] + 1
                                         : std::max(table[i - 1][j], table[i][j - 1]);
  return table;
}

struct RecursionLimitExceeded {};

// pltrdy's _recon_lcs, iteratively, counting the frames its recursive version would use.
std::vector<py::Text> pltrdy_lcs_words(const Words& x, const Words& y, int max_frames) {
  const auto table = lcs_table(x, y);
  std::vector<py::Text> reversed;
  size_t i = x.size(), j = y.size();
  int frames = 1;
  while (i > 0 && j > 0) {
    if (x[i - 1] == y[j - 1]) {
      reversed.push_back(x[i - 1]);
      --i, --j;
    } else if (table[i - 1][j] > table[i][j - 1]) {
      --i;
    } else {
      --j;
    }
    ++frames;
  }
  if (frames > max_frames) throw RecursionLimitExceeded{};
  return reversed;
}

Words split_words(const std::vector<py::Text>& sentences) {
  Words words;
  for (const auto& s : sentences)
    for (auto& w : py::split(s, U" ")) words.push_back(std::move(w));
  return words;
}

}  // namespace

double pltrdy_rouge_l_f(py::TextView hypothesis, py::TextView reference, int max_readout_frames) {
  const auto hyp_sentences = pltrdy_sentences(hypothesis);
  const auto ref_sentences = pltrdy_sentences(reference);
  if (hyp_sentences.empty() || ref_sentences.empty())
    return 0.0;  // "Hypothesis/Reference is empty."
  const Words hyp_words = split_words(hyp_sentences);
  const Words ref_words = split_words(ref_sentences);
  const double m =
      static_cast<double>(std::set<py::Text>(ref_words.begin(), ref_words.end()).size());
  const double n =
      static_cast<double>(std::set<py::Text>(hyp_words.begin(), hyp_words.end()).size());
  std::set<py::Text> lcs_union;
  try {
    for (const auto& ref_sentence : ref_sentences) {
      const Words x = py::split(ref_sentence, U" ");
      for (const auto& hyp_sentence : hyp_sentences) {
        const Words y = py::split(hyp_sentence, U" ");
        for (auto& w : pltrdy_lcs_words(x, y, max_readout_frames)) lcs_union.insert(std::move(w));
      }
    }
  } catch (const RecursionLimitExceeded&) {
    return 0.0;
  }
  const double llcs = static_cast<double>(lcs_union.size());
  const double recall = llcs / m;
  const double precision = llcs / n;
  return 2.0 * ((precision * recall) / (precision + recall + 1e-8));
}

std::vector<py::Text> rouge_score_tokenize(py::TextView text) {
  const py::Text lowered = py::lower(text);
  std::vector<py::Text> tokens;
  py::Text current;
  for (char32_t c : lowered) {
    const bool alnum = (c >= U'a' && c <= U'z') || (c >= U'0' && c <= U'9');
    if (alnum) {
      current.push_back(c);
    } else if (!current.empty()) {
      tokens.push_back(std::move(current));
      current.clear();
    }
  }
  if (!current.empty()) tokens.push_back(std::move(current));
  return tokens;
}

std::vector<py::Text> rouge_score_tokenize_stemmed(py::TextView text) {
  std::vector<py::Text> tokens = rouge_score_tokenize(text);
  for (auto& token : tokens) {
    if (token.size() <= 3) continue;
    token = py::T(porter_stem(py::to_utf8(token)));
  }
  return tokens;
}

RougeScore rouge_score_rouge1(py::TextView target, py::TextView prediction, bool use_stemmer) {
  const auto target_tokens =
      use_stemmer ? rouge_score_tokenize_stemmed(target) : rouge_score_tokenize(target);
  const auto prediction_tokens =
      use_stemmer ? rouge_score_tokenize_stemmed(prediction) : rouge_score_tokenize(prediction);
  std::map<py::Text, long> target_counts, prediction_counts;
  for (const auto& t : target_tokens) ++target_counts[t];
  for (const auto& t : prediction_tokens) ++prediction_counts[t];
  long overlap = 0;
  for (const auto& [token, count] : target_counts) {
    auto it = prediction_counts.find(token);
    if (it != prediction_counts.end()) overlap += std::min(count, it->second);
  }
  RougeScore score;
  score.precision = static_cast<double>(overlap) /
                    static_cast<double>(std::max<size_t>(prediction_tokens.size(), 1));
  score.recall =
      static_cast<double>(overlap) / static_cast<double>(std::max<size_t>(target_tokens.size(), 1));
  score.fmeasure = score.precision + score.recall > 0
                       ? 2 * score.precision * score.recall / (score.precision + score.recall)
                       : 0.0;
  return score;
}

namespace {

// rouge_score.lcs_ind: indices into ref of one LCS, read out without recursion (left when
// t[i][j-1] > t[i-1][j], otherwise up).
std::vector<size_t> lcs_indices(const Words& ref, const Words& can) {
  const auto t = lcs_table(ref, can);
  std::vector<size_t> indices;
  size_t i = ref.size(), j = can.size();
  while (i > 0 && j > 0) {
    if (ref[i - 1] == can[j - 1]) {
      indices.push_back(i - 1);
      --i, --j;
    } else if (t[i][j - 1] > t[i - 1][j]) {
      --j;
    } else {
      --i;
    }
  }
  return indices;
}

std::vector<Words> lsum_sentences(py::TextView text) {
  std::vector<Words> out;
  for (const py::Text& s : py::split(text, U"\n"))
    if (!s.empty()) out.push_back(rouge_score_tokenize(s));
  return out;
}

}  // namespace

double rouge_lsum_f(py::TextView reference, py::TextView prediction) {
  const auto ref_sentences = lsum_sentences(reference);
  const auto can_sentences = lsum_sentences(prediction);
  if (ref_sentences.empty() || can_sentences.empty()) return 0.0;
  size_t m = 0, n = 0;
  std::map<py::Text, long> ref_counts, can_counts;
  for (const auto& s : ref_sentences) {
    m += s.size();
    for (const auto& t : s) ++ref_counts[t];
  }
  for (const auto& s : can_sentences) {
    n += s.size();
    for (const auto& t : s) ++can_counts[t];
  }
  if (m == 0 || n == 0) return 0.0;
  long hits = 0;
  for (const auto& r : ref_sentences) {
    std::set<size_t> union_indices;
    for (const auto& c : can_sentences)
      for (size_t idx : lcs_indices(r, c)) union_indices.insert(idx);
    for (size_t idx : union_indices) {
      const py::Text& token = r[idx];
      if (can_counts[token] > 0 && ref_counts[token] > 0) {
        ++hits;
        --can_counts[token];
        --ref_counts[token];
      }
    }
  }
  const double recall = static_cast<double>(hits) / static_cast<double>(m);
  const double precision = static_cast<double>(hits) / static_cast<double>(n);
  return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
}

}  // namespace kvb
