// The Avx2 kernel level (see simd_kernels.h): simd_impl.h instantiated with
// BRASS_SIMD_VNNI=0. This file alone is compiled with -mavx2 -mfma -mf16c
// (src/backend/CMakeLists.txt); it is only called after __builtin_cpu_supports said yes.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/simd_kernels.h"

#define BRASS_SIMD_VNNI 0
#define BRASS_SIMD_NS avx2_impl

namespace brass::backend::cpu {
namespace {
#include "backend/cpu/simd_impl.h"
}  // namespace

const KernelTable* avx2_kernels() {
  static const KernelTable table = {KernelLevel::Avx2, &avx2_impl::quantize_row, &avx2_impl::qgemm,
                                    &avx2_impl::dot_f32, &avx2_impl::axpy_f32};
  return &table;
}

}  // namespace brass::backend::cpu
