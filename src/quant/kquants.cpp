// Reference dequantizers for the k-quants (256-element super-blocks) that appear in
// llama.cpp-produced GGUF files next to MXFP4 experts: Q4_K, Q5_K, Q6_K.
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace brass::quant {

// Q4_K: sub-block s (32 elements) has 6-bit scale sc_s and min m_s; element value
// d*sc_s*q - dmin*m_s. Sub-blocks 2i and 2i+1 use the low and high nibbles of
// qs[32i .. 32i+31].
void dequantize_row_q4_k(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    BlockQ4_K b;
    std::memcpy(&b, p + ib * sizeof(BlockQ4_K), sizeof b);
    const float d = f16_to_f32(b.d);
    const float dmin = f16_to_f32(b.dmin);
    float* y = dst + ib * kQK_K;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      k4_scale_min(s, b.scales, &sc, &m);
      const float ds = d * sc, ms = dmin * m;
      const uint8_t* q = b.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) y[32 * s + l] = ds * static_cast<float>((q[l] >> shift) & 0x0f) - ms;
    }
  }
}

// Q5_K: as Q4_K plus a 5th bit: bit s of qh[l] for element l of sub-block s.
void dequantize_row_q5_k(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    BlockQ5_K b;
    std::memcpy(&b, p + ib * sizeof(BlockQ5_K), sizeof b);
    const float d = f16_to_f32(b.d);
    const float dmin = f16_to_f32(b.dmin);
    float* y = dst + ib * kQK_K;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      k4_scale_min(s, b.scales, &sc, &m);
      const float ds = d * sc, ms = dmin * m;
      const uint8_t* q = b.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0f) | (((b.qh[l] >> s) & 1) << 4);
        y[32 * s + l] = ds * static_cast<float>(v) - ms;
      }
    }
  }
}

// Q6_K: per half h (128 elements), element 32k + l (k = 0..3, l = 0..31):
//   low 4 bits: ql[64h + l + 32*(k%2)], nibble k/2 (low for k = 0,1; high for 2,3)
//   high 2 bits: bits 2k..2k+1 of qh[32h + l]
//   scale: scales[8h + 2k + l/16] (one per 16 elements); value d * scale * (q - 32).
void dequantize_row_q6_k(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    BlockQ6_K b;
    std::memcpy(&b, p + ib * sizeof(BlockQ6_K), sizeof b);
    const float d = f16_to_f32(b.d);
    float* y = dst + ib * kQK_K;
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t lo_byte = b.ql[64 * h + l + 32 * (k % 2)];
          const int lo = (k < 2) ? (lo_byte & 0x0f) : (lo_byte >> 4);
          const int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
          const int q = (lo | (hi << 4)) - 32;
          const int sc = b.scales[8 * h + 2 * k + l / 16];
          y[128 * h + 32 * k + l] = d * static_cast<float>(sc) * static_cast<float>(q);
        }
      }
    }
  }
}

}  // namespace brass::quant
