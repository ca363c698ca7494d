// The CPU backend at an explicit SIMD kernel level (tests and benches pick levels;
// make_cpu_backend uses selected_kernel_level(), i.e. BRASS_CPU_KERNELS or the best).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cpu/simd_kernels.h"

namespace brass::backend::cpu {

std::unique_ptr<Backend> make_cpu_backend_level(int n_threads, KernelLevel level);

}  // namespace brass::backend::cpu
