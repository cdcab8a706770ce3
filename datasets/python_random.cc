#include "datasets/python_random.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <unordered_set>

namespace kvb {
namespace {
constexpr int kStateSize = 624;
constexpr int kShift = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpperMask = 0x80000000U;
constexpr uint32_t kLowerMask = 0x7fffffffU;

int bit_length(uint64_t n) {
  int bits = 0;
  while (n) {
    ++bits;
    n >>= 1;
  }
  return bits;
}
}  // namespace

PythonRandom::PythonRandom(uint64_t seed) {
  // random.seed(int): the absolute value as little-endian 32-bit words (at least one word).
  std::vector<uint32_t> key;
  do {
    key.push_back(static_cast<uint32_t>(seed & 0xffffffffU));
    seed >>= 32;
  } while (seed);
  init_by_array(key);
}

void PythonRandom::init_by_array(const std::vector<uint32_t>& key) {
  state_[0] = 19650218U;
  for (int i = 1; i < kStateSize; ++i)
    state_[i] = 1812433253U * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  int i = 1;
  size_t j = 0;
  for (size_t k = std::max<size_t>(kStateSize, key.size()); k; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525U)) + key[j] +
                static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kStateSize) {
      state_[0] = state_[kStateSize - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kStateSize - 1; k; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941U)) -
                static_cast<uint32_t>(i);
    ++i;
    if (i >= kStateSize) {
      state_[0] = state_[kStateSize - 1];
      i = 1;
    }
  }
  state_[0] = 0x80000000U;
  index_ = kStateSize;
}

uint32_t PythonRandom::next_uint32() {
  if (index_ >= kStateSize) {
    for (int k = 0; k < kStateSize; ++k) {
      const uint32_t y = (state_[k] & kUpperMask) | (state_[(k + 1) % kStateSize] & kLowerMask);
      state_[k] = state_[(k + kShift) % kStateSize] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    index_ = 0;
  }
  uint32_t y = state_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

double PythonRandom::random() {
  const uint32_t a = next_uint32() >> 5;
  const uint32_t b = next_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

std::vector<uint32_t> PythonRandom::getrandbits_words(int k) {
  std::vector<uint32_t> words;
  for (; k > 0; k -= 32) {
    uint32_t word = next_uint32();
    if (k < 32) word >>= (32 - k);
    words.push_back(word);
  }
  return words;
}

uint64_t PythonRandom::randbelow(uint64_t n) {
  if (n == 0) throw std::invalid_argument("PythonRandom::randbelow(0)");
  const int bits = bit_length(n);
  while (true) {
    const std::vector<uint32_t> words = getrandbits_words(bits);
    uint64_t r = words[0];
    if (words.size() > 1) r |= static_cast<uint64_t>(words[1]) << 32;
    if (r < n) return r;
  }
}

int64_t PythonRandom::randint(int64_t low, int64_t high) {
  return low + static_cast<int64_t>(randbelow(static_cast<uint64_t>(high - low + 1)));
}

std::string PythonRandom::uuid4() {
  const std::vector<uint32_t> words = getrandbits_words(128);
  // 128-bit value, most significant word first.
  uint32_t w[4] = {words[3], words[2], words[1], words[0]};
  // UUID(version=4): clear the variant bits and set 10xx; set the version nibble to 4.
  w[2] = (w[2] & 0x3fffffffU) | 0x80000000U;  // bits 62-63 of the int: variant
  w[1] = (w[1] & 0xffff0fffU) | 0x00004000U;  // bits 76-79: version
  char text[37];
  std::snprintf(text, sizeof text, "%08x-%04x-%04x-%04x-%04x%08x", w[0], w[1] >> 16, w[1] & 0xffffU,
                w[2] >> 16, w[2] & 0xffffU, w[3]);
  return text;
}

std::vector<size_t> PythonRandom::sample_indices(size_t n, size_t k) {
  if (k > n) throw std::invalid_argument("PythonRandom::sample: sample larger than population");
  std::vector<size_t> result(k);
  size_t setsize = 21;
  if (k > 5)
    setsize += static_cast<size_t>(std::pow(4.0, std::ceil(std::log(k * 3.0) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    for (size_t i = 0; i < n; ++i) pool[i] = i;
    for (size_t i = 0; i < k; ++i) {
      const size_t j = randbelow(n - i);
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<size_t> selected;
    for (size_t i = 0; i < k; ++i) {
      size_t j = randbelow(n);
      while (selected.count(j)) j = randbelow(n);
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

}  // namespace kvb
