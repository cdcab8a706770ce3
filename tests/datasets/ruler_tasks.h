// The 13 RULER tasks (NVIDIA/RULER scripts/synthetic.yaml) at the two context lengths the
// dataset tests generate, as the parameters of their per-task suites
// (tests/datasets/ruler_test.cc, ruler_fit_test.cc), each case named "<task>_<length>".
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace kvb::test {

inline auto ruler_task_lengths() {
  return ::testing::Combine(
      ::testing::Values("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
                        "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery",
                        "vt", "cwe", "fwe", "qa_1", "qa_2"),
      ::testing::Values(4096, 8192));
}

inline std::string ruler_case_name(
    const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
}

}  // namespace kvb::test
