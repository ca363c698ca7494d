// Hand-computed blocks: for each format the bytes are written out by hand and the
// expected floats are derived in the comments from the format definition
// (ggml-common.h layouts), independently of the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace brass::quant {
namespace {

std::vector<float> deq(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n), std::nanf(""));
  dequantize_row(t, bytes.data(), y.data(), n);
  return y;
}

TEST(HandBlocks, Q8_0) {
  // d = f16 0x3800 = 0.5; qs[j] = j - 16.  y[j] = 0.5 * (j - 16)
  std::vector<uint8_t> b = {0x00, 0x38};
  for (int j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  auto y = deq(DType::Q8_0, b, 32);
  EXPECT_EQ(y[0], -8.0f);   // 0.5 * -16
  EXPECT_EQ(y[17], 0.5f);   // 0.5 * 1
  EXPECT_EQ(y[31], 7.5f);   // 0.5 * 15
  EXPECT_EQ(y[16], 0.0f);   // 0.5 * 0
}

TEST(HandBlocks, Q4_0) {
  // d = f16 0x4000 = 2.0; qs[j] = j | (15 - j) << 4.
  // y[j] = 2 * (j - 8); y[j + 16] = 2 * ((15 - j) - 8)
  std::vector<uint8_t> b = {0x00, 0x40};
  for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  auto y = deq(DType::Q4_0, b, 32);
  EXPECT_EQ(y[0], -16.0f);  // qs[0] = 0xF0: low 0 -> 2*(0-8)
  EXPECT_EQ(y[16], 14.0f);  // high 15 -> 2*(15-8)
  EXPECT_EQ(y[5], -6.0f);   // qs[5] = 0xA5: low 5 -> 2*(5-8)
  EXPECT_EQ(y[21], 4.0f);   // high 10 -> 2*(10-8)
  EXPECT_EQ(y[15], 14.0f);  // qs[15] = 0x0F: low 15 -> 2*7
  EXPECT_EQ(y[31], -16.0f); // high 0 -> 2*(0-8)
}

TEST(HandBlocks, Q5_0UnalignedQh) {
  // d = f16 0x3c00 = 1.0; qh bytes {01 00 01 80} = u32 0x80010001: bits 0, 16, 31.
  // qs[j] = 0x37: low nibble 7 (elements 0..15), high nibble 3 (elements 16..31).
  // The block starts at an odd address (offset 1) so qh sits at an odd address too.
  std::vector<uint8_t> buf = {0xEE, 0x00, 0x3c, 0x01, 0x00, 0x01, 0x80};
  for (int j = 0; j < 16; ++j) buf.push_back(0x37);
  std::vector<float> y(32);
  dequantize_row_q5_0(buf.data() + 1, y.data(), 32);
  EXPECT_EQ(y[0], 7.0f);    // (7 | 1<<4) - 16
  EXPECT_EQ(y[1], -9.0f);   // 7 - 16
  EXPECT_EQ(y[15], -9.0f);  // bit 15 clear
  EXPECT_EQ(y[16], 3.0f);   // (3 | 16) - 16, bit 16 set
  EXPECT_EQ(y[17], -13.0f); // 3 - 16
  EXPECT_EQ(y[31], 3.0f);   // bit 31 set
  EXPECT_EQ(y[30], -13.0f);
}

TEST(HandBlocks, Mxfp4) {
  // Block 0: e = 127 -> scale 2^(127-128) = 0.5, doubled table * 0.5 = plain E2M1:
  //   {0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, -1, -1.5, -2, -3, -4, -6}
  //   qs[j] = j | (15 - j) << 4: y[j] = E2M1[j], y[16 + j] = E2M1[15 - j].
  // Block 1: e = 130 -> scale 2^2 = 4: y = 4 * {0,1,2,3,4,6,8,12,...}[nibble]
  //   (same as E2M1 * 2^(130-127) = E2M1 * 8), same nibbles.
  // Block 2: e = 0 -> scale 2^-128 (subnormal); qs all 0x11 -> every y = 1 * 2^-128.
  std::vector<uint8_t> b;
  for (uint8_t e : {uint8_t{127}, uint8_t{130}}) {
    b.push_back(e);
    for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  }
  b.push_back(0);
  for (int j = 0; j < 16; ++j) b.push_back(0x11);
  auto y = deq(DType::MXFP4, b, 96);
  const float e2m1[16] = {0, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], e2m1[j]) << j;
    EXPECT_EQ(y[16 + j], e2m1[15 - j]) << j;
    EXPECT_EQ(y[32 + j], 8.0f * e2m1[j]) << j;
    EXPECT_EQ(y[48 + j], 8.0f * e2m1[15 - j]) << j;
  }
  EXPECT_EQ(y[7], 6.0f);
  EXPECT_EQ(y[39], 48.0f);  // 12 * 2^(130-128)
  EXPECT_EQ(y[47], -48.0f); // nibble 15: -12 * 4
  EXPECT_EQ(y[64], std::ldexp(1.0f, -128));
  EXPECT_EQ(y[95], std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_to_f32_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_f32_half(254), std::ldexp(1.0f, 126));
  EXPECT_EQ(e8m0_to_f32_half(255), std::ldexp(1.0f, 127));
}

// Scales/mins chosen: sc = {1,2,3,4,33,40,50,63}, m = {0,5,10,63,17,20,33,1}.
// Packing (6 bits each, 12 bytes):
//   bytes 0..3: sc[0..3] | (sc[4..7] >> 4) << 6    -> 1|2<<6, 2|2<<6, 3|3<<6, 4|3<<6
//   bytes 4..7: m[0..3]  | (m[4..7]  >> 4) << 6    -> 0|1<<6, 5|1<<6, 10|2<<6, 63|0<<6
//   bytes 8..11: (sc[4..7] & 15) | (m[4..7] & 15) << 4 -> 1|1<<4, 8|4<<4, 2|1<<4, 15|1<<4
const uint8_t kKScales[12] = {0x81, 0x82, 0xC3, 0xC4, 0x40, 0x45, 0x8A, 0x3F, 0x11, 0x48, 0x12, 0x1F};

TEST(HandBlocks, KScaleUnpack) {
  const uint8_t sc[8] = {1, 2, 3, 4, 33, 40, 50, 63}, m[8] = {0, 5, 10, 63, 17, 20, 33, 1};
  for (int j = 0; j < 8; ++j) {
    uint8_t s, mm;
    k4_scale_min(j, kKScales, &s, &mm);
    EXPECT_EQ(s, sc[j]) << j;
    EXPECT_EQ(mm, m[j]) << j;
  }
}

TEST(HandBlocks, Q4_K) {
  // d = 1.0 (0x3c00), dmin = 0.5 (0x3800), scales above.
  // qs[32p + l] = (l % 16) | (15 - l % 16) << 4; sub-block 2p uses the low nibbles,
  // 2p+1 the high nibbles of qs[32p..32p+31]. y = d*sc*q - dmin*m.
  std::vector<uint8_t> b = {0x00, 0x3c, 0x00, 0x38};
  b.insert(b.end(), kKScales, kKScales + 12);
  for (int i = 0; i < 128; ++i) b.push_back(static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4)));
  ASSERT_EQ(b.size(), 144u);
  auto y = deq(DType::Q4_K, b, 256);
  EXPECT_EQ(y[3], 3.0f);          // s0 l3: q=3: 1*3 - .5*0
  EXPECT_EQ(y[32 + 3], 21.5f);    // s1 l3: q=15-3=12: 2*12 - .5*5
  EXPECT_EQ(y[96], 28.5f);        // s3 l0: q=15: 4*15 - .5*63
  EXPECT_EQ(y[148], 123.5f);      // s4 l20: q=4: 33*4 - .5*17
  EXPECT_EQ(y[177], 550.0f);      // s5 l17: q=15-1=14: 40*14 - .5*20
  EXPECT_EQ(y[201], 433.5f);      // s6 l9: q=9: 50*9 - .5*33
  EXPECT_EQ(y[255], -0.5f);       // s7 l31: q=0: 63*0 - .5*1
}

TEST(HandBlocks, Q5_K) {
  // As Q4_K plus qh[l] = 0x55 (even l: bits 0,2,4,6) or 0xAA (odd l: bits 1,3,5,7);
  // bit s of qh[l] adds 16 to element l of sub-block s.
  std::vector<uint8_t> b = {0x00, 0x3c, 0x00, 0x38};
  b.insert(b.end(), kKScales, kKScales + 12);
  for (int l = 0; l < 32; ++l) b.push_back((l & 1) ? 0xAA : 0x55);
  for (int i = 0; i < 128; ++i) b.push_back(static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4)));
  ASSERT_EQ(b.size(), 176u);
  auto y = deq(DType::Q5_K, b, 256);
  EXPECT_EQ(y[4], 20.0f);         // s0 l4 (even, bit0): q=4+16: 1*20 - 0
  EXPECT_EQ(y[3], 3.0f);          // s0 l3 (odd, bit0 clear): q=3
  EXPECT_EQ(y[32 + 3], 53.5f);    // s1 l3 (odd, bit1): q=12+16: 2*28 - 2.5
  EXPECT_EQ(y[32 + 4], 19.5f);    // s1 l4 (even, bit1 clear): q=11: 2*11 - 2.5
  EXPECT_EQ(y[148], 651.5f);      // s4 l20 (even, bit4): q=4+16: 33*20 - 8.5
  EXPECT_EQ(y[255], 1007.5f);     // s7 l31 (odd, bit7): q=0+16: 63*16 - .5
}

TEST(HandBlocks, Q6_K) {
  // ql[i] = i (i < 128); qh[i] = 0xE4 = 0b11'10'01'00 (2-bit fields 0,1,2,3 for k=0..3);
  // scales = {1,-1,2,-2,3,-3,4,-4,5,-5,6,-6,7,-7,8,-8}; d = 0.5 (0x3800).
  // Element 128h + 32k + l: low 4 bits from ql[64h + l + 32(k%2)] (low nibble for
  // k<2, high for k>=2), high 2 bits = field k of qh[32h + l], q - 32,
  // scale = scales[8h + 2k + l/16].
  std::vector<uint8_t> b;
  for (int i = 0; i < 128; ++i) b.push_back(static_cast<uint8_t>(i));
  for (int i = 0; i < 64; ++i) b.push_back(0xE4);
  const int8_t sc[16] = {1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 8, -8};
  for (int8_t s : sc) b.push_back(static_cast<uint8_t>(s));
  b.push_back(0x00);
  b.push_back(0x38);
  ASSERT_EQ(b.size(), 210u);
  auto y = deq(DType::Q6_K, b, 256);
  EXPECT_EQ(y[5], -13.5f);   // h0 k0 l5: ql[5]=5 low 5, hi 0: q=-27; sc[0]=1: .5*1*-27
  EXPECT_EQ(y[52], 12.0f);   // h0 k1 l20: ql[52] low 4, hi 1: 4+16-32=-12; sc[3]=-2: .5*-2*-12
  EXPECT_EQ(y[81], -1.5f);   // h0 k2 l17: ql[17]=0x11 high 1, hi 2: 1+32-32=1; sc[5]=-3
  EXPECT_EQ(y[127], -38.0f); // h0 k3 l31: ql[63]=0x3F high 3, hi 3: 3+48-32=19; sc[7]=-4
  EXPECT_EQ(y[128], -80.0f); // h1 k0 l0: ql[64]=0x40 low 0, hi 0: -32; sc[8]=5
  EXPECT_EQ(y[240], -92.0f); // h1 k3 l16: ql[112]=0x70 high 7, hi 3: 7+48-32=23; sc[15]=-8
}

TEST(HandBlocks, PlainFloats) {
  // f16 0xC500 = -5.0 (sign, exp 17-15=2, mantissa 1.25): bf16 0x4049 = 3.140625.
  std::vector<uint8_t> h = {0x00, 0xC5, 0x00, 0x3C};
  auto y = deq(DType::F16, h, 2);
  EXPECT_EQ(y[0], -5.0f);
  EXPECT_EQ(y[1], 1.0f);
  std::vector<uint8_t> bf = {0x49, 0x40};
  EXPECT_EQ(deq(DType::BF16, bf, 1)[0], 3.140625f);  // 0x40490000 = 1.5703125 * 2
}

TEST(Traits, CanFlags) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::MXFP4,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K})
    EXPECT_TRUE(can_dequantize(t)) << dtype_name(t);
  for (DType t : {DType::Q4_1, DType::Q2_K, DType::Q3_K, DType::Q8_K, DType::I32})
    EXPECT_FALSE(can_dequantize(t)) << dtype_name(t);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::MXFP4})
    EXPECT_TRUE(can_quantize(t)) << dtype_name(t);
  for (DType t : {DType::Q5_0, DType::Q4_K, DType::Q6_K}) EXPECT_FALSE(can_quantize(t)) << dtype_name(t);
  // Block struct sizes agree with core/dtype's traits.
  EXPECT_EQ(traits(DType::Q8_0).block_bytes, int64_t{sizeof(BlockQ8_0)});
  EXPECT_EQ(traits(DType::Q4_0).block_bytes, int64_t{sizeof(BlockQ4_0)});
  EXPECT_EQ(traits(DType::Q5_0).block_bytes, int64_t{sizeof(BlockQ5_0)});
  EXPECT_EQ(traits(DType::MXFP4).block_bytes, int64_t{sizeof(BlockMxfp4)});
  EXPECT_EQ(traits(DType::Q4_K).block_bytes, int64_t{sizeof(BlockQ4_K)});
  EXPECT_EQ(traits(DType::Q5_K).block_bytes, int64_t{sizeof(BlockQ5_K)});
  EXPECT_EQ(traits(DType::Q6_K).block_bytes, int64_t{sizeof(BlockQ6_K)});
}

}  // namespace
}  // namespace brass::quant
