// The Avx512 kernel level (see simd_kernels.h): simd_impl.h instantiated with
// BRASS_SIMD_VNNI=1. This file alone is compiled with -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx512vbmi
// (src/backend/CMakeLists.txt); it is only called after __builtin_cpu_supports said yes.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/simd_kernels.h"

#define BRASS_SIMD_VNNI 1
#define BRASS_SIMD_NS avx512_impl

namespace brass::backend::cpu {
namespace {
#include "backend/cpu/simd_impl.h"
}  // namespace

const KernelTable* avx512_kernels() {
  static const KernelTable table = {KernelLevel::Avx512, &avx512_impl::quantize_row, &avx512_impl::qgemm,
                                    &avx512_impl::dot_f32, &avx512_impl::axpy_f32};
  return &table;
}

}  // namespace brass::backend::cpu
