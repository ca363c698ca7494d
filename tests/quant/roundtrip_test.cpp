// Random quantize -> dequantize round trips against each format's error bound, and
// the MXFP4 HF -> GGUF repack pinned against an independent HF-layout dequantizer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace brass::quant {
namespace {

struct Rng {
  uint32_t seed = std::random_device{}();
  std::mt19937 g{seed};
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g); }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
};

// Blocks of random floats, each block with its own magnitude 2^lo .. 2^hi so the
// scales cover a wide range; some elements are exact zeros. f16-scaled formats use
// hi <= 14 (f16 tops out at 65504).
std::vector<float> random_row(Rng& r, int64_t n, int block, int lo = -20, int hi = 14) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / block; ++b) {
    const float mag = std::ldexp(1.0f, r.integer(lo, hi));
    for (int j = 0; j < block; ++j) {
      float v = r.uniform(-1.0f, 1.0f) * mag;
      if (r.integer(0, 15) == 0) v = 0.0f;
      x[static_cast<size_t>(b * block + j)] = v;
    }
  }
  return x;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, n)));
  quantize_row(t, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

TEST(QuantRoundTrip, Q8_0WithinHalfStep) {
  Rng r;
  SCOPED_TRACE(::testing::Message() << "seed " << r.seed);
  const int64_t n = 32 * 64;
  auto x = random_row(r, n, 32);
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(DType::Q8_0, n)));
  quantize_row(DType::Q8_0, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(DType::Q8_0, q.data(), y.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;  // the format's step
    uint16_t d16;
    std::memcpy(&d16, q.data() + b * 34, 2);
    EXPECT_EQ(d16, f32_to_f16(d));
    // |x - q*d| <= d/2 with the exact step; storing d as f16 moves each value by at
    // most 127 * |d - d16|.
    const float bound = 0.5f * d + 127.0f * std::fabs(d - f16_to_f32(d16)) + 1e-6f * amax;
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      EXPECT_LE(std::fabs(x[i] - y[i]), bound) << "block " << b << " elem " << j;
      if (std::fabs(x[i]) == amax && amax > 0) {  // the largest element maps to +-127
        EXPECT_EQ(std::abs(static_cast<int8_t>(q[b * 34 + 2 + j])), 127);
      }
    }
  }
}

TEST(QuantRoundTrip, Q4_0WithinOneStep) {
  Rng r;
  SCOPED_TRACE(::testing::Message() << "seed " << r.seed);
  const int64_t n = 32 * 64;
  auto x = random_row(r, n, 32);
  auto y = round_trip(DType::Q4_0, x);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[b * 32 + j]) > amax) amax = std::fabs(x[b * 32 + j]), max = x[b * 32 + j];
    const float d = std::fabs(max / 8.0f);
    const float d16 = std::fabs(f16_to_f32(f32_to_f16(max / -8.0f)));
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      // The levels are d*(-8..7) with the sign chosen so the largest element is exactly
      // a level: everything within half a step except the far end (up to 8d vs 7d).
      const float t = x[i] / (max / -8.0f);  // position in steps, in [-8, 8]
      const float step_err = (t <= 7.5f) ? 0.5f * d : d;
      EXPECT_LE(std::fabs(x[i] - y[i]), step_err + 8.0f * std::fabs(d - d16) + 1e-6f * amax)
          << "block " << b << " elem " << j << " t " << t;
    }
  }
}

// Reference for one MXFP4 element, written from the OCP definition: E2M1 magnitudes
// {0, .5, 1, 1.5, 2, 3, 4, 6} times 2^(e - 127).
float nearest_e2m1(float x, int e) {
  static const float kMag[8] = {0, .5f, 1, 1.5f, 2, 3, 4, 6};
  float best = 0, best_err = INFINITY;
  for (float m : kMag) {
    for (float s : {1.0f, -1.0f}) {
      const float v = s * std::ldexp(m, e - 127);
      const float err = std::fabs(v - x);
      if (err < best_err) best = v, best_err = err;
    }
  }
  return best;
}

TEST(QuantRoundTrip, Mxfp4NearestValueAndSharedExponent) {
  Rng r;
  SCOPED_TRACE(::testing::Message() << "seed " << r.seed);
  const int64_t n = 32 * 128;
  auto x = random_row(r, n, 32, -100, 100);  // E8M0 covers 2^-127 .. 2^127
  std::vector<uint8_t> q(static_cast<size_t>(row_bytes(DType::MXFP4, n)));
  quantize_row(DType::MXFP4, x.data(), q.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(DType::MXFP4, q.data(), y.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const int e = q[b * 17];
    if (amax == 0) {
      EXPECT_EQ(e, 0);
      continue;
    }
    // OCP: shared scale 2^(floor(log2 amax) - 2); frexp gives amax = f * 2^k, f in
    // [.5, 1), so floor(log2 amax) = k - 1 and e = k - 1 - 2 + 127. (log2f can round
    // up to the next integer for amax within an ulp below a power of two; allow that.)
    int k;
    std::frexp(amax, &k);
    const int want_e = k - 1 - 2 + 127;
    const bool log2_rounds_up = std::floor(std::log2(amax)) != static_cast<float>(k - 1);
    EXPECT_TRUE(e == want_e || (log2_rounds_up && e == want_e + 1)) << "e " << e << " want " << want_e;
    for (int j = 0; j < 32; ++j) {
      const int64_t i = b * 32 + j;
      const float want = nearest_e2m1(x[i], e);
      // Ties between two levels may resolve either way: accept any level at the
      // same distance.
      EXPECT_EQ(std::fabs(y[i] - x[i]), std::fabs(want - x[i])) << "block " << b << " elem " << j;
    }
  }
}

TEST(QuantRoundTrip, PlainFloats) {
  Rng r;
  SCOPED_TRACE(::testing::Message() << "seed " << r.seed);
  auto x = random_row(r, 1024, 32);
  EXPECT_EQ(round_trip(DType::F32, x), x);
  auto h = round_trip(DType::F16, x);
  auto bf = round_trip(DType::BF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    // f16 keeps 11 significant bits in its normal range (>= 2^-14), absolute 2^-25 below.
    EXPECT_LE(std::fabs(h[i] - x[i]), std::max(std::fabs(x[i]) * 0x1p-11f, 0x1p-25f)) << x[i];
    EXPECT_LE(std::fabs(bf[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << x[i];
  }
}

// Independent HF-layout dequantizer: element 2j / 2j+1 in the low / high nibble of
// byte j; value = E2M1[nibble] * 2^(scale - 127).
std::vector<float> dequant_hf(const uint8_t blocks[16], uint8_t scale) {
  static const float kE2M1[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<float> y(32);
  for (int k = 0; k < 32; ++k) {
    const int nib = (k % 2 == 0) ? (blocks[k / 2] & 15) : (blocks[k / 2] >> 4);
    y[k] = std::ldexp(kE2M1[nib], scale - 127);
  }
  return y;
}

TEST(Mxfp4Repack, BothElementOrdersPinned) {
  // Byte j holds elements 2j (low) and 2j+1 (high) with nibbles j and 15 - j: the 16
  // low nibbles are all distinct, as are the 16 high ones, so any element permutation
  // shows up.
  uint8_t hf[16];
  for (int j = 0; j < 16; ++j) hf[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  for (uint8_t scale : {uint8_t{127}, uint8_t{120}, uint8_t{133}, uint8_t{2}}) {
    uint8_t g[17];
    mxfp4_hf_to_gguf_block(hf, scale, g);
    EXPECT_EQ(g[0], scale);
    // GGUF qs[j] = element j (low) | element j+16 (high). Element k of the HF block
    // has nibble (k even ? k/2 : 15 - k/2): qs[0] = nib(0) | nib(16) << 4 = 0 | 8 << 4.
    EXPECT_EQ(g[1], 0x80);
    // qs[1] = nib(1) | nib(17) << 4 = 15 | 7 << 4
    EXPECT_EQ(g[2], 0x7F);
    // qs[15] = nib(15) | nib(31) << 4 = (15 - 7) | (15 - 15) << 4
    EXPECT_EQ(g[16], 0x08);
    std::vector<float> y(32);
    dequantize_row_mxfp4(g, y.data(), 32);
    const auto want = dequant_hf(hf, scale);
    for (int k = 0; k < 32; ++k) EXPECT_EQ(y[k], want[k]) << "element " << k << " scale " << int(scale);
    // Spot values at scale 127 (2^0): element 1 = nibble 15 = -6; element 2 = nibble 1 = .5
    if (scale == 127) {
      EXPECT_EQ(y[1], -6.0f);
      EXPECT_EQ(y[2], 0.5f);
      EXPECT_EQ(y[30], -6.0f);  // element 30 (even) = low nibble of byte 15 = 15 -> -6
      EXPECT_EQ(y[31], 0.0f);   // element 31 (odd) = high nibble of byte 15 = 0
    }
  }
}

TEST(Mxfp4Repack, RandomBlocksMatchHfDequant) {
  Rng r;
  SCOPED_TRACE(::testing::Message() << "seed " << r.seed);
  for (int it = 0; it < 1000; ++it) {
    uint8_t hf[16];
    for (auto& b : hf) b = static_cast<uint8_t>(r.integer(0, 255));
    const uint8_t scale = static_cast<uint8_t>(r.integer(100, 154));
    uint8_t g[17];
    mxfp4_hf_to_gguf_block(hf, scale, g);
    std::vector<float> y(32);
    dequantize_row_mxfp4(g, y.data(), 32);
    const auto want = dequant_hf(hf, scale);
    for (int k = 0; k < 32; ++k) ASSERT_EQ(y[k], want[k]) << "element " << k;
  }
}

}  // namespace
}  // namespace brass::quant
