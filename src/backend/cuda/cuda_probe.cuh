// In-kernel timestamps for the one-token kernels, in -DBRASS_PROBE builds only (the
// macros are empty otherwise). Thread 0 of each block records %globaltimer (ns, one clock
// for every SM) at a kernel's marks; the last launch of each kernel wins. The CUPTI trace
// (bench/cuda_kernel_trace.cpp) gives when kernels end; the marks show what happens inside:
// when the PDL wait releases, when the first dependent data arrives, when streaming ends.
// A mark follows a store of the data it waits on (asm volatile with a memory clobber keeps
// the order), so it is taken after that data arrived.
#pragma once

#ifdef BRASS_PROBE
namespace brass::backend::cuda {
constexpr int kProbeKernels = 5, kProbeBlocks = 1024, kProbeMarks = 6;
__device__ unsigned long long g_probe[kProbeKernels][kProbeBlocks][kProbeMarks];
__device__ __forceinline__ unsigned long long probe_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
}  // namespace brass::backend::cuda
#define BRASS_PROBE_MARK(k, m)                                                         \
  do {                                                                                 \
    const unsigned b_ = blockIdx.x + blockIdx.y * gridDim.x;                           \
    if (threadIdx.x == 0 && b_ < kProbeBlocks) g_probe[k][b_][m] = probe_now();        \
  } while (0)
#else
#define BRASS_PROBE_MARK(k, m) \
  do {                         \
  } while (0)
#endif
