// Kernel-level selection for the CPU backend: what the processor supports
// (__builtin_cpu_supports) and the BRASS_CPU_KERNELS override (ref|avx2|avx512).
#include <cstdlib>
#include <string>

#include "backend/cpu/simd_kernels.h"
#include "core/env.h"
#include "core/log.h"

namespace brass::backend::cpu {

const char* kernel_level_name(KernelLevel l) {
  switch (l) {
    case KernelLevel::Avx512: return "avx512";
    case KernelLevel::Avx2: return "avx2";
    default: return "ref";
  }
}

bool kernel_level_supported(KernelLevel l) {
#if defined(BRASS_HAVE_X86_SIMD)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  switch (l) {
    case KernelLevel::Ref: return true;
    case KernelLevel::Avx2: return avx2;
    case KernelLevel::Avx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
  }
  return false;
#else
  return l == KernelLevel::Ref;
#endif
}

KernelLevel best_kernel_level() {
  if (kernel_level_supported(KernelLevel::Avx512)) return KernelLevel::Avx512;
  if (kernel_level_supported(KernelLevel::Avx2)) return KernelLevel::Avx2;
  return KernelLevel::Ref;
}

KernelLevel selected_kernel_level() {
  const KernelLevel best = best_kernel_level();
  const auto v = env::get("BRASS_CPU_KERNELS");
  if (!v) return best;
  KernelLevel want;
  if (*v == "ref") want = KernelLevel::Ref;
  else if (*v == "avx2") want = KernelLevel::Avx2;
  else if (*v == "avx512") want = KernelLevel::Avx512;
  else {
    BRASS_LOG_WARN("BRASS_CPU_KERNELS={}: expected ref, avx2 or avx512; using {}", *v, kernel_level_name(best));
    return best;
  }
  if (!kernel_level_supported(want)) {
    BRASS_LOG_WARN("BRASS_CPU_KERNELS={}: not supported by this processor; using {}", *v, kernel_level_name(best));
    return best;
  }
  return want;
}

const KernelTable* kernel_table(KernelLevel l) {
  if (!kernel_level_supported(l)) return nullptr;
#if defined(BRASS_HAVE_X86_SIMD)
  switch (l) {
    case KernelLevel::Avx512: return avx512_kernels();
    case KernelLevel::Avx2: return avx2_kernels();
    default: return nullptr;
  }
#else
  return nullptr;
#endif
}

namespace {
int prefetch_rows_from_env() {
  const char* e = std::getenv("BRASS_CPU_PREFETCH_ROWS");
  if (!e || !*e) return 4;
  const int v = std::atoi(e);
  return v < 0 ? 0 : v > 64 ? 64 : v;
}
}  // namespace
const int g_prefetch_rows = prefetch_rows_from_env();

bool qgemm_supports(DType t) { return t == DType::Q8_0 || t == DType::MXFP4; }

}  // namespace brass::backend::cpu
