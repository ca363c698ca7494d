// MXFP4 (OCP microscaling FP4, as stored in GGUF): 32 E2M1 elements sharing one E8M0
// exponent. Also the exact repack from the OpenAI/HF checkpoint layout.
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quant.h"

namespace brass::quant {

void dequantize_row_mxfp4(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t ib = 0; ib < n / kQKMxfp4; ++ib) {
    BlockMxfp4 b;
    std::memcpy(&b, p + ib * sizeof(BlockMxfp4), sizeof b);
    const float d = e8m0_to_f32_half(b.e);
    float* y = dst + ib * kQKMxfp4;
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      y[j] = static_cast<float>(mxfp4_value(b.qs[j] & 0x0f)) * d;
      y[j + kQKMxfp4 / 2] = static_cast<float>(mxfp4_value(b.qs[j] >> 4)) * d;
    }
  }
}

namespace {
// Index of the table value nearest to x/d; on ties the lowest index wins (so +0 over
// -0, and the smaller magnitude between two positive neighbours), as ggml does.
int nearest_mxfp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(mxfp4_value(0)) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(mxfp4_value(i)) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}
}  // namespace

// Shared exponent as in ggml's reference (the OCP rule): scale = 2^(floor(log2 amax)
// - 2), i.e. e = floor(log2f(amax)) + 125 with ggml's halved-scale convention; values
// above 6 * scale saturate to +-6 * scale. log2f (not frexp) is deliberate: it is
// what ggml computes, and it differs for amax within an ulp below a power of two.
// e is clamped to [0, 255] (ggml casts out-of-range values to uint8_t, which is UB).
void quantize_row_mxfp4(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t ib = 0; ib < n / kQKMxfp4; ++ib) {
    const float* x = src + ib * kQKMxfp4;
    float amax = 0.0f;
    for (int j = 0; j < kQKMxfp4; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    int e = 0;
    if (amax > 0.0f) {
      e = static_cast<int>(std::floor(std::log2(amax))) - 2 + 127;
      e = e < 0 ? 0 : (e > 255 ? 255 : e);
    }
    BlockMxfp4 b;
    b.e = static_cast<uint8_t>(e);
    const float d = e8m0_to_f32_half(b.e);
    for (int j = 0; j < kQKMxfp4 / 2; ++j)
      b.qs[j] = static_cast<uint8_t>(nearest_mxfp4(x[j], d) | (nearest_mxfp4(x[j + 16], d) << 4));
    std::memcpy(p + ib * sizeof(BlockMxfp4), &b, sizeof b);
  }
}

// HF: element 2j in the low nibble of byte j, 2j+1 in the high nibble; value =
// E2M1[nibble] * 2^(s-127). GGUF: element j low / j+16 high nibble of qs[j]; value =
// (2 * E2M1[nibble]) * 2^(e-128). The nibble codes are the same and
// 2 * 2^(e-128) = 2^(e-127), so e = s and only the element order changes.
void mxfp4_hf_to_gguf_block(const uint8_t hf_blocks[16], uint8_t hf_scale, uint8_t out17[17]) {
  auto hf_nibble = [&](int k) { return (hf_blocks[k / 2] >> (4 * (k % 2))) & 0x0f; };
  out17[0] = hf_scale;
  for (int j = 0; j < 16; ++j)
    out17[1 + j] = static_cast<uint8_t>(hf_nibble(j) | (hf_nibble(j + 16) << 4));
}

}  // namespace brass::quant
