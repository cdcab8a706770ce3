// The KV cache: per layer, per KV head, a variable-length sequence of (position, key, value).
//
// Layout (the same one the CUDA backend mirrors): each layer owns one buffer for keys and one for
// values; KV head h occupies [offset[h], offset[h] + capacity[h]) token slots of it, of which the
// first length[h] are live. Keys are stored after RoPE, so an entry keeps its original position
// whatever is evicted around it. Compaction is a gather into a freshly sized buffer: heads that
// keep fewer tokens (AdaKV-style budgets) really hold less memory, and kv_bytes() counts live
// entries only.
//
// Element type (KvDtype): f32, or f16 / bf16 (rounded to nearest even as they are appended). A
// 16-bit store holds 16-bit rows, which the engine's attention reads through key_rows() /
// value_rows() and widens as it goes (kernels/cpu/kv_rows.h). Readers that want float pointers
// (keys(), values(): the prefill policies' view, the host decode selectors) read the store once
// widen() has turned its rows into f32 holding exactly the rounded values (appends are then still
// rounded to the dtype); narrow() turns them back, losslessly. So every reader sees the values an
// f32 cache rounded to the dtype would hold. docs/engine.md §3.1.1 says who widens when.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvb {

enum class KvDtype { kF32, kF16, kBf16 };

std::string kv_dtype_name(KvDtype dtype);  // "f32", "f16", "bf16"
std::optional<KvDtype> parse_kv_dtype(const std::string& name);
uint32_t kv_ggml_type(KvDtype dtype);  // 0, 1, 30 (the kernels' type codes)
int kv_dtype_bytes(KvDtype dtype);     // 4, 2, 2

class KvStore {
 public:
  KvStore() = default;
  KvStore(int n_layers, int n_kv_heads, int head_dim, KvDtype dtype = KvDtype::kF32);
  // A store of keys and positions only, for readers of a prompt's keys alone (a device engine's
  // host copy for fitting on the keys): appended values are dropped, and reading values is a
  // logic_error. Its byte counts count the keys only.
  static KvStore keys_only(int n_layers, int n_kv_heads, int head_dim);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  // The precision of the entries (what appends round to).
  KvDtype dtype() const { return dtype_; }
  // Whether the rows are held as f32 (an f32 store, or a widened 16-bit one).
  bool holds_f32() const { return wide_; }
  // The kernels' type code of the rows as held: 0 when holds_f32(), else kv_ggml_type(dtype()).
  uint32_t row_type() const;
  // False for a keys_only() store.
  bool holds_values() const { return holds_values_; }

  // Gives every head of every layer room for `tokens_per_head` entries (keeps live entries).
  void reserve(int tokens_per_head);

  // Appends one token to every KV head of `layer`; k and v are [n_kv_heads, head_dim].
  void append(int layer, int32_t position, const float* k, const float* v);
  // Appends one entry to one head (decode-time methods that grow heads independently).
  void append_head(int layer, int head, int32_t position, const float* k, const float* v);
  // Appends `count` entries to one head, at positions first_position, first_position + 1, ...;
  // keys and values are [count, head_dim] (values may be nullptr in a keys_only() store). The
  // same entries as `count` append_head() calls, in one copy.
  void append_rows(int layer, int head, int32_t first_position, int count, const float* keys,
                   const float* values);

  int length(int layer, int head) const { return layers_[layer].length[head]; }
  // [length, head_dim] rows in row_type(), for any store.
  const uint8_t* key_rows(int layer, int head) const;
  const uint8_t* value_rows(int layer, int head) const;
  // [length, head_dim] as f32: only when holds_f32() (logic_error otherwise, naming widened()).
  const float* keys(int layer, int head) const;
  const float* values(int layer, int head) const;
  const int32_t* positions(int layer, int head) const;
  float* mutable_keys(int layer, int head);
  float* mutable_values(int layer, int head);

  // Holds the rows as f32 from now on, with the values they have (no-op when holds_f32()). Layer
  // by layer, so that the 16-bit and f32 copies of only one layer exist at once.
  void widen();
  // Holds the rows in the dtype again (no-op for an f32 store or one that is not widened).
  void narrow();
  // An f32 copy with the same entries (a copy of *this when it holds f32 already).
  KvStore widened() const;

  // Keeps, for each head of `layer`, the entries at `kept[h]` (indices into the current sequence,
  // strictly increasing) and leaves room for `spare_per_head` appended tokens. Memory is
  // reallocated to fit: the layer's allocation afterwards is sum_h(kept[h].size() + spare).
  void compact(int layer, const std::vector<std::vector<int32_t>>& kept, int spare_per_head);
  // Removes one entry of one head (decode-time eviction), preserving order.
  void erase(int layer, int head, int index);

  int64_t entries() const;  // live (layer, head, token) entries
  int64_t entries(int layer) const;
  int64_t kv_bytes() const;           // live entries * 2 * head_dim * bytes_per_element
  int64_t kv_bytes_narrowed() const;  // kv_bytes() once narrow()ed: at the dtype's element size
  int64_t allocated_bytes() const;    // capacity actually held
  // Element size the accounting reports: the size held (4 for f32 rows, 2 for 16-bit ones), unless
  // a device backend's host mirror reports its device's (the GPU holds bf16).
  int bytes_per_element() const;
  void set_reported_bytes_per_element(int bytes) { reported_bytes_ = bytes; }

  void clear();

 private:
  // One layer's keys or values: f32 rows while the store holds f32, else 16-bit bit patterns.
  struct Rows {
    std::vector<float> wide;
    std::vector<uint16_t> narrow;
  };
  struct Layer {
    Rows keys;
    Rows values;
    std::vector<int32_t> positions;
    std::vector<int64_t> offset;    // first slot of each head
    std::vector<int32_t> capacity;  // slots of each head
    std::vector<int32_t> length;    // live slots of each head
  };
  int64_t row_bytes() const;
  uint8_t* slot_bytes(Rows& rows, int64_t slot) const;
  const uint8_t* slot_bytes(const Rows& rows, int64_t slot) const;
  void allocate(Rows& rows, int64_t slots) const;
  void write_rows(const float* src, uint8_t* dst, int64_t rows) const;
  void check_values(const char* accessor) const;
  int parts() const { return holds_values_ ? 2 : 1; }  // keys and values, or keys alone
  void grow_head(int layer, int head, int min_capacity);
  void relayout(int layer, const std::vector<int32_t>& new_capacity);
  void check_f32_rows(const char* accessor) const;

  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  KvDtype dtype_ = KvDtype::kF32;
  bool wide_ = true;
  bool holds_values_ = true;
  int reported_bytes_ = 0;  // 0: the element size held
  std::vector<Layer> layers_;
};

}  // namespace kvb
