// A deterministic random generator with CPython's `random` semantics (Mersenne Twister MT19937,
// seeded like `random.seed(int)`), so that the generators' draws are documented and reproducible,
// and so that RULER's fixed-seed permutations (a fresh `random.Random(seed).shuffle(...)`) are the
// same permutations CPython makes. Algorithms follow CPython's Lib/random.py and
// Modules/_randommodule.c: `random()` is the 53-bit double, `_randbelow` is getrandbits rejection
// sampling, `shuffle` is Fisher-Yates from the end, `sample` switches between its pool and set
// strategies at the same size threshold, `choices` (no weights) indexes with floor(random() * n).
// NumPy's legacy `np.random.randint` (used by RULER's VT value) is not reproduced: `randint` here
// draws from the same range, which is distribution-faithful (docs/benchmarks.md §0).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvb {

class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed);

  uint32_t next_uint32();
  double random();                                 // [0, 1), 53 bits
  std::vector<uint32_t> getrandbits_words(int k);  // little-endian 32-bit words of getrandbits(k)
  uint64_t randbelow(uint64_t n);                  // uniform in [0, n); n > 0
  int64_t randint(int64_t low, int64_t high);      // inclusive, like random.randint
  std::string uuid4();  // str(uuid.UUID(int=getrandbits(128), version=4))

  template <typename T>
  const T& choice(const std::vector<T>& items) {
    return items[randbelow(items.size())];
  }
  template <typename T>
  void shuffle(std::vector<T>& items) {
    for (size_t i = items.size(); i-- > 1;) std::swap(items[i], items[randbelow(i + 1)]);
  }
  // random.sample(range(n), k): k distinct indices in CPython's order.
  std::vector<size_t> sample_indices(size_t n, size_t k);
  template <typename T>
  std::vector<T> sample(const std::vector<T>& items, size_t k) {
    std::vector<T> out;
    out.reserve(k);
    for (size_t index : sample_indices(items.size(), k)) out.push_back(items[index]);
    return out;
  }
  // random.choices(items, k=k) without weights.
  template <typename T>
  std::vector<T> choices(const std::vector<T>& items, size_t k) {
    std::vector<T> out;
    out.reserve(k);
    for (size_t i = 0; i < k; ++i)
      out.push_back(items[static_cast<size_t>(random() * static_cast<double>(items.size()))]);
    return out;
  }

 private:
  void init_by_array(const std::vector<uint32_t>& key);

  std::array<uint32_t, 624> state_{};
  int index_ = 624;
};

}  // namespace kvb
