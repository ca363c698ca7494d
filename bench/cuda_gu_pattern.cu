// cuda_gu_pattern: is the one-token MoE gate/up kernel slow because of its memory access
// pattern, or because of how it issues its loads? Reads exactly the bytes gate/up reads
// for one gpt-oss-20b token (4 experts' gate and up rows: 2880 rows x 1440 code bytes +
// 90 E8M0 scale bytes each, ~35 MB) with no arithmetic, in several shapes, and a plain
// contiguous read of the same size for reference. Each launch reads another "layer"
// (24 layers of 32 experts' gate and up tensors, ~6.8 GB) so nothing hits in L2; time
// per launch from CUDA events over back-to-back launches. Shapes: the kernel's grid, a
// cp.async ring (session 11), and a persistent walk as the output head reads (session 23:
// within ~0.6 us of the plain read cold, yet slower than the grid in the decode chain,
// where each warp's dot products sit between its loads; BENCHMARKS.md).
// Build: nvcc -O3 -std=c++20 -Isrc -gencode=arch=compute_90a,code=sm_90a bench/cuda_gu_pattern.cu -o /tmp/gup
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "cuda_cold_read.cuh"

namespace {

using brass::backend::cuda::cp_async16;
using brass::backend::cuda::cp_async4;

constexpr int kExperts = 32, kRows = 2880, kCode = 1440, kScale = 90, kLayers = 24, kSlots = 4;
constexpr size_t kTensorCodes = size_t(kExperts) * kRows * kCode;
constexpr size_t kTensorScales = size_t(kExperts) * kRows * kScale;
constexpr size_t kLayerBytes = 2 * (kTensorCodes + kTensorScales);  // gate codes | up codes | gate s | up s

struct Layer {
  const uint8_t* gq;
  const uint8_t* uq;
  const uint8_t* gs;
  const uint8_t* us;
  int ids[kSlots];
};

__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// The current kernel's shape: grid (rows / 4, slots), a warp per (slot, row), both rows'
// codes (3 x 16 bytes a lane) and scales (3 bytes a lane) loaded at once.
template <bool SCALES, bool SLOT_FAST>
__global__ void __launch_bounds__(128) gu_rows(Layer L, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int slot, blk;
  if (SLOT_FAST) {
    slot = blockIdx.x % kSlots;
    blk = blockIdx.x / kSlots;
  } else {
    slot = blockIdx.y;
    blk = blockIdx.x;
  }
  const int64_t row = int64_t(L.ids[slot]) * kRows + blk * 4 + warp;
  uint4 g[3], u[3];
  unsigned s = 0;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int c = lane + 32 * i;
    g[i] = c < 90 ? __ldg(reinterpret_cast<const uint4*>(L.gq + row * kCode) + c) : make_uint4(0, 0, 0, 0);
    u[i] = c < 90 ? __ldg(reinterpret_cast<const uint4*>(L.uq + row * kCode) + c) : make_uint4(0, 0, 0, 0);
    if (SCALES && c < 90) s ^= __ldg(L.gs + row * kScale + c) ^ (__ldg(L.us + row * kScale + c) << 8);
  }
  unsigned acc = s;
#pragma unroll
  for (int i = 0; i < 3; ++i) acc ^= fold(g[i]) ^ fold(u[i]);
  if (acc == 0x12345678u) *sink = acc;
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A persistent ring: 8 warps a block, each warp walks units (slot, row) with S stages of
// 3 KB in shared memory (gate codes | up codes | gate and up scale words) in flight.
constexpr int kStage = 2 * kCode + 2 * 128;
template <int S>
__global__ void __launch_bounds__(256) gu_ring(Layer L, unsigned* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint8_t* ring = smem + size_t(warp) * S * kStage;
  const int tw = gridDim.x * 8, gw = blockIdx.x * 8 + warp, units = kSlots * kRows;
  auto issue = [&](int u, uint8_t* st) {
    if (u < units) {
      const int64_t row = int64_t(L.ids[u / kRows]) * kRows + u % kRows;
      const uint8_t* g = L.gq + row * kCode;
      const uint8_t* up = L.uq + row * kCode;
      for (int c = lane; c < 90; c += 32) {
        cp_async16(st + c * 16, g + c * 16);
        cp_async16(st + kCode + c * 16, up + c * 16);
      }
      const int64_t s0 = row * kScale;  // the 4-byte words covering the row's 90 scales
      const int64_t w0 = s0 / 4, nw = (s0 + kScale + 3) / 4 - w0;
      if (lane < nw) {
        cp_async4(st + 2 * kCode + lane * 4, L.gs + (w0 + lane) * 4);
        cp_async4(st + 2 * kCode + 128 + lane * 4, L.us + (w0 + lane) * 4);
      }
    }
    commit();
  };
#pragma unroll
  for (int k = 0; k < S; ++k) issue(gw + k * tw, ring + k * kStage);
  unsigned acc = 0;
  for (int k = 0; gw + k * tw < units; ++k) {
    wait_groups<S - 1>();
    __syncwarp();
    uint8_t* st = ring + (k % S) * kStage;
    for (int c = lane; c < 90; c += 32)
      acc ^= fold(reinterpret_cast<const uint4*>(st)[c]) ^ fold(reinterpret_cast<const uint4*>(st + kCode)[c]);
    acc ^= reinterpret_cast<const unsigned*>(st + 2 * kCode)[lane];
    __syncwarp();
    issue(gw + (k + S) * tw, st);
  }
  if (acc == 0x12345678u) *sink = acc;
}


// The rows shape with a row's 90 scale bytes loaded as 23 aligned words by lanes 0..23
// (one LDG.32 a row instead of three LDG.U8), the bytes picked by shuffles.
__global__ void __launch_bounds__(128) gu_rows_sw(Layer L, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(L.ids[blockIdx.y]) * kRows + blockIdx.x * 4 + warp;
  uint4 g[3], u[3];
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int c = lane + 32 * i;
    g[i] = c < 90 ? __ldg(reinterpret_cast<const uint4*>(L.gq + row * kCode) + c) : make_uint4(0, 0, 0, 0);
    u[i] = c < 90 ? __ldg(reinterpret_cast<const uint4*>(L.uq + row * kCode) + c) : make_uint4(0, 0, 0, 0);
  }
  const int64_t s0 = row * kScale, w0 = s0 / 4;
  const unsigned gw = lane < 24 ? __ldg(reinterpret_cast<const unsigned*>(L.gs) + w0 + lane) : 0u;
  const unsigned uw = lane < 24 ? __ldg(reinterpret_cast<const unsigned*>(L.us) + w0 + lane) : 0u;
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int b = int(s0 % 4) + lane + 32 * i;  // byte b of the words
    acc ^= __shfl_sync(0xffffffffu, gw, (b / 4) & 31) >> (8 * (b % 4));
    acc ^= __shfl_sync(0xffffffffu, uw, (b / 4) & 31) >> (8 * (b % 4));
    acc ^= fold(g[i]) ^ fold(u[i]);
  }
  if (acc == 0x12345678u) *sink = acc;
}

// A persistent walk as the output head does it: warps take units (slot, row) with the
// grid's stride (the whole GPU sweeps each slot's rows front to back), two register
// buffers in turn: a unit's loads go out before the previous unit is consumed.
struct Unit {
  uint4 g[3], u[3];
  unsigned s;
};
__device__ __forceinline__ void load_unit(Unit& t, const Layer& L, int un, int lane) {
  const int sl = un / kRows;  // (selects: a parameter array indexed at run time goes to the stack)
  const int id = sl == 0 ? L.ids[0] : sl == 1 ? L.ids[1] : sl == 2 ? L.ids[2] : L.ids[3];
  const int64_t row = int64_t(id) * kRows + un % kRows;
  t.s = 0;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int c = lane + 32 * i;
    const bool ok = c < 90;
    t.g[i] = ok ? __ldg(reinterpret_cast<const uint4*>(L.gq + row * kCode) + c) : make_uint4(0, 0, 0, 0);
    t.u[i] = ok ? __ldg(reinterpret_cast<const uint4*>(L.uq + row * kCode) + c) : make_uint4(0, 0, 0, 0);
    if (ok)
      t.s ^= (unsigned(__ldg(L.gs + row * kScale + c)) << (8 * i)) ^
             (unsigned(__ldg(L.us + row * kScale + c)) << (8 * i + 4));
  }
}
__device__ __forceinline__ unsigned use_unit(const Unit& t) {
  unsigned a = t.s;
#pragma unroll
  for (int i = 0; i < 3; ++i) a ^= fold(t.g[i]) ^ fold(t.u[i]);
  return a;
}
template <int NB>
__global__ void __launch_bounds__(128) gu_walk(Layer L, unsigned* sink) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tw = gridDim.x * 4, units = kSlots * kRows;
  int un = blockIdx.x * 4 + warp;
  Unit buf[NB];
#pragma unroll
  for (int k = 0; k < NB - 1; ++k)
    if (un + k * tw < units) load_unit(buf[k], L, un + k * tw, lane);
  unsigned acc = 0;
  while (un < units) {
#pragma unroll
    for (int k = 0; k < NB; ++k) {  // buffer k holds unit un; k - 1 (mod NB) gets un + (NB - 1) tw
      if (un >= units) break;
      const int nx = un + (NB - 1) * tw;
      if (nx < units) load_unit(buf[(k + NB - 1) % NB], L, nx, lane);
      acc ^= use_unit(buf[k]);
      un += tw;
    }
  }
  if (acc == 0x12345678u) *sink = acc;
}
}  // namespace

int main() {
  ColdProbe pr(kLayerBytes * kLayers);
  if (!pr.ok()) return 1;
  uint8_t* buf = pr.buf;
  unsigned* sink = pr.sink;
  const int sms = pr.sms;
  std::mt19937 rng(11);
  auto layers = [&](bool adjacent) {
    std::vector<Layer> v(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      const uint8_t* b = buf + size_t(l) * kLayerBytes;
      v[l] = {b, b + kTensorCodes, b + 2 * kTensorCodes, b + 2 * kTensorCodes + kTensorScales, {}};
      std::vector<int> e(kExperts);
      for (int i = 0; i < kExperts; ++i) e[i] = i;
      std::shuffle(e.begin(), e.end(), rng);
      for (int s = 0; s < kSlots; ++s) v[l].ids[s] = adjacent ? s : e[s];
    }
    return v;
  };
  const std::vector<Layer> rnd = layers(false), adj = layers(true);
  const double mb = 2.0 * kSlots * kRows * (kCode + kScale) / 1e6;
  auto timeit = [&](const char* name, auto launch) { pr.timeit(name, 48, mb, [&](int r) { launch(r % kLayers); }); };
  std::printf("gate/up bytes of one token: %.1f MB, %d SMs\n", mb, sms);
  timeit("plain contiguous read, 4 blocks/SM", [&](int l) {
    read_kernel<<<sms * 4, 256>>>(reinterpret_cast<const uint4*>(buf + size_t(l) * kLayerBytes),
                                 size_t(mb * 1e6) / 16, sink);
  });
  timeit("rows (720,4) x 128: codes + scales", [&](int l) { gu_rows<true, false><<<dim3(720, 4), 128>>>(rnd[l], sink); });
  timeit("rows: codes only", [&](int l) { gu_rows<false, false><<<dim3(720, 4), 128>>>(rnd[l], sink); });
  timeit("rows: experts 0-3 (adjacent)", [&](int l) { gu_rows<true, false><<<dim3(720, 4), 128>>>(adj[l], sink); });
  timeit("rows: slot-fastest block order", [&](int l) { gu_rows<true, true><<<2880, 128>>>(rnd[l], sink); });
  timeit("rows: scales as words", [&](int l) { gu_rows_sw<<<dim3(720, 4), 128>>>(rnd[l], sink); });
  for (int bps : {4, 6, 8}) {
    char name[64];
    std::snprintf(name, sizeof name, "walk 2 buffers x %d warps/SM", 4 * bps);
    timeit(name, [&](int l) { gu_walk<2><<<sms * bps, 128>>>(rnd[l], sink); });
    std::snprintf(name, sizeof name, "walk 3 buffers x %d warps/SM", 4 * bps);
    timeit(name, [&](int l) { gu_walk<3><<<sms * bps, 128>>>(rnd[l], sink); });
  }
  auto ring = [&](auto kern, int stages, int bps, const char* name) {
    const int smem = 8 * stages * kStage;
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    timeit(name, [&](int l) { kern<<<sms * bps, 256, smem>>>(rnd[l], sink); });
  };
  ring(gu_ring<2>, 2, 2, "ring 2 stages x 16 warps/SM");
  ring(gu_ring<4>, 4, 2, "ring 4 stages x 16 warps/SM");
  ring(gu_ring<3>, 3, 2, "ring 3 stages x 16 warps/SM");
  ring(gu_ring<6>, 6, 1, "ring 6 stages x 8 warps/SM");
  ring(gu_ring<2>, 2, 4, "ring 2 stages x 32 warps/SM");
  return 0;
}
