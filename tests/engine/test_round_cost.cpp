#include <gtest/gtest.h>

#include <algorithm>

#include "engine/round_cost.h"

namespace tf {
namespace {

// A GPU-like cost: flat while the weights' read dominates, then linear in rows.
double gpu_cost(int rows) {
  return 0.006 * std::max(1.0, rows / 48.0);
}

TEST(RoundCost, EmptyTableGivesWholeChunk) {
  RoundCostTable t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.predict(10), 0);
  EXPECT_EQ(prefill_rows_for_share(t, 32, 0.5, 512), 512);
}

TEST(RoundCost, NoShareOrNoDecodeRowsGivesWholeChunk) {
  RoundCostTable t;
  for (int r : {1, 8, 32, 512}) t.observe(r, gpu_cost(r));
  EXPECT_EQ(prefill_rows_for_share(t, 32, 0, 512), 512);
  EXPECT_EQ(prefill_rows_for_share(t, 0, 0.5, 512), 512);
}

TEST(RoundCost, PredictsMeasuredPointsAndStaysAboveAConvexCurve) {
  RoundCostTable t;
  for (int r : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}) t.observe(r, gpu_cost(r));
  for (int r : {1, 8, 64, 512}) EXPECT_DOUBLE_EQ(t.predict(r), gpu_cost(r)) << r;
  for (int r = 1; r <= 1024; r += 7) {
    EXPECT_GE(t.predict(r), gpu_cost(r) * (1 - 1e-12)) << r;  // chords over a convex curve
    EXPECT_LE(t.predict(r), t.predict(r + 7)) << r;           // non-decreasing
  }
}

TEST(RoundCost, NoisyBucketNeverMakesBiggerRoundsCheaper) {
  RoundCostTable t;
  t.observe(16, 0.010);
  t.observe(32, 0.004);  // noise: a bigger round measured faster
  t.observe(64, 0.012);
  EXPECT_GE(t.predict(32), t.predict(16));
  EXPECT_LE(t.predict(40), t.predict(64));
}

TEST(RoundCost, ShareKeepsPredictedRoundWithinLimit) {
  RoundCostTable t;
  for (int r : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}) t.observe(r, gpu_cost(r));
  for (int decode : {1, 8, 32, 64}) {
    for (double f : {0.25, 0.5, 0.75}) {
      const int p = prefill_rows_for_share(t, decode, f, 512);
      ASSERT_GE(p, 16);
      ASSERT_LE(p, 512);
      if (p > 16) {
        EXPECT_LE(t.predict(decode + p), t.predict(decode) / f * (1 + 1e-12));
      }
      if (p < 512) {
        EXPECT_GT(t.predict(decode + p + 1), t.predict(decode) / f);  // the largest such P
      }
    }
  }
  // Flat region: 8 decode rows at F = 0.5 may double the round, i.e. ~88 rows in all here.
  EXPECT_GE(prefill_rows_for_share(t, 8, 0.5, 512), 80);
  // A larger share leaves fewer prompt rows.
  EXPECT_GE(prefill_rows_for_share(t, 32, 0.25, 512), prefill_rows_for_share(t, 32, 0.75, 512));
}

TEST(RoundCost, RecentRoundsOutweighOldOnes) {
  RoundCostTable t;
  for (int i = 0; i < 50; ++i) t.observe(32, 0.010);
  for (int i = 0; i < 100; ++i) t.observe(32, 0.020);  // context grew: rounds got slower
  EXPECT_NEAR(t.predict(32), 0.020, 0.001);
}

TEST(RoundCost, MinimumProgressForPrompts) {
  RoundCostTable t;
  t.observe(32, 0.010);
  t.observe(48, 0.030);  // steep: even 16 prompt rows exceed the share
  EXPECT_EQ(prefill_rows_for_share(t, 32, 0.9, 512), 16);
  EXPECT_EQ(prefill_rows_for_share(t, 32, 0.9, 8), 8);  // never above the chunk
}

// --prefill-chunk auto: the largest power of two in [512, 16384] whose rows fit in 7% of the device's
// memory; 512 on the CPU (no device memory).
TEST(RoundCost, AutoPrefillChunkFollowsDeviceMemory) {
  // ~ the engine's estimate for the Qwen3-8B shape in bf16 at 2,048 tokens of context: 200 KB of
  // activations and 333 KB of attention partials a row.
  const double row_8b = 532.5e3;
  EXPECT_EQ(auto_prefill_chunk(0, row_8b), 512);
  EXPECT_EQ(auto_prefill_chunk(size_t(143e9), row_8b), 16384);  // H200: 18,800 rows fit
  EXPECT_EQ(auto_prefill_chunk(size_t(80e9), row_8b), 8192);    // H100: 10,500
  EXPECT_EQ(auto_prefill_chunk(size_t(24e9), row_8b), 2048);    // 3,150
  EXPECT_EQ(auto_prefill_chunk(size_t(5e9), row_8b), 512);      // 660; never below 512
  // At 32k tokens of context the attention scratch is ~5.1 MB a row: 1,024 rows on an H200.
  EXPECT_EQ(auto_prefill_chunk(size_t(143e9), 5.35e6), 1024);
  EXPECT_EQ(auto_prefill_chunk(size_t(150e9), 1e3), 16384);  // a tiny model: never above 16384
  for (size_t gb = 8; gb <= 200; gb += 8) {
    const int c = auto_prefill_chunk(gb << 30, row_8b);
    EXPECT_EQ(c & (c - 1), 0) << gb;  // a power of two
    EXPECT_LE(c, std::max(512.0, 0.07 * double(gb << 30) / row_8b)) << gb;
  }
}

}  // namespace
}  // namespace tf
