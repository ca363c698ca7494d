// In-kernel timestamps for the one-token kernels, in -DBRASS_PROBE builds only (the
// macros are empty otherwise). Thread 0 of each block records %globaltimer (ns, one clock
// for every SM) at a kernel's marks; the last launch of each kernel wins. The CUPTI trace
// (bench/cuda_kernel_trace.cpp) gives when kernels end; the marks show what happens inside:
// when the PDL wait releases, when the first dependent data arrives, when streaming ends.
// A mark follows a store of the data it waits on (asm volatile with a memory clobber keeps
// the order), so it is taken after that data arrived.
#pragma once

#ifdef BRASS_PROBE
#include <cstdio>
namespace brass::backend::cuda {
// Kernel ids: 0 norm_router, 1 gate/up, 2 down, 3 q/k/v, 4 wo (cuda_q8_pre.cu); 5 the wide
// mat-mul's own marks (cuda_matmul_mma.cu); 6 the one-token attention (cuda_attention.cu);
// 7 the batched norm_router_rows (cuda_norm_router.cu).
// kProbeBlocks: all of gpt-oss-20b's 2,880 one-token gate/up blocks (bench/cuda_probe_timeline.py)
// Marks 0-5 are a kernel's own; BRASS_PROBE_ENTRY writes 6 (the block's SM id, not a time)
// and 7 (the time the block entered the kernel).
constexpr int kProbeKernels = 8, kProbeBlocks = 3072, kProbeMarks = 8;
// One array per translation unit (static): each unit dumps its own kernels' marks.
static __device__ unsigned long long g_probe[kProbeKernels][kProbeBlocks][kProbeMarks];
__device__ __forceinline__ unsigned long long probe_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
// This unit's marks as CSV rows kernel,block,mark,ns (a new file with its header when fresh).
static inline void probe_write(const char* path, bool fresh) {
  static unsigned long long h[kProbeKernels][kProbeBlocks][kProbeMarks];
  cudaDeviceSynchronize();
  if (cudaMemcpyFromSymbol(h, g_probe, sizeof(h)) != cudaSuccess) return;
  FILE* f = std::fopen(path, fresh ? "w" : "a");
  if (!f) return;
  if (fresh) std::fprintf(f, "kernel,block,mark,ns\n");
  for (int k = 0; k < kProbeKernels; ++k)
    for (int b = 0; b < kProbeBlocks; ++b)
      for (int m = 0; m < kProbeMarks; ++m)
        if (h[k][b][m]) std::fprintf(f, "%d,%d,%d,%llu\n", k, b, m, h[k][b][m]);
  std::fclose(f);
}
}  // namespace brass::backend::cuda
#define BRASS_PROBE_MARK(k, m)                                                         \
  do {                                                                                 \
    const unsigned b_ = blockIdx.x + blockIdx.y * gridDim.x;                           \
    if (threadIdx.x == 0 && b_ < kProbeBlocks) g_probe[k][b_][m] = probe_now();        \
  } while (0)
#define BRASS_PROBE_ENTRY(k)                                                           \
  do {                                                                                 \
    const unsigned b_ = blockIdx.x + blockIdx.y * gridDim.x;                           \
    if (threadIdx.x == 0 && b_ < kProbeBlocks) {                                       \
      unsigned sm_;                                                                    \
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                 \
      g_probe[k][b_][6] = sm_ + 1;                                                     \
      g_probe[k][b_][7] = probe_now();                                                 \
    }                                                                                  \
  } while (0)
#else
#define BRASS_PROBE_MARK(k, m) \
  do {                         \
  } while (0)
#define BRASS_PROBE_ENTRY(k) \
  do {                       \
  } while (0)
#endif
