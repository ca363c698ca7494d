// Dispatch for the reference (de)quantizers, plus the plain float formats (F32, F16,
// BF16). The block formats live in legacy.cpp (Q8_0, Q4_0, Q5_0), mxfp4.cpp and
// kquants.cpp (Q4_K, Q5_K, Q6_K).
#include <cstring>

#include "core/half.h"
#include "core/status.h"
#include "quant/quant.h"

namespace brass::quant {

bool can_dequantize(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::MXFP4:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

bool can_quantize(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::MXFP4: return true;
    default: return false;
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  BRASS_CHECK_MSG(n % traits(t).block_size == 0, "{} elements not a multiple of {}'s block", n,
                  dtype_name(t));
  const auto* b = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case DType::Q8_0: return dequantize_row_q8_0(src, dst, n);
    case DType::Q4_0: return dequantize_row_q4_0(src, dst, n);
    case DType::Q5_0: return dequantize_row_q5_0(src, dst, n);
    case DType::MXFP4: return dequantize_row_mxfp4(src, dst, n);
    case DType::Q4_K: return dequantize_row_q4_k(src, dst, n);
    case DType::Q5_K: return dequantize_row_q5_k(src, dst, n);
    case DType::Q6_K: return dequantize_row_q6_k(src, dst, n);
    default: BRASS_CHECK_MSG(false, "dequantize_row: unsupported type {}", dtype_name(t));
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  BRASS_CHECK_MSG(n % traits(t).block_size == 0, "{} elements not a multiple of {}'s block", n,
                  dtype_name(t));
  auto* b = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(b + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(b + 2 * i, &h, 2);
      }
      return;
    case DType::Q8_0: return quantize_row_q8_0(src, dst, n);
    case DType::Q4_0: return quantize_row_q4_0(src, dst, n);
    case DType::MXFP4: return quantize_row_mxfp4(src, dst, n);
    default: BRASS_CHECK_MSG(false, "quantize_row: unsupported type {}", dtype_name(t));
  }
}

}  // namespace brass::quant
