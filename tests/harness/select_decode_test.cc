// The q_decode branch of `kvbench select` (harness/sweep/select_decode.h).
#include "harness/sweep/select_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/errors.h"

namespace kvb {
namespace {

struct Tensors {
  int layers = 3, hq = 4, hkv = 2, length = 96, d = 16;
  std::vector<float> k, v, q, projection;
  Tensors() {
    std::mt19937 generator(3);
    std::normal_distribution<float> gaussian(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, size_t n) {
      x.resize(n);
      for (float& value : x) value = gaussian(generator);
    };
    fill(k, static_cast<size_t>(layers) * hkv * length * d);
    fill(v, k.size());
    fill(q, static_cast<size_t>(layers) * hq * d);
    fill(projection, static_cast<size_t>(layers) * hkv * 64 * d);
  }
  DecodeSelectInputs inputs(bool with_projection = false) const {
    DecodeSelectInputs in{layers, hq, hkv, length, d, k.data(), v.data(), q.data(), {}};
    if (with_projection) in.tensors["bpc_projection"] = {{layers, hkv, 64, d}, projection};
    return in;
  }
};

TEST(SelectDecode, TopkReportsTheUnionOfTheGroupsExactTopK) {
  const Tensors t;
  const nlohmann::json out =
      select_decode_positions("topk", nlohmann::json::object(), Budget::parse("10"), t.inputs());
  ASSERT_EQ(out["selected"].size(), 3u);
  EXPECT_EQ(out["selected"][0][0].size(), 96u) << "layer 0 is dense";
  for (int h = 0; h < t.hkv; ++h) {
    std::set<int> expected;
    for (int g = 0; g < 2; ++g) {
      const float* q = &t.q[(2 * t.hq + h * 2 + g) * t.d];
      std::vector<std::pair<double, int>> logits;
      for (int j = 0; j < t.length; ++j) {
        double dot = 0;
        for (int i = 0; i < t.d; ++i)
          dot += double{q[i]} * t.k[((2 * t.hkv + h) * t.length + j) * t.d + i];
        logits.push_back({-dot, j});
      }
      std::sort(logits.begin(), logits.end());
      for (int r = 0; r < 10; ++r) expected.insert(logits[r].second);
    }
    const std::vector<int> got = out["selected"][2][h].get<std::vector<int>>();
    EXPECT_EQ(std::set<int>(got.begin(), got.end()), expected) << "KV head " << h;
  }
}

TEST(SelectDecode, BinaryPcUsesAGivenProjectionAndOtherPoliciesAreRefused) {
  const Tensors t;
  const nlohmann::json out = select_decode_positions("binarypc", nlohmann::json::object(),
                                                     Budget::parse("20"), t.inputs(true));
  EXPECT_EQ(out["params"]["projection_fit"], "offline (OPC)");
  EXPECT_EQ(out["selected"][2][1].size(), 20u);
  const nlohmann::json online = select_decode_positions("binarypc", nlohmann::json::object(),
                                                        Budget::parse("20"), t.inputs());
  EXPECT_EQ(online["params"]["projection_fit"], "online");
  EXPECT_THROW(
      select_decode_positions("snapkv", nlohmann::json::object(), Budget::parse("20"), t.inputs()),
      InputError);
}

// The harness hands over the tensors a policy declares in its registry entry, by name alone: the
// projection is BinaryPC's, and a wrong shape is the policy's error.
TEST(SelectDecode, TensorInputsComeFromTheRegistry) {
  const std::vector<TensorInput> inputs = policy_tensor_inputs("binarypc+art");
  ASSERT_EQ(inputs.size(), 1u);
  EXPECT_EQ(inputs[0].tensor, "bpc_projection");
  EXPECT_EQ(inputs[0].parameter, "projection");
  EXPECT_TRUE(policy_tensor_inputs("topk").empty());
  const Tensors t;
  DecodeSelectInputs wrong = t.inputs(true);
  wrong.tensors["bpc_projection"].shape = {t.layers, t.hkv, 32, 2 * t.d};
  EXPECT_THROW(
      select_decode_positions("binarypc", nlohmann::json::object(), Budget::parse("20"), wrong),
      InputError);
  DecodeSelectInputs other_model = t.inputs(true);
  other_model.tensors["bpc_projection"].shape = {t.layers - 1, t.hkv, 64, t.d};
  other_model.tensors["bpc_projection"].values.resize(static_cast<size_t>(t.layers - 1) * t.hkv *
                                                      64 * t.d);
  EXPECT_THROW(select_decode_positions("binarypc", nlohmann::json::object(), Budget::parse("20"),
                                       other_model),
               InputError);
}

}  // namespace
}  // namespace kvb
