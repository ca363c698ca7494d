// cuda_moe_pattern: is the batched (grouped) MoE's gate/up bound by its weight layout's read
// pattern? At 64 streams nearly every expert of a layer is touched, and the lean kernel
// (k_loop_mx1, cuda_mma.cuh) runs at ~1.75 TB/s. This reads the same bytes with no
// arithmetic: grid (2880 / 32 row blocks, 32 experts) x 4 warps, warp w taking K steps
// w, w + 4, ... of 64 elements; each step a lane loads rows g + 8 i (i < 4) of gate and up,
// words t and t + 4 of the row's 32-byte MXFP4 block and the block pair's 2-byte E8M0
// scales, exactly as the kernel does (GGUF's row layout, codes and scales split at upload).
// Against it: the same loads from a layout repacked at upload so each (row block, K step,
// matrix) tile is 1 KB of codes + 64 bytes of scales in a row (a lane's step is two 16-byte
// loads), and a plain contiguous read of the same size. P: K steps' loads issued before
// they are consumed. A layer's gate and up (32 experts, 282 MB) per launch, 4 layers in turn.
// Build: nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a bench/cuda_moe_pattern.cu -o /tmp/moep
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cuda_cold_read.cuh"

namespace {

constexpr int kExperts = 32, kRows = 2880, kCode = 1440, kScale = 90, kSteps = 45, kLayers = 4, kKs = 4;
constexpr size_t kCodes = size_t(kExperts) * kRows * kCode, kScales = size_t(kExperts) * kRows * kScale;
constexpr size_t kLayerBytes = 2 * (kCodes + kScales);  // gate codes | up codes | gate s | up s

// GGUF rows (the kernel's loads). One K step: 2 x 4 x (2 words + a 2-byte scale) a lane.
template <int P>
__global__ void __launch_bounds__(128, 4) rows_kernel(const uint8_t* layer, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int64_t r0 = int64_t(blockIdx.y) * kRows + blockIdx.x * 32 + g;
  const uint8_t* q[2] = {layer + r0 * kCode + 4 * t + 32 * warp, layer + kCodes + r0 * kCode + 4 * t + 32 * warp};
  const uint8_t* s[2] = {layer + 2 * kCodes + r0 * kScale + 2 * warp,
                         layer + 2 * kCodes + kScales + r0 * kScale + 2 * warp};
  unsigned acc = 0;
#pragma unroll 1
  for (int u = warp; u < kSteps; u += P * kKs) {
    unsigned v[P][2][4][3];
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const bool ok = u + p * kKs < kSteps;
          const uint8_t* qi = q[m] + (p * kKs) * 32 + i * 8 * kCode;
          v[p][m][i][0] = ok ? __ldg(reinterpret_cast<const unsigned*>(qi)) : 0u;
          v[p][m][i][1] = ok ? __ldg(reinterpret_cast<const unsigned*>(qi + 16)) : 0u;
          v[p][m][i][2] = ok ? __ldg(reinterpret_cast<const uint16_t*>(s[m] + (p * kKs) * 2 + i * 8 * kScale)) : 0u;
        }
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      q[m] += P * kKs * 32;
      s[m] += P * kKs * 2;
    }
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc ^= v[p][m][i][0] ^ v[p][m][i][1] ^ v[p][m][i][2];
  }
  if (acc == 0x12345678u) *sink = acc;
}

// Repacked: tile (expert, row block, step, matrix) = 1,024 code bytes (32 rows x 32) then
// 64 scale bytes; a lane's step per matrix: two 16-byte code loads + one 2-byte scale.
constexpr int kTile = 1024 + 64;
template <int P>
__global__ void __launch_bounds__(128, 4) tiled_kernel(const uint8_t* layer, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint8_t* base = layer + (size_t(blockIdx.y) * (kRows / 32) + blockIdx.x) * kSteps * 2 * kTile;
  unsigned acc = 0;
#pragma unroll 1
  for (int u = warp; u < kSteps; u += P * kKs) {
    uint4 c[P][2][2];
    unsigned sc[P][2];
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const bool ok = u + p * kKs < kSteps;
        const uint8_t* tl = base + (size_t(u + p * kKs) * 2 + m) * kTile;
        c[p][m][0] = ok ? __ldg(reinterpret_cast<const uint4*>(tl) + lane) : make_uint4(0, 0, 0, 0);
        c[p][m][1] = ok ? __ldg(reinterpret_cast<const uint4*>(tl + 512) + lane) : make_uint4(0, 0, 0, 0);
        sc[p][m] = ok ? __ldg(reinterpret_cast<const uint16_t*>(tl + 1024) + lane) : 0u;
      }
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int m = 0; m < 2; ++m)
        acc ^= sc[p][m] ^ c[p][m][0].x ^ c[p][m][0].y ^ c[p][m][0].z ^ c[p][m][0].w ^ c[p][m][1].x ^ c[p][m][1].y ^
               c[p][m][1].z ^ c[p][m][1].w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

}  // namespace

int main() {
  ColdProbe pr(kLayerBytes * kLayers);
  if (!pr.ok()) return 1;
  auto timeit = [&](const char* name, auto launch) { pr.timeit_layers(name, 32, kLayerBytes, kLayers, launch); };
  std::printf("a layer's gate + up, 32 experts: %.1f MB, %d SMs\n", kLayerBytes / 1e6, pr.sms);
  const dim3 grid(kRows / 32, kExperts);
  unsigned* sink = pr.sink;
  pr.plain_layers(32, kLayerBytes, kLayers);
  timeit("GGUF rows, 1 step in flight", [&](const uint8_t* l) { rows_kernel<1><<<grid, 128>>>(l, sink); });
  timeit("GGUF rows, 2 steps in flight", [&](const uint8_t* l) { rows_kernel<2><<<grid, 128>>>(l, sink); });
  timeit("GGUF rows, 3 steps in flight", [&](const uint8_t* l) { rows_kernel<3><<<grid, 128>>>(l, sink); });
  timeit("repacked tiles, 1 step in flight", [&](const uint8_t* l) { tiled_kernel<1><<<grid, 128>>>(l, sink); });
  timeit("repacked tiles, 2 steps in flight", [&](const uint8_t* l) { tiled_kernel<2><<<grid, 128>>>(l, sink); });
  timeit("repacked tiles, 3 steps in flight", [&](const uint8_t* l) { tiled_kernel<3><<<grid, 128>>>(l, sink); });
  return 0;
}
