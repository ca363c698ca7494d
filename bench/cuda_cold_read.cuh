// The plain cold read bench/cuda_burst_read.cu, cuda_gu_pattern.cu and cuda_moe_pattern.cu
// measure against: every thread of the grid reads 16-byte words at a grid stride, 8 in
// flight at once; and the pattern probes' harness (ColdProbe).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

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

// The cold-read probes' harness: the SM count, a device buffer of `bytes` (filled with 1s)
// and a 4-byte sink; timeit prints the mean time of `reps` back-to-back launches
// (launch(r), r = 0..reps - 1; the second of two passes) and the rate for `mb` MB a launch.
struct ColdProbe {
  int sms = 0;
  uint8_t* buf = nullptr;
  unsigned* sink = nullptr;
  cudaEvent_t a{}, b{};
  explicit ColdProbe(size_t bytes) {
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc(&sink, 4) != cudaSuccess) {
      buf = nullptr;
      return;
    }
    cudaMemset(buf, 1, bytes);
    cudaEventCreate(&a);
    cudaEventCreate(&b);
  }
  bool ok() const { return buf != nullptr; }
  template <class F>
  void timeit(const char* name, int reps, double mb, F launch) {
    float ms = 0.f;
    for (int pass = 0; pass < 2; ++pass) {
      cudaEventRecord(a);
      for (int r = 0; r < reps; ++r) launch(r);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      cudaEventElapsedTime(&ms, a, b);
    }
    const double us = ms * 1e3 / reps;
    const cudaError_t e = cudaGetLastError();
    std::printf("%-44s %8.2f us %8.0f GB/s %s\n", name, us, mb * 1e3 / us, e ? cudaGetErrorString(e) : "");
  }
  // The buffer as n_layers layers of layer_bytes: launch(layer) reads one, the layers in
  // turn (so nothing hits in L2); first the plain contiguous read of a layer.
  template <class F>
  void timeit_layers(const char* name, int reps, size_t layer_bytes, int n_layers, F launch) {
    timeit(name, reps, layer_bytes / 1e6, [&](int r) { launch(buf + (r % n_layers) * layer_bytes); });
  }
  void plain_layers(int reps, size_t layer_bytes, int n_layers) {
    timeit_layers("plain contiguous read, 4 blocks/SM", reps, layer_bytes, n_layers, [&](const uint8_t* l) {
      read_kernel<<<sms * 4, 256>>>(reinterpret_cast<const uint4*>(l), layer_bytes / 16, sink);
    });
  }
};
