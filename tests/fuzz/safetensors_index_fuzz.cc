// libFuzzer target for a sharded HF checkpoint's model.safetensors.index.json
// (SafetensorsModel::open_folder, engine/safetensors.cc). The input is the index; the folder also
// holds two valid shards (written with write_safetensors) that a good index names. Any input must
// open or raise InputError / FormatError; an index may never reach a file outside its folder.
// Seeds: make_fuzz_seeds.cc.
#include <cstddef>
#include <cstdint>

#include "engine/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const std::filesystem::path& model_folder() {
  static const std::filesystem::path folder = [] {
    const auto dir = kvb::fuzz::scratch_dir() / "model";
    std::filesystem::create_directories(dir);
    kvb::write_safetensors(dir / "model-00001-of-00002.safetensors",
                           {{"model.embed_tokens.weight", {{2, 3}, {1, 2, 3, 4, 5, 6}}},
                            {"model.norm.weight", {{3}, {1, 1, 1}}}});
    kvb::write_safetensors(dir / "model-00002-of-00002.safetensors",
                           {{"lm_head.weight", {{2, 3}, {6, 5, 4, 3, 2, 1}}}});
    // A file outside the folder that an escaping index could name.
    kvb::write_safetensors(kvb::fuzz::scratch_dir() / "outside.safetensors",
                           {{"outside", {{1}, {7}}}});
    return dir;
  }();
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& folder = model_folder();
  kvb::fuzz::write_file(folder / "model.safetensors.index.json", kvb::fuzz::as_text(data, size));
  kvb::fuzz::accepts([&] {
    const auto model = kvb::SafetensorsModel::open_folder(folder);
    for (const auto& file : model.files())
      if (file.parent_path() != folder)
        kvb::fuzz::violated("a shard outside the folder: " + file.string());
    if (model.has("outside")) kvb::fuzz::violated("the index reached ../outside.safetensors");
    for (const char* name : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"})
      if (model.has(name)) (void)model.read_f32(name);
    (void)model.dtype_counts();
    (void)model.total_elements();
  });
  return 0;
}
