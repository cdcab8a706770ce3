// Chinese word segmentation that reproduces jieba 0.42.1's default `jieba.cut(text)` (precise mode,
// HMM on), as LongBench's qa_f1_zh and rouge_zh metrics call it:
//  1. split the text into runs of [\u4E00-\u9FD5a-zA-Z0-9+#&._%-] and other characters; other
//     characters are yielded one by one ("\r\n" as one token);
//  2. in each run, build the DAG of dictionary words (prefix dictionary from dict.txt), pick the
//     route maximising sum(log(freq or 1) - log(total)) from the right (ties: the longer word);
//  3. consecutive single characters not forming a dictionary word go through the HMM (finalseg):
//     Viterbi over B/M/E/S states with jieba's start/transition/emission tables.
// The dictionary and HMM tables are read from a jieba package folder (Debian's python3-jieba puts
// it at /usr/lib/python3/dist-packages/jieba); nothing of jieba is vendored.
#pragma once

#include <array>
#include <string>
#include <unordered_map>
#include <vector>

#include "datasets/metrics/py_text.h"

namespace kvb {

class JiebaSegmenter {
 public:
  // Reads dict.txt and finalseg/prob_{start,trans,emit}.py under `jieba_dir`. Throws InputError
  // naming the missing file, FormatError naming a malformed one.
  explicit JiebaSegmenter(const std::string& jieba_dir);

  std::vector<py::Text> cut(py::TextView sentence) const;

  // The folder used by shared(): $KVB_JIEBA_DIR, else Debian's python3-jieba location.
  static std::string default_dir();
  // One segmenter per process, loaded on first use (loading takes about a second). Throws
  // InputError saying that the Chinese metrics are unsupported without jieba's data.
  static const JiebaSegmenter& shared();

 private:
  void cut_dag(py::TextView block, std::vector<py::Text>& out) const;
  void cut_hmm(py::TextView text, std::vector<py::Text>& out) const;
  void viterbi_words(py::TextView han, std::vector<py::Text>& out) const;
  long long frequency(py::TextView word, bool* found) const;

  std::unordered_map<py::Text, long long> frequencies_;  // words and their prefixes (freq 0)
  double log_total_ = 0;
  // HMM states in jieba's order B, M, E, S.
  std::array<double, 4> start_{};
  std::array<std::array<double, 4>, 4> transition_{};  // [from][to], -3.14e100 when absent
  std::array<std::unordered_map<char32_t, double>, 4> emission_;
};

}  // namespace kvb
