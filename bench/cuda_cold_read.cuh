// The plain cold read both bench/cuda_burst_read.cu and bench/cuda_gu_pattern.cu measure
// against: every thread of the grid reads 16-byte words at a grid stride, 8 in flight at once.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

__global__ void read_kernel(const uint4* __restrict__ p, size_t n16, unsigned* sink) {
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t nt = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (size_t i = tid; i < n16; i += 8 * nt) {
    uint4 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = i + j * nt < n16 ? __ldg(p + i + j * nt) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < 8; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}
