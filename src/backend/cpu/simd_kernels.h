// SIMD kernels of the CPU backend, selected at run time from what the processor has:
//   Avx512: AVX-512VL + VNNI + VBMI on 256-bit vectors (vpdpbusd int8 dots; Zen 4 runs 512-bit
//           ops as two 256-bit halves, so ymm loses nothing and keeps 32 registers),
//   Avx2:   AVX2 + FMA + F16C (vpmaddubsw + vpmaddwd instead of vpdpbusd),
//   Ref:    the plain-loop reference backend (portable fallback and parity oracle).
// Each level lives in its own .cpp compiled with per-file -m flags (simd_avx2.cpp,
// simd_avx512.cpp); nothing else in the binary needs those instructions, so it runs
// on any x86-64. Those files use no std:: templates (an AVX-512 instantiation of an
// inline template could otherwise be picked by the linker for generic code).
//
// Numerics of the quantized mat-vec/mat-mat (Q8_0 and MXFP4 weights): the activation
// rows are quantized once per op to int8 blocks of 32 (d = amax / 127, q = round(x / d),
// round-half-even), as llama.cpp does, and the weight blocks are dotted as integers
// (exact), then scaled by d_w * d_x in f32. Per element |x - d q| <= d / 2, so
//   |y_fast - y_exact| <= sum_b (amax_b / 254) * sum_{i in b} |w_i|  (+ f32 rounding),
// i.e. about 2^-8 relative to sum |w| |x| in the worst case, far less on average.
// The order of operations per (row, token) does not depend on the tile a row or token
// falls in, so results are independent of batch shape and thread count.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace brass::backend::cpu {

enum class KernelLevel { Ref = 0, Avx2 = 1, Avx512 = 2 };

const char* kernel_level_name(KernelLevel l);
// The best level this processor supports.
KernelLevel best_kernel_level();
// BRASS_CPU_KERNELS (ref|avx2|avx512) if set and supported (a level the processor lacks
// falls back to the best supported one, with a warning), else best_kernel_level().
KernelLevel selected_kernel_level();
bool kernel_level_supported(KernelLevel l);

// Quantized activation rows: per token n_in/32 blocks; q int8 (n_tok, n_in), d f32
// (n_tok, n_in/32), nbt int32 (n_tok, n_in/32) and nb int32 (n_tok, n_in/32, 8): lane bias = -offset * (sum of
// the 4 q values the lane covers), where offset is the unsigned shift the kernel
// applies to weights of that type (see qbias_offset). Pointers are per token so MoE
// can gather rows.
struct QActRow {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* nb = nullptr;
  const int32_t* nbt = nullptr;  // (n_in/32) per-block totals of nb (the prefill kernel's bias)
};

// y[t][r] = dot(W row r, x_t) + bias[r] for r in [r0, r1), t in [0, n_tok).
struct QGemmArgs {
  DType type = DType::Q8_0;       // Q8_0 or MXFP4
  const uint8_t* w = nullptr;     // row 0 of the matrix
  int64_t row_bytes = 0;
  int64_t n_in = 0;               // multiple of 32
  int64_t r0 = 0, r1 = 0;
  const QActRow* x = nullptr;     // (n_tok)
  int64_t n_tok = 0;
  float* const* y = nullptr;      // (n_tok) output rows, indexed by r
  const float* bias = nullptr;    // (n_out) or null
};

struct KernelTable {
  KernelLevel level = KernelLevel::Ref;
  // Quantize one row of n (multiple of 32) floats into q/d/nb with the lane bias for
  // weights of type wtype.
  void (*quantize_row)(DType wtype, const float* x, int64_t n, int8_t* q, float* d, int32_t* nb,
                       int32_t* nbt) = nullptr;
  void (*qgemm)(const QGemmArgs& a) = nullptr;
  // f32 dot product (attention scores, f32 weights); any n.
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  // y[i] += a * x[i] for i < n (attention's weighted V sum).
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n) = nullptr;
};

// Software-prefetch distance of the mat-vec tiles, in weight rows ahead of the tile
// (BRASS_CPU_PREFETCH_ROWS, default 4; 0 turns the prefetch off). Read once at start-up.
extern const int g_prefetch_rows;

// Null for Ref (the reference backend does not use a table).
const KernelTable* kernel_table(KernelLevel l);
bool qgemm_supports(DType t);  // Q8_0, MXFP4

// Per-level tables, defined in simd_avx2.cpp / simd_avx512.cpp.
const KernelTable* avx2_kernels();
const KernelTable* avx512_kernels();

}  // namespace brass::backend::cpu
