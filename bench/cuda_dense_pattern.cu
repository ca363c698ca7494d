// cuda_dense_pattern: is the batched decode's dense q/k/v projection (matmul_h16_wide_kernel,
// cuda_matmul_mma.cu: ~17 us for 15.6 MB of Q8_0 at 64 streams on the H200, 0.8 TB/s, where
// cuBLAS reads twice the bytes as f16 in 11.3 us) bound by its weight reads' shape? Reads
// one layer's q/k/v weights (5,120 rows x 2,880, Q8_0 split at upload: int8 codes, then f16
// scales) with no arithmetic, as that kernel does: grid (20 row blocks, K split 8) x 8
// warps, a warp per 32-row tile, a lane per 64-column chunk loading rows g + 8 i (i < 4) as
// 16 bytes at column 16 t and the rows' f16 scales of 32-column block 2 c + t / 2; P chunks
// in flight a warp. Against it: the same loads from (32-row tile, chunk) tiles of 2,176
// contiguous bytes (codes as a lane's four 16-byte words, then its four scales as 8 bytes),
// and a plain contiguous read. 24 layers in turn so nothing hits in L2 (the one-token
// q/k/v reads the same bytes; cuda_burst_read.cu times that size as one plain read).
// Then the same three reads at the output head's size (201,088 rows, 615 MB, no K split,
// 786 blocks: the wide kernel's head calls at 32 and 64 streams read ~1.57 TB/s).
// Build: nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a bench/cuda_dense_pattern.cu -o /tmp/densep
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <initializer_list>

#include "cuda_cold_read.cuh"

namespace {

constexpr int kRowsQkv = 5120, kRowsHead = 201088, kN = 2880, kChunks = kN / 64, kLayers = 24, kSplit = 8;
template <int ROWS>
__host__ __device__ constexpr size_t codes_of() { return size_t(ROWS) * kN; }
template <int ROWS>
__host__ __device__ constexpr size_t bytes_of() { return codes_of<ROWS>() + size_t(ROWS) * (kN / 32) * 2; }
constexpr int kTileBytes = 32 * 64 + 32 * 2 * 2 * 2;  // codes, then (g, t / 2) x 4 rows' halves

// This chunk range of a K split (as the wide kernel splits its 45 chunks).
__device__ __forceinline__ void split_range(int& c0, int& c1) {
  c0 = blockIdx.z * kChunks / gridDim.z;
  c1 = (blockIdx.z + 1) * kChunks / gridDim.z;
}

template <int P, int ROWS>
__global__ void __launch_bounds__(256, 2) rows_kernel(const uint8_t* layer, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.y * 8 + warp;
  if (tile >= ROWS / 32) return;
  const uint8_t* q = layer + size_t(tile * 32 + g) * kN + 16 * t;
  const __half* sc =
      reinterpret_cast<const __half*>(layer + codes_of<ROWS>()) + size_t(tile * 32 + g) * (kN / 32) + (t >> 1);
  int c0, c1;
  split_range(c0, c1);
  unsigned acc = 0;
#pragma unroll 1
  for (int c = c0; c < c1; c += P) {
    uint4 v[P][4];
    unsigned short s[P][4];
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool ok = c + p < c1;
        const int cc = ok ? c + p : c;  // (the loads may be issued before the select: stay in range)
        v[p][i] = ok ? __ldg(reinterpret_cast<const uint4*>(q + size_t(8 * i) * kN + 64 * cc)) : make_uint4(0, 0, 0, 0);
        s[p][i] = ok ? __half_as_ushort(__ldg(sc + 8 * i * (kN / 32) + 2 * cc)) : 0;
      }
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc ^= v[p][i].x ^ v[p][i].y ^ v[p][i].z ^ v[p][i].w ^ s[p][i];
  }
  if (acc == 0x12345678u) *sink = acc;
}

template <int P, int ROWS>
__global__ void __launch_bounds__(256, 2) tiled_kernel(const uint8_t* layer, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.y * 8 + warp;
  if (tile >= ROWS / 32) return;
  const uint8_t* base = layer + size_t(tile) * kChunks * kTileBytes;
  int c0, c1;
  split_range(c0, c1);
  unsigned acc = 0;
#pragma unroll 1
  for (int c = c0; c < c1; c += P) {
    uint4 v[P][4];
    uint2 s[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const bool ok = c + p < c1;
      const uint8_t* tl = base + size_t(ok ? c + p : c) * kTileBytes;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[p][i] = ok ? __ldg(reinterpret_cast<const uint4*>(tl + 512 * i) + lane) : make_uint4(0, 0, 0, 0);
      s[p] = ok ? __ldg(reinterpret_cast<const uint2*>(tl + 2048) + 2 * g + (t >> 1)) : make_uint2(0, 0);
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      acc ^= s[p].x ^ s[p].y;
#pragma unroll
      for (int i = 0; i < 4; ++i) acc ^= v[p][i].x ^ v[p][i].y ^ v[p][i].z ^ v[p][i].w;
    }
  }
  if (acc == 0x12345678u) *sink = acc;
}

// The three reads of a matrix of ROWS rows, `layers` copies in turn, at each K split.
template <int ROWS>
void probe(const char* what, int layers, std::initializer_list<int> splits, int reps) {
  constexpr size_t bytes = bytes_of<ROWS>(), tiled = size_t(ROWS / 32) * kChunks * kTileBytes;
  ColdProbe pr(std::max(bytes, tiled) * layers);  // (the tiles pad the scales: 2,304 bytes a tile)
  if (!pr.ok()) return;
  auto timeit = [&](const char* name, auto launch) { pr.timeit_layers(name, reps, bytes, layers, launch); };
  std::printf("%s, Q8_0 split: %.1f MB, %d SMs\n", what, bytes / 1e6, pr.sms);
  unsigned* sink = pr.sink;
  pr.plain_layers(reps, bytes, layers);
  for (int split : splits) {
    const dim3 grid(1, (ROWS / 32 + 7) / 8, split);
    char name[64];
    std::snprintf(name, sizeof name, "rows, split %d, 1 / 2 / 4 chunks in flight", split);
    timeit(name, [&](const uint8_t* l) { rows_kernel<1, ROWS><<<grid, 256>>>(l, sink); });
    timeit("  (2 chunks)", [&](const uint8_t* l) { rows_kernel<2, ROWS><<<grid, 256>>>(l, sink); });
    timeit("  (4 chunks)", [&](const uint8_t* l) { rows_kernel<4, ROWS><<<grid, 256>>>(l, sink); });
    std::snprintf(name, sizeof name, "tiles, split %d, 1 / 2 / 4 chunks in flight", split);
    timeit(name, [&](const uint8_t* l) { tiled_kernel<1, ROWS><<<grid, 256>>>(l, sink); });  // (layer stride: bytes)
    timeit("  (2 chunks)", [&](const uint8_t* l) { tiled_kernel<2, ROWS><<<grid, 256>>>(l, sink); });
    timeit("  (4 chunks)", [&](const uint8_t* l) { tiled_kernel<4, ROWS><<<grid, 256>>>(l, sink); });
  }
}

}  // namespace

int main() {
  probe<kRowsQkv>("a layer's q/k/v", kLayers, {kSplit, 4, 2}, 48);
  probe<kRowsHead>("the output head", 1, {1}, 8);
  return 0;
}
