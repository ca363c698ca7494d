// Reference code for ggml's original 32-element formats: Q8_0, Q4_0, Q5_0.
// Quantizers follow ggml's *_ref rounding exactly so files brass writes match the
// ones llama-quantize would write for the same floats.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace brass::quant {

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t ib = 0; ib < n / kQK8_0; ++ib) {
    BlockQ8_0 b;
    std::memcpy(&b, p + ib * sizeof(BlockQ8_0), sizeof b);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kQK8_0; ++j) dst[ib * kQK8_0 + j] = d * static_cast<float>(b.qs[j]);
  }
}

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t ib = 0; ib < n / kQK4_0; ++ib) {
    BlockQ4_0 b;
    std::memcpy(&b, p + ib * sizeof(BlockQ4_0), sizeof b);
    const float d = f16_to_f32(b.d);
    float* y = dst + ib * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = d * static_cast<float>((b.qs[j] & 0x0f) - 8);
      y[j + kQK4_0 / 2] = d * static_cast<float>((b.qs[j] >> 4) - 8);
    }
  }
}

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t ib = 0; ib < n / kQK5_0; ++ib) {
    BlockQ5_0 b;
    std::memcpy(&b, p + ib * sizeof(BlockQ5_0), sizeof b);
    const float d = f16_to_f32(b.d);
    const uint32_t qh = q5_0_qh(b.qh);
    float* y = dst + ib * kQK5_0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int lo = (b.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * static_cast<float>(lo - 16);
      y[j + kQK5_0 / 2] = d * static_cast<float>(hi - 16);
    }
  }
}

// ggml's reference: d = amax / 127, q = round-half-away(x / d) computed with the f32
// reciprocal of the unrounded d; only the stored d is rounded to f16.
void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t ib = 0; ib < n / kQK8_0; ++ib) {
    const float* x = src + ib * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b;
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
    std::memcpy(p + ib * sizeof(BlockQ8_0), &b, sizeof b);
  }
}

// ggml's reference: the element of largest magnitude (first one on ties) maps to -8,
// d = max / -8; q = min(15, trunc(x / d + 8.5)) (truncation of a value >= 0.5 is
// round-half-up of x/d + 8, with +8 saturating at 15).
void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t ib = 0; ib < n / kQK4_0; ++ib) {
    const float* x = src + ib * kQK4_0;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b;
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    std::memcpy(p + ib * sizeof(BlockQ4_0), &b, sizeof b);
  }
}

}  // namespace brass::quant
