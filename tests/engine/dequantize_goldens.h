// tests/goldens/dequantize_goldens.json (made by tests/goldens/make_dequantize_goldens.py with the
// gguf PyPI package) and the check of a model file's tensors against its sampled elements; shared
// by tests/engine/dequantize_test.cc (default model) and tests/long_model/ (the 32K model).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "kernels/cpu/dequantize.h"
#include "tests/test_paths.h"

namespace kvb::test {

inline nlohmann::json load_dequantize_goldens() {
  std::ifstream in(source_dir() / "tests" / "goldens" / "dequantize_goldens.json");
  return nlohmann::json::parse(in);
}

// Each sample {"tensor", "type", "indices", "values"}: the tensor has that type and decodes to
// those values at those flat indices (within 1e-6 relative).
inline void expect_tensor_samples_match(const std::filesystem::path& model,
                                        const nlohmann::json& samples) {
  const auto gguf = GgufFile::open(model);
  ASSERT_FALSE(samples.empty());
  for (const auto& sample : samples) {
    const std::string name = sample["tensor"];
    SCOPED_TRACE(name);
    const GgufTensorInfo* info = gguf->tensor(name);
    ASSERT_NE(info, nullptr);
    // The package spells types in upper case ("Q4_K"), ggml in mixed case ("q4_K").
    auto lower = [](std::string text) {
      for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return text;
    };
    EXPECT_EQ(lower(ggml_type_name(info->type)), lower(sample["type"]));
    std::vector<float> y(info->elements());
    dequantize(info->type, gguf->tensor_bytes(*info).data(), y.data(), info->elements());
    const auto indices = sample["indices"].get<std::vector<int64_t>>();
    const auto values = sample["values"].get<std::vector<float>>();
    for (size_t i = 0; i < indices.size(); ++i)
      EXPECT_NEAR(y[indices[i]], values[i], 1e-6f * std::max(1.0f, std::fabs(values[i])))
          << "index " << indices[i];
  }
}

}  // namespace kvb::test
