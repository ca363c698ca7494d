// cuda_burst_read: how fast a cold read of S bytes goes when one kernel reads it all at once
// (every SM, 16-byte loads, 8 in flight per thread), for the sizes one decode token's
// kernels read (q/k/v 16 MB, MoE gate/up 35 MB, ...). Each launch reads a region no
// earlier launch touched (no L2 hits); time per launch from CUDA events over 20 launches,
// with the empty-kernel launch time printed for reference.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_burst_read.cu -o /tmp/burst
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_cold_read.cuh"

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t total = size_t(16) << 30;  // walk fresh regions of a 16 GB buffer
  uint8_t* buf = nullptr;
  unsigned* sink = nullptr;
  if (cudaMalloc(&buf, total) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) return 1;
  cudaMemset(buf, 1, total);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::printf("%10s %10s %10s %10s\n", "MB", "us/launch", "GB/s", "blocks");
  for (int blocks_per_sm : {4, 8}) {
    for (double mb : {0.0, 4.0, 12.5, 15.7, 17.6, 35.3, 70.0, 140.0, 615.0}) {
      const size_t bytes = static_cast<size_t>(mb * 1e6) / 16 * 16;
      const int reps = bytes ? static_cast<int>(std::min<size_t>(20, total / bytes)) : 20;
      size_t off = 0;
      float ms = 0.f;
      for (int pass = 0; pass < 2; ++pass) {  // pass 0 warms up
        cudaEventRecord(a);
        for (int r = 0; r < reps; ++r) {
          read_kernel<<<sms * blocks_per_sm, 256>>>(reinterpret_cast<const uint4*>(buf + off), bytes / 16, sink);
          off = (off + bytes + (1 << 20)) % (total - bytes - (1 << 20));
        }
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
      }
      const double us = ms * 1e3 / reps;
      std::printf("%10.1f %10.2f %10.0f %10d\n", mb, us, bytes ? bytes / (us * 1e3) : 0.0, sms * blocks_per_sm);
    }
  }
  return 0;
}
