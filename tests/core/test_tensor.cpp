#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/tensor.h"

using namespace tf;

TEST(DType, Bf16RoundTripRoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 ties to even (up).
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_FLOAT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
}

TEST(DType, F16Conversions) {
  for (float v : {0.f, 1.f, -3.25f, 65504.f, 6.103515625e-05f, 5.9604644775390625e-08f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

TEST(DType, Fp8E4M3) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::zeros({4, 6}, DType::F32);
  Tensor r = t.slice_rows(1, 3);
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{2, 6}));
  r.data<float>()[0] = 7.f;
  EXPECT_EQ(t.data<float>()[6], 7.f);
  Tensor v = t.view({-1, 3});
  EXPECT_EQ(v.dim(0), 8);
  EXPECT_THROW(t.view({5, 5}), Error);
  EXPECT_THROW(t.slice_rows(3, 5), Error);
  EXPECT_EQ(t.describe(), "f32[4, 6] cpu");
}
