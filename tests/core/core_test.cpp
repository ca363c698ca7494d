// Core: half/bf16 conversions against exhaustive bit-level properties, dtype traits
// against the struct sizes in ggml-common.h, Status/Result plumbing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"
#include "core/half.h"
#include "core/status.h"

namespace brass {
namespace {

TEST(Half, EveryF16RoundTripsThroughF32) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // halfway to 65536 rounds to even: inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
}

// f32 -> f16 must round to the nearest representable f16 (ties to even): compare
// against a brute-force search on random floats across the whole f16 range.
TEST(Half, RandomRoundsToNearest) {
  std::mt19937 rng(std::random_device{}());
  // Up to 2^15.99 (~65300): above the largest f16 (65504) values round to inf, which
  // KnownValues pins; here every value has finite neighbours to compare with.
  std::uniform_real_distribution<float> e(-26.0f, 15.99f);
  for (int i = 0; i < 20000; ++i) {
    float f = std::exp2(e(rng)) * (rng() & 1 ? -1.0f : 1.0f);
    uint16_t h = f32_to_f16(f);
    double err = std::fabs(static_cast<double>(f16_to_f32(h)) - f);
    for (int d : {-1, 1}) {
      uint16_t n = static_cast<uint16_t>(h + d);
      if ((n & 0x7c00) == 0x7c00) continue;
      if ((n ^ h) & 0x8000) continue;
      EXPECT_LE(err, std::fabs(static_cast<double>(f16_to_f32(n)) - f)) << f;
    }
  }
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, BlockSizesMatchGgml) {
  EXPECT_EQ(traits(DType::Q8_0).block_bytes, 34);
  EXPECT_EQ(traits(DType::Q4_0).block_bytes, 18);
  EXPECT_EQ(traits(DType::Q5_0).block_bytes, 22);
  EXPECT_EQ(traits(DType::MXFP4).block_bytes, 17);
  EXPECT_EQ(traits(DType::Q4_K).block_bytes, 144);
  EXPECT_EQ(traits(DType::Q5_K).block_bytes, 176);
  EXPECT_EQ(traits(DType::Q6_K).block_bytes, 210);
  EXPECT_EQ(row_bytes(DType::MXFP4, 2880), 90 * 17);
  EXPECT_FALSE(dtype_traits(5).has_value());  // removed Q4_2
  EXPECT_EQ(dtype_from_name("mxfp4"), DType::MXFP4);
}

TEST(Status, ResultCarriesErrors) {
  auto f = [](bool ok) -> Result<int> {
    if (!ok) return Status::errorf("x.gguf: key {} missing", "a.b");
    return 7;
  };
  EXPECT_EQ(f(true).value(), 7);
  EXPECT_FALSE(f(false).is_ok());
  EXPECT_EQ(f(false).status().message(), "x.gguf: key a.b missing");
  auto g = [&]() -> Status {
    BRASS_ASSIGN_OR_RETURN(int v, f(false));
    (void)v;
    return Status::ok();
  };
  EXPECT_FALSE(g().is_ok());
}

}  // namespace
}  // namespace brass
