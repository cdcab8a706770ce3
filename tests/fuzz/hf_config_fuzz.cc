// libFuzzer target for an HF config.json (model_config_from_hf_folder, engine/hf_config.cc). Any
// input must give a ModelConfig the engine can build or raise InputError / FormatError; a config
// that is accepted must hold the shapes engine/hf_config.cc promises (positive sizes, query heads
// a multiple of KV heads, an even head_dim, finite positive RoPE base and norm epsilon).
// Seeds: make_fuzz_seeds.cc (the presets of engine/presets.cc as config.json).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "engine/hf_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto folder = kvb::fuzz::scratch_dir() / "hf";
  std::filesystem::create_directories(folder);
  kvb::fuzz::write_file(folder / "config.json", kvb::fuzz::as_text(data, size));
  kvb::fuzz::accepts([&] {
    const kvb::ModelConfig c = kvb::model_config_from_hf_folder(folder);
    if (c.d_model <= 0 || c.ffn_dim <= 0 || c.n_layers <= 0 || c.n_query_heads <= 0 ||
        c.n_kv_heads <= 0 || c.head_dim <= 0 || c.vocab_size <= 0 || c.max_context <= 0)
      kvb::fuzz::violated("a non-positive size was accepted");
    if (c.n_query_heads % c.n_kv_heads != 0 || c.head_dim % 2 != 0)
      kvb::fuzz::violated("head layout the engine cannot run was accepted");
    if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
      kvb::fuzz::violated("rope_theta " + std::to_string(c.rope_theta) + " was accepted");
    if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps >= 0))
      kvb::fuzz::violated("rms_norm_eps " + std::to_string(c.rms_norm_eps) + " was accepted");
    if (const auto& r = c.llama3_rope_scaling;
        r && !(std::isfinite(r->factor) && std::isfinite(r->low_freq_factor) &&
               std::isfinite(r->high_freq_factor) && r->original_max_position > 0))
      kvb::fuzz::violated("a non-finite llama3 rope_scaling was accepted");
  });
  return 0;
}
