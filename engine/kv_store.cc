#include "engine/kv_store.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kvb {

KvStore::KvStore(int n_layers, int n_kv_heads, int head_dim)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), layers_(n_layers) {
  for (auto& layer : layers_) {
    layer.offset.assign(n_kv_heads, 0);
    layer.capacity.assign(n_kv_heads, 0);
    layer.length.assign(n_kv_heads, 0);
  }
}

void KvStore::reserve(int tokens_per_head) {
  for (int l = 0; l < n_layers_; ++l) {
    std::vector<int32_t> capacity = layers_[l].capacity;
    bool grow = false;
    for (auto& c : capacity) {
      if (c < tokens_per_head) {
        c = tokens_per_head;
        grow = true;
      }
    }
    if (grow) relayout(l, capacity);
  }
}

// Moves every head of `layer` into a buffer with the given per-head capacities.
void KvStore::relayout(int layer_index, const std::vector<int32_t>& new_capacity) {
  Layer& layer = layers_[layer_index];
  int64_t total = 0;
  std::vector<int64_t> new_offset(n_kv_heads_);
  for (int h = 0; h < n_kv_heads_; ++h) {
    new_offset[h] = total;
    total += new_capacity[h];
  }
  std::vector<float> keys(total * head_dim_), values(total * head_dim_);
  std::vector<int32_t> positions(total);
  for (int h = 0; h < n_kv_heads_; ++h) {
    const int64_t n = layer.length[h];
    if (n == 0) continue;  // a new layer has no buffer yet: &keys[i] of an empty vector is UB
    std::memcpy(keys.data() + new_offset[h] * head_dim_,
                layer.keys.data() + layer.offset[h] * head_dim_, n * head_dim_ * sizeof(float));
    std::memcpy(values.data() + new_offset[h] * head_dim_,
                layer.values.data() + layer.offset[h] * head_dim_, n * head_dim_ * sizeof(float));
    std::memcpy(positions.data() + new_offset[h], layer.positions.data() + layer.offset[h],
                n * sizeof(int32_t));
  }
  layer.keys = std::move(keys);
  layer.values = std::move(values);
  layer.positions = std::move(positions);
  layer.offset = std::move(new_offset);
  layer.capacity = new_capacity;
}

namespace {

// A full head grows by an eighth (at least 16 slots), not twice: a prompt's cache is reserved to
// its length, and doubling it on the first decode token doubled the engine's memory. Appends stay
// amortised O(1) (a relayout every capacity / 8 tokens).
int32_t grown_capacity(int32_t capacity) { return capacity + std::max(16, capacity / 8); }

}  // namespace

void KvStore::grow_head(int layer, int head, int min_capacity) {
  std::vector<int32_t> capacity = layers_[layer].capacity;
  capacity[head] = std::max(min_capacity, grown_capacity(capacity[head]));
  relayout(layer, capacity);
}

void KvStore::append_head(int layer_index, int head, int32_t position, const float* k,
                          const float* v) {
  Layer& layer = layers_[layer_index];
  if (layer.length[head] == layer.capacity[head])
    grow_head(layer_index, head, layer.length[head] + 1);
  const int64_t slot = layer.offset[head] + layer.length[head];
  std::memcpy(&layer.keys[slot * head_dim_], k, head_dim_ * sizeof(float));
  std::memcpy(&layer.values[slot * head_dim_], v, head_dim_ * sizeof(float));
  layer.positions[slot] = position;
  ++layer.length[head];
}

void KvStore::append(int layer, int32_t position, const float* k, const float* v) {
  Layer& l = layers_[layer];
  bool full = false;
  for (int h = 0; h < n_kv_heads_; ++h) full |= l.length[h] == l.capacity[h];
  if (full) {
    std::vector<int32_t> capacity = l.capacity;
    for (int h = 0; h < n_kv_heads_; ++h)
      if (l.length[h] == capacity[h]) capacity[h] = grown_capacity(capacity[h]);
    relayout(layer, capacity);
  }
  for (int h = 0; h < n_kv_heads_; ++h)
    append_head(layer, h, position, k + int64_t(h) * head_dim_, v + int64_t(h) * head_dim_);
}

const float* KvStore::keys(int layer, int head) const {
  return layers_[layer].keys.data() + layers_[layer].offset[head] * head_dim_;
}
const float* KvStore::values(int layer, int head) const {
  return layers_[layer].values.data() + layers_[layer].offset[head] * head_dim_;
}
const int32_t* KvStore::positions(int layer, int head) const {
  return layers_[layer].positions.data() + layers_[layer].offset[head];
}
float* KvStore::mutable_keys(int layer, int head) {
  return layers_[layer].keys.data() + layers_[layer].offset[head] * head_dim_;
}
float* KvStore::mutable_values(int layer, int head) {
  return layers_[layer].values.data() + layers_[layer].offset[head] * head_dim_;
}

void KvStore::compact(int layer_index, const std::vector<std::vector<int32_t>>& kept,
                      int spare_per_head) {
  if (static_cast<int>(kept.size()) != n_kv_heads_)
    throw std::invalid_argument("KvStore::compact: expected kept indices for " +
                                std::to_string(n_kv_heads_) + " heads, got " +
                                std::to_string(kept.size()));
  Layer& old = layers_[layer_index];
  Layer fresh;
  fresh.offset.resize(n_kv_heads_);
  fresh.capacity.resize(n_kv_heads_);
  fresh.length.resize(n_kv_heads_);
  int64_t total = 0;
  for (int h = 0; h < n_kv_heads_; ++h) {
    const auto& idx = kept[h];
    for (size_t i = 0; i < idx.size(); ++i) {
      if (idx[i] < 0 || idx[i] >= old.length[h] || (i > 0 && idx[i] <= idx[i - 1]))
        throw std::invalid_argument("KvStore::compact: kept indices of layer " +
                                    std::to_string(layer_index) + " head " + std::to_string(h) +
                                    " must be strictly increasing and inside [0, " +
                                    std::to_string(old.length[h]) + ")");
    }
    fresh.offset[h] = total;
    fresh.length[h] = static_cast<int32_t>(idx.size());
    fresh.capacity[h] = fresh.length[h] + spare_per_head;
    total += fresh.capacity[h];
  }
  fresh.keys.resize(total * head_dim_);
  fresh.values.resize(total * head_dim_);
  fresh.positions.resize(total);
  for (int h = 0; h < n_kv_heads_; ++h) {
    for (size_t i = 0; i < kept[h].size(); ++i) {
      const int64_t src = old.offset[h] + kept[h][i];
      const int64_t dst = fresh.offset[h] + static_cast<int64_t>(i);
      std::memcpy(&fresh.keys[dst * head_dim_], &old.keys[src * head_dim_],
                  head_dim_ * sizeof(float));
      std::memcpy(&fresh.values[dst * head_dim_], &old.values[src * head_dim_],
                  head_dim_ * sizeof(float));
      fresh.positions[dst] = old.positions[src];
    }
  }
  old = std::move(fresh);
}

void KvStore::erase(int layer_index, int head, int index) {
  Layer& layer = layers_[layer_index];
  const int n = layer.length[head];
  if (index < 0 || index >= n) throw std::out_of_range("KvStore::erase: index out of range");
  const int64_t base = layer.offset[head];
  const int64_t tail = n - index - 1;
  std::memmove(&layer.keys[(base + index) * head_dim_], &layer.keys[(base + index + 1) * head_dim_],
               tail * head_dim_ * sizeof(float));
  std::memmove(&layer.values[(base + index) * head_dim_],
               &layer.values[(base + index + 1) * head_dim_], tail * head_dim_ * sizeof(float));
  std::memmove(&layer.positions[base + index], &layer.positions[base + index + 1],
               tail * sizeof(int32_t));
  --layer.length[head];
}

int64_t KvStore::entries(int layer) const {
  int64_t n = 0;
  for (int32_t len : layers_[layer].length) n += len;
  return n;
}

int64_t KvStore::entries() const {
  int64_t n = 0;
  for (int l = 0; l < n_layers_; ++l) n += entries(l);
  return n;
}

int64_t KvStore::kv_bytes() const { return entries() * 2 * head_dim_ * bytes_per_element_; }

int64_t KvStore::allocated_bytes() const {
  int64_t slots = 0;
  for (const auto& layer : layers_)
    for (int32_t c : layer.capacity) slots += c;
  return slots * 2 * head_dim_ * bytes_per_element_;
}

void KvStore::clear() {
  const int bytes = bytes_per_element_;
  *this = KvStore(n_layers_, n_kv_heads_, head_dim_);
  bytes_per_element_ = bytes;
}

}  // namespace kvb
