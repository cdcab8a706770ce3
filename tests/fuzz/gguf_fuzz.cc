// libFuzzer target for the GGUF reader (and what reads its output: metadata getters, tensor byte
// ranges, dequantisation, ModelConfig from metadata). Any input must either parse or raise
// FormatError / InputError; anything else (a crash, an ASan report, another exception) is a bug.
// Built and run by tests/fuzz/run_fuzzers.sh; seeds come from make_gguf_seeds.cc.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/errors.h"
#include "engine/gguf.h"
#include "engine/weights_loader.h"
#include "kernels/cpu/dequantize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const kvb::GgufFile> gguf;
  try {
    gguf = kvb::GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  } catch (const kvb::FormatError&) {
    return 0;
  } catch (const kvb::InputError&) {
    return 0;
  }
  for (const auto& [key, value] : gguf->metadata()) {
    try {
      (void)gguf->get_int(key, 0);
      (void)gguf->get_float(key, 0.0);
      (void)gguf->get_string_array(key);
    } catch (const kvb::FormatError&) {
    }
  }
  std::vector<float> scratch;
  for (const auto& info : gguf->tensors()) {
    const auto bytes = gguf->tensor_bytes(info);
    if (bytes.size() != info.size_bytes) __builtin_trap();
    if (kvb::dequantize_supported(info.type) && info.elements() <= (1 << 16)) {
      scratch.resize(static_cast<size_t>(info.elements()));
      kvb::dequantize(info.type, bytes.data(), scratch.data(), info.elements());
    }
  }
  try {
    (void)kvb::model_config_from_gguf(*gguf);
  } catch (const kvb::FormatError&) {
  } catch (const kvb::InputError&) {
  }
  return 0;
}
