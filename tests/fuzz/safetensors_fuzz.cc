// libFuzzer target for the safetensors reader (engine/safetensors.cc): header length, JSON header,
// dtypes, shapes, data offsets, then every small tensor read back as f32 or i64. Any input must
// either open or raise InputError / FormatError, and a tensor that opened must read back exactly
// its declared byte range. Seeds: make_fuzz_seeds.cc (write_safetensors).
#include <cstddef>
#include <cstdint>

#include "engine/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = kvb::fuzz::scratch_dir() / "fuzz.safetensors";
  kvb::fuzz::write_file(path, kvb::fuzz::as_text(data, size));
  std::shared_ptr<const kvb::SafetensorsFile> file;
  if (!kvb::fuzz::accepts([&] { file = kvb::SafetensorsFile::open(path); })) return 0;
  for (const kvb::SafetensorsTensor& t : file->tensors()) {
    if (file->raw_bytes(t).size() != t.end - t.begin)
      kvb::fuzz::violated("raw_bytes size of " + t.name);
    if (file->find(t.name) == nullptr) kvb::fuzz::violated("find() misses " + t.name);
    if (t.elements() > (1 << 16)) continue;
    std::vector<int64_t> shape;
    const bool is_float = t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16";
    const size_t n =
        is_float ? file->read_f32(t.name, &shape).size() : file->read_i64(t.name, &shape).size();
    if (n != static_cast<size_t>(t.elements()) || shape != t.shape)
      kvb::fuzz::violated("read of " + t.name + " returned another size or shape");
  }
  return 0;
}
