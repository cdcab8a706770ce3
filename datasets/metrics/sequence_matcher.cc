#include "datasets/metrics/sequence_matcher.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

namespace kvb {
namespace {

struct Match {
  size_t a, b, size;
};

// The index of b that SequenceMatcher builds in __chain_b (b2j minus the popular items).
class SequenceIndex {
 public:
  explicit SequenceIndex(py::TextView b) {
    for (size_t j = 0; j < b.size(); ++j) positions_[b[j]].push_back(j);
    if (b.size() >= 200) {
      const size_t max_count = b.size() / 100 + 1;
      for (auto it = positions_.begin(); it != positions_.end();) {
        if (it->second.size() > max_count)
          it = positions_.erase(it);
        else
          ++it;
      }
    }
  }
  const std::vector<size_t>* find(char32_t c) const {
    auto it = positions_.find(c);
    return it == positions_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<char32_t, std::vector<size_t>> positions_;
};

// SequenceMatcher.find_longest_match with isjunk=None (so only popular items are excluded from the
// index, and the extension loops may still grow a match over them).
Match find_longest_match(py::TextView a, py::TextView b, const SequenceIndex& index, size_t alo,
                         size_t ahi, size_t blo, size_t bhi) {
  size_t best_i = alo, best_j = blo, best_size = 0;
  std::unordered_map<size_t, size_t> run_length, next_run_length;
  for (size_t i = alo; i < ahi; ++i) {
    next_run_length.clear();
    if (const auto* js = index.find(a[i])) {
      for (size_t j : *js) {
        if (j < blo) continue;
        if (j >= bhi) break;
        size_t previous = 0;
        if (j > 0) {
          auto it = run_length.find(j - 1);
          if (it != run_length.end()) previous = it->second;
        }
        const size_t k = next_run_length[j] = previous + 1;
        if (k > best_size) best_i = i + 1 - k, best_j = j + 1 - k, best_size = k;
      }
    }
    std::swap(run_length, next_run_length);
  }
  while (best_i > alo && best_j > blo && a[best_i - 1] == b[best_j - 1])
    --best_i, --best_j, ++best_size;
  while (best_i + best_size < ahi && best_j + best_size < bhi &&
         a[best_i + best_size] == b[best_j + best_size])
    ++best_size;
  return {best_i, best_j, best_size};
}

size_t matching_characters(py::TextView a, py::TextView b) {
  const SequenceIndex index(b);
  struct Range {
    size_t alo, ahi, blo, bhi;
  };
  std::vector<Range> queue{{0, a.size(), 0, b.size()}};
  size_t matched = 0;
  while (!queue.empty()) {
    const Range r = queue.back();
    queue.pop_back();
    const Match m = find_longest_match(a, b, index, r.alo, r.ahi, r.blo, r.bhi);
    if (m.size == 0) continue;
    matched += m.size;
    if (r.alo < m.a && r.blo < m.b) queue.push_back({r.alo, m.a, r.blo, m.b});
    if (m.a + m.size < r.ahi && m.b + m.size < r.bhi)
      queue.push_back({m.a + m.size, r.ahi, m.b + m.size, r.bhi});
  }
  return matched;
}

// Python's round() for a double: half to even.
double round_half_even(double x) { return std::nearbyint(x); }

}  // namespace

double sequence_matcher_ratio(py::TextView a, py::TextView b) {
  const size_t total = a.size() + b.size();
  if (total == 0) return 1.0;
  return 2.0 * static_cast<double>(matching_characters(a, b)) / static_cast<double>(total);
}

double indel_similarity_ratio(py::TextView a, py::TextView b) {
  const size_t total = a.size() + b.size();
  if (total == 0) return 1.0;
  std::vector<size_t> previous(b.size() + 1, 0), current(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j)
      current[j] =
          a[i - 1] == b[j - 1] ? previous[j - 1] + 1 : std::max(previous[j], current[j - 1]);
    std::swap(previous, current);
  }
  const size_t lcs = previous[b.size()];
  return static_cast<double>(2 * lcs) / static_cast<double>(total);
}

int fuzz_ratio(py::TextView a, py::TextView b, FuzzBackend backend) {
  if (a == b) return 100;
  if (a.empty() || b.empty()) return 0;
  const double ratio = backend == FuzzBackend::kDifflib ? sequence_matcher_ratio(a, b)
                                                        : indel_similarity_ratio(a, b);
  return static_cast<int>(round_half_even(100.0 * ratio));
}

}  // namespace kvb
