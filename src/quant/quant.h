// Reference (plain-loop) dequantizers and quantizers for every block format brass
// reads. These are the numerical ground truth for all fast paths (SIMD, CUDA): keep
// them simple and exact. Block layouts (bit-exact with ggml-common.h) are in
// quant/blocks.h, usable from host and device code.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace brass::quant {

// Can dequantize_row handle this type? (F32, F16, BF16, Q8_0, Q4_0, Q5_0, MXFP4,
// Q4_K, Q5_K, Q6_K.)
bool can_dequantize(DType t);
// Can quantize_row produce this type? (F32, F16, BF16, Q8_0, Q4_0, MXFP4.)
bool can_quantize(DType t);

// Dequantize n elements (a multiple of the block size) starting at `src` into dst.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Quantize n floats (a multiple of the block size) into dst (row_bytes(t, n) bytes).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Per-format entry points (same contracts as above).
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n);
void dequantize_row_q4_k(const void* src, float* dst, int64_t n);
void dequantize_row_q5_k(const void* src, float* dst, int64_t n);
void dequantize_row_q6_k(const void* src, float* dst, int64_t n);
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
void quantize_row_mxfp4(const float* src, void* dst, int64_t n);

// MXFP4 between the OpenAI/HF checkpoint layout (per block: 16 bytes, byte j holds
// element 2j in its low nibble and 2j+1 in its high nibble; one E8M0 scale byte,
// value = LUT[nibble] * 2^(scale-127)) and the GGUF block_mxfp4 layout (e, then
// qs[16] with elements 0..15 in low nibbles and 16..31 in high nibbles, value =
// kvalues[nibble] * 2^(e-128) with the doubled table). Exact, no rounding.
void mxfp4_hf_to_gguf_block(const uint8_t hf_blocks[16], uint8_t hf_scale, uint8_t out17[17]);

}  // namespace brass::quant
