// make_rope vs transformers' ROPE_INIT_FUNCTIONS (inv_freq and attention factor), goldens from
// tools/make_tiny_models.py.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/model.h"

using namespace tf;

TEST(Rope, MatchesTransformersForEveryScalingType) {
  std::ifstream f(std::string(TF_SOURCE_DIR) + "/tests/data/tiny/rope.goldens.json");
  ASSERT_TRUE(f.good());
  auto g = nlohmann::json::parse(f);
  for (const auto& c : g["cases"]) {
    RopeConfig rc = config_util::rope_config(c["config"], 64);
    RopeParams p = make_rope(rc, 4096);
    std::vector<float> want = c["inv_freq"];
    ASSERT_EQ(p.inv_freq.size(), want.size()) << c["name"];
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(p.inv_freq[i], want[i], 2e-6 * std::fabs(want[i]) + 1e-12) << c["name"] << " i=" << i;
    EXPECT_NEAR(p.attention_factor, c["attention_factor"].get<float>(), 1e-6) << c["name"];
  }
}

TEST(Rope, UnknownScalingTypeIsRefused) {
  RopeConfig rc;
  rc.head_dim = 64;
  rc.scaling_type = "longrope";
  EXPECT_THROW(make_rope(rc, 1024), std::exception);
}
