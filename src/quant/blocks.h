// Quantized block layouts, bit-exact with ggml-common.h, usable from host and CUDA
// device code (no std:: beyond <cstdint>). Half-precision fields are raw IEEE f16
// bits (uint16_t); convert with core/half.h. Every struct's size is pinned by a
// static_assert against the byte counts in core/dtype.cpp.
//
// Element order inside a block (the part that is easy to get wrong):
//   Q4_0, Q5_0, MXFP4: qs[j] low nibble = element j, high nibble = element j + 16.
//   Q5_0: bit j of the 32-bit little-endian qh is the 5th bit of element j. qh sits at
//         byte offset 2 of a 22-byte block, so it is NOT 4-byte aligned: read it with
//         memcpy (q5_0_qh below), never through a uint32_t*.
//   Q4_K/Q5_K: 256 elements in 8 sub-blocks of 32 with 6-bit scales and mins packed in
//         12 bytes (k4_scale_min); sub-block pairs (2i, 2i+1) share qs[32i..32i+31]
//         (low nibbles, then high nibbles); Q5_K adds bit (2i) / (2i+1) of qh[l].
//   Q6_K: 256 elements in two halves of 128; element 32k+l of a half takes its low
//         4 bits from ql and its high 2 bits from qh, 16 signed 8-bit scales.
// Blocks in a mapped file need not be aligned to their struct's alignment (a GGUF
// may use alignment 1), so the reference code copies each block out with memcpy.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BRASS_QHD __host__ __device__ inline
#else
#define BRASS_QHD inline
#endif

namespace brass::quant {

inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQKMxfp4 = 32;
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleBytes = 12;

struct BlockQ8_0 {
  uint16_t d;         // f16 scale
  int8_t qs[kQK8_0];  // x = d * q
};
struct BlockQ4_0 {
  uint16_t d;             // f16 scale
  uint8_t qs[kQK4_0 / 2]; // x = d * (nibble - 8)
};
struct BlockQ5_0 {
  uint16_t d;             // f16 scale
  uint8_t qh[4];          // 5th bits, little-endian u32 (unaligned!)
  uint8_t qs[kQK5_0 / 2]; // x = d * ((nibble | hbit << 4) - 16)
};
struct BlockMxfp4 {
  uint8_t e;                // E8M0 exponent: x = kMxfp4Values[nibble] * 2^(e - 128)
  uint8_t qs[kQKMxfp4 / 2];
};
struct BlockQ4_K {
  uint16_t d;                    // f16 super-block scale of the scales
  uint16_t dmin;                 // f16 super-block scale of the mins
  uint8_t scales[kKScaleBytes];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[kQK_K / 2];         // x = d*sc*q - dmin*m
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];   // low 4 bits
  uint8_t qh[kQK_K / 4];   // high 2 bits
  int8_t scales[kQK_K / 16];
  uint16_t d;              // x = d * scale * (q - 32)
};

static_assert(sizeof(BlockQ8_0) == 34, "block_q8_0 is 34 bytes");
static_assert(sizeof(BlockQ4_0) == 18, "block_q4_0 is 18 bytes");
static_assert(sizeof(BlockQ5_0) == 22, "block_q5_0 is 22 bytes");
static_assert(sizeof(BlockMxfp4) == 17, "block_mxfp4 is 17 bytes");
static_assert(sizeof(BlockQ4_K) == 144, "block_q4_K is 144 bytes");
static_assert(sizeof(BlockQ5_K) == 176, "block_q5_K is 176 bytes");
static_assert(sizeof(BlockQ6_K) == 210, "block_q6_K is 210 bytes");

// ggml's MXFP4 table: the E2M1 values {0, .5, 1, 1.5, 2, 3, 4, 6} (sign in bit 3)
// DOUBLED so they are integers; the scale is halved to compensate (2^(e-128)).
BRASS_QHD int mxfp4_value(int nibble) {
  constexpr int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return kValues[nibble & 15];
}

// 2^(e - 128) as a float, for every e (e = 0, 1 give the subnormals 2^-128, 2^-127);
// 255 is 2^127, not NaN (ggml does not special-case it either).
BRASS_QHD float e8m0_to_f32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1u) << 23;
  union {
    uint32_t u;
    float f;
  } c{bits};
  return c.f;
}

// Q5_0's 32-bit high-bit mask from its unaligned bytes.
BRASS_QHD uint32_t q5_0_qh(const uint8_t qh[4]) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
         static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
}

// Q4_K/Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
// Sub-blocks 0..3: low 6 bits of bytes j (scale) and j+4 (min). Sub-blocks 4..7: low
// nibble (scale) / high nibble (min) of byte j+4, with the 2 top bits taken from the
// spare top bits of bytes j-4 (scale) and j (min).
BRASS_QHD void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace brass::quant
