#include "engine/kv_store.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/kv_rows.h"

namespace kvb {

std::string kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBf16:
      return "bf16";
    case KvDtype::kF32:
      break;
  }
  return "f32";
}

std::optional<KvDtype> parse_kv_dtype(const std::string& name) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBf16})
    if (name == kv_dtype_name(d)) return d;
  return std::nullopt;
}

uint32_t kv_ggml_type(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF16:
      return kernels::kKvF16;
    case KvDtype::kBf16:
      return kernels::kKvBf16;
    case KvDtype::kF32:
      break;
  }
  return kernels::kKvF32;
}

int kv_dtype_bytes(KvDtype dtype) { return kernels::kv_element_bytes(kv_ggml_type(dtype)); }

KvStore::KvStore(int n_layers, int n_kv_heads, int head_dim, KvDtype dtype)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      dtype_(dtype),
      wide_(dtype == KvDtype::kF32),
      layers_(n_layers) {
  for (auto& layer : layers_) {
    layer.offset.assign(n_kv_heads, 0);
    layer.capacity.assign(n_kv_heads, 0);
    layer.length.assign(n_kv_heads, 0);
  }
}

KvStore KvStore::keys_only(int n_layers, int n_kv_heads, int head_dim) {
  KvStore store(n_layers, n_kv_heads, head_dim);
  store.holds_values_ = false;
  return store;
}

uint32_t KvStore::row_type() const { return wide_ ? kernels::kKvF32 : kv_ggml_type(dtype_); }

int KvStore::bytes_per_element() const {
  if (reported_bytes_ > 0) return reported_bytes_;
  return wide_ ? 4 : 2;
}

int64_t KvStore::row_bytes() const {
  return static_cast<int64_t>(head_dim_) * (wide_ ? sizeof(float) : sizeof(uint16_t));
}

uint8_t* KvStore::slot_bytes(Rows& rows, int64_t slot) const {
  auto* base = wide_ ? reinterpret_cast<uint8_t*>(rows.wide.data())
                     : reinterpret_cast<uint8_t*>(rows.narrow.data());
  return base + slot * row_bytes();
}

const uint8_t* KvStore::slot_bytes(const Rows& rows, int64_t slot) const {
  const auto* base = wide_ ? reinterpret_cast<const uint8_t*>(rows.wide.data())
                           : reinterpret_cast<const uint8_t*>(rows.narrow.data());
  return base + slot * row_bytes();
}

void KvStore::allocate(Rows& rows, int64_t slots) const {
  if (wide_) {
    rows.wide.assign(slots * head_dim_, 0.0f);
  } else {
    rows.narrow.assign(slots * head_dim_, 0);
  }
}

// Consecutive f32 rows into the store: encoded to 16 bits, or rounded to the dtype and kept in f32
// by a widened store, so that its entries stay what a 16-bit store holds.
void KvStore::write_rows(const float* src, uint8_t* dst, int64_t rows) const {
  const uint32_t type = kv_ggml_type(dtype_);
  if (wide_) {
    kernels::round_kv_rows(type, src, reinterpret_cast<float*>(dst), rows * head_dim_);
  } else {
    kernels::encode_kv_rows(type, src, dst, rows * head_dim_);
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
  Rows keys, values;
  allocate(keys, total);
  if (holds_values_) allocate(values, total);
  std::vector<int32_t> positions(total);
  for (int h = 0; h < n_kv_heads_; ++h) {
    const int64_t n = layer.length[h];
    if (n == 0) continue;  // a new layer has no buffer yet: &keys[i] of an empty vector is UB
    std::memcpy(slot_bytes(keys, new_offset[h]), slot_bytes(layer.keys, layer.offset[h]),
                n * row_bytes());
    if (holds_values_)
      std::memcpy(slot_bytes(values, new_offset[h]), slot_bytes(layer.values, layer.offset[h]),
                  n * row_bytes());
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
  append_rows(layer_index, head, position, 1, k, v);
}

void KvStore::append_rows(int layer_index, int head, int32_t first_position, int count,
                          const float* keys, const float* values) {
  if (count <= 0) return;
  if (holds_values_ && values == nullptr)
    throw std::logic_error("KvStore::append_rows: no values for a store that holds them");
  Layer& layer = layers_[layer_index];
  if (layer.length[head] + count > layer.capacity[head])
    grow_head(layer_index, head, layer.length[head] + count);
  const int64_t slot = layer.offset[head] + layer.length[head];
  write_rows(keys, slot_bytes(layer.keys, slot), count);
  if (holds_values_) write_rows(values, slot_bytes(layer.values, slot), count);
  for (int i = 0; i < count; ++i) layer.positions[slot + i] = first_position + i;
  layer.length[head] += count;
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

const uint8_t* KvStore::key_rows(int layer, int head) const {
  return slot_bytes(layers_[layer].keys, layers_[layer].offset[head]);
}
const uint8_t* KvStore::value_rows(int layer, int head) const {
  check_values("value_rows");
  return slot_bytes(layers_[layer].values, layers_[layer].offset[head]);
}

void KvStore::check_values(const char* accessor) const {
  if (!holds_values_)
    throw std::logic_error(std::string("KvStore::") + accessor +
                           ": the store holds keys only (KvStore::keys_only; read "
                           "Engine::host_store for the values)");
}

void KvStore::check_f32_rows(const char* accessor) const {
  if (!wide_)
    throw std::logic_error(std::string("KvStore::") + accessor + ": the store holds " +
                           kv_dtype_name(dtype_) +
                           " rows; read key_rows()/value_rows(), or an f32 copy (widened())");
}

const float* KvStore::keys(int layer, int head) const {
  check_f32_rows("keys");
  return layers_[layer].keys.wide.data() + layers_[layer].offset[head] * head_dim_;
}
const float* KvStore::values(int layer, int head) const {
  check_values("values");
  check_f32_rows("values");
  return layers_[layer].values.wide.data() + layers_[layer].offset[head] * head_dim_;
}
const int32_t* KvStore::positions(int layer, int head) const {
  return layers_[layer].positions.data() + layers_[layer].offset[head];
}
float* KvStore::mutable_keys(int layer, int head) {
  check_f32_rows("mutable_keys");
  return layers_[layer].keys.wide.data() + layers_[layer].offset[head] * head_dim_;
}
float* KvStore::mutable_values(int layer, int head) {
  check_values("mutable_values");
  check_f32_rows("mutable_values");
  return layers_[layer].values.wide.data() + layers_[layer].offset[head] * head_dim_;
}

void KvStore::widen() {
  if (wide_) return;
  const uint32_t type = kv_ggml_type(dtype_);
  for (Layer& layer : layers_)
    for (Rows* rows : {&layer.keys, &layer.values}) {
      rows->wide.resize(rows->narrow.size());
      kernels::decode_kv_rows(type, rows->narrow.data(), rows->wide.data(),
                              static_cast<int64_t>(rows->narrow.size()));
      rows->narrow = {};
    }
  wide_ = true;
}

void KvStore::narrow() {
  if (!wide_ || dtype_ == KvDtype::kF32) return;
  const uint32_t type = kv_ggml_type(dtype_);
  for (Layer& layer : layers_)
    for (Rows* rows : {&layer.keys, &layer.values}) {
      rows->narrow.resize(rows->wide.size());
      kernels::encode_kv_rows(type, rows->wide.data(), rows->narrow.data(),
                              static_cast<int64_t>(rows->wide.size()));
      rows->wide = {};
    }
  wide_ = false;
}

KvStore KvStore::widened() const {
  KvStore copy = *this;
  copy.widen();
  return copy;
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
  allocate(fresh.keys, total);
  if (holds_values_) allocate(fresh.values, total);
  fresh.positions.resize(total);
  for (int h = 0; h < n_kv_heads_; ++h) {
    for (size_t i = 0; i < kept[h].size(); ++i) {
      const int64_t src = old.offset[h] + kept[h][i];
      const int64_t dst = fresh.offset[h] + static_cast<int64_t>(i);
      std::memcpy(slot_bytes(fresh.keys, dst), slot_bytes(old.keys, src), row_bytes());
      if (holds_values_)
        std::memcpy(slot_bytes(fresh.values, dst), slot_bytes(old.values, src), row_bytes());
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
  std::memmove(slot_bytes(layer.keys, base + index), slot_bytes(layer.keys, base + index + 1),
               tail * row_bytes());
  if (holds_values_)
    std::memmove(slot_bytes(layer.values, base + index), slot_bytes(layer.values, base + index + 1),
                 tail * row_bytes());
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

int64_t KvStore::kv_bytes() const { return entries() * parts() * head_dim_ * bytes_per_element(); }

int64_t KvStore::kv_bytes_narrowed() const {
  const int bytes = reported_bytes_ > 0 ? reported_bytes_ : kv_dtype_bytes(dtype_);
  return entries() * parts() * head_dim_ * bytes;
}

int64_t KvStore::allocated_bytes() const {
  int64_t slots = 0;
  for (const auto& layer : layers_)
    for (int32_t c : layer.capacity) slots += c;
  return slots * parts() * head_dim_ * bytes_per_element();
}

void KvStore::clear() {
  const int reported = reported_bytes_;
  const bool wide = wide_, holds_values = holds_values_;
  *this = KvStore(n_layers_, n_kv_heads_, head_dim_, dtype_);
  wide_ = wide;
  holds_values_ = holds_values;
  reported_bytes_ = reported;
}

}  // namespace kvb
