// cuda_head_read: how fast can the one-token output head's bytes be read? The head (Q8_0,
// 201,088 x 2,880: 579 MB of quants, 36 MB of f16 scales in a separate plane) takes ~150 us
// a token in the decode chain on the H200, ~4.1 TB/s, in two walks that share nothing but
// the bytes (the flat register walk and a copy-engine ring, session 45), where the burst
// read of 615 MB (cuda_burst_read.cu) reaches ~4.5 TB/s. Cold reads of the same sizes,
// no arithmetic, back-to-back launches (each reads 615 MB: no L2 hits):
// - plain: the quants and scales as one contiguous run (read_kernel), buffer filled with
//   1s (as the burst read) or with random bytes (as a real matrix);
// - two planes: every thread reads a 16-byte quant chunk and its f16 scale from the
//   scale plane (the head's layout), the grid sweeping both front to back.
// Build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/cuda_head_read.cu -o /tmp/headread
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cuda_cold_read.cuh"

namespace {

constexpr size_t kRows = 201088, kN = 2880;
constexpr size_t kQuant = kRows * kN, kScale = kRows * (kN / 32) * 2;

__global__ void fill_random(uint4* p, size_t n16, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    uint4 v;
    h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12; v.x = h;
    h *= 0x297a2d39u; h ^= h >> 15; v.y = h;
    h *= 0x2c1b3c6du; h ^= h >> 12; v.z = h;
    h *= 0x297a2d39u; h ^= h >> 15; v.w = h;
    p[i] = v;
  }
}

// Chunk f (16 quants) and its scale (f / 2: one f16 per 32 quants), 8 chunks a thread in
// flight, the grid's stride.
__global__ void two_planes(const uint4* __restrict__ q, const unsigned short* __restrict__ s, size_t n16,
                           unsigned* sink) {
  const size_t tid = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t nt = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (size_t i = tid; i < n16; i += 8 * nt) {
    uint4 v[8];
    unsigned short w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const bool ok = i + j * nt < n16;
      v[j] = ok ? __ldg(q + i + j * nt) : make_uint4(0, 0, 0, 0);
      w[j] = ok ? __ldg(s + ((i + j * nt) >> 1)) : 0;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w ^ w[j];
  }
  if (acc == 0x12345678u) *sink = acc;
}

}  // namespace

int main() {
  ColdProbe c(kQuant + kScale + 256);
  if (!c.ok()) return 1;
  const double mb = (kQuant + kScale) / 1e6;
  const auto* all = reinterpret_cast<const uint4*>(c.buf);
  const auto* sc = reinterpret_cast<const unsigned short*>(c.buf + kQuant);
  for (int fill = 0; fill < 2; ++fill) {
    if (fill == 1) fill_random<<<c.sms * 8, 256>>>(reinterpret_cast<uint4*>(c.buf), (kQuant + kScale) / 16, 12345u);
    cudaDeviceSynchronize();
    std::printf("-- %s bytes\n", fill ? "random" : "all-1");
    for (int bps : {4, 8})
      c.timeit(bps == 4 ? "plain contiguous, 4 blocks/SM" : "plain contiguous, 8 blocks/SM", 10, mb, [&](int) {
        read_kernel<<<c.sms * bps, 256>>>(all, (kQuant + kScale) / 16, c.sink);
      });
    for (int bps : {4, 8})
      c.timeit(bps == 4 ? "quants + scale plane, 4 blocks/SM" : "quants + scale plane, 8 blocks/SM", 10, mb, [&](int) {
        two_planes<<<c.sms * bps, 256>>>(all, sc, kQuant / 16, c.sink);
      });
  }
  return 0;
}
