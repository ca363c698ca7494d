// cuda_moe_arith: what the batched (grouped) MoE gate/up's time is made of. The lean loop
// (k_loop_mx1 on the MMA tile copy, cuda_mma.cuh) runs here over a layer's gate + up of
// all 32 experts (282 MB of tiles, as at 64 streams, 4 layers in turn so nothing hits in
// L2), with every expert's 8 tokens (one tile) or 16 (two tiles), with no epilogue; then
// with parts of the step left out or replaced (k_loop_mx1's ABL, cuda_mma.cuh: the MXFP4
// decode, the per-block int -> float scaling, the N-part MMA, the conversion alone, the
// signed-byte decode with one MMA, the conversion by the MMA, the E8M0 as one shift); against
// the same tiles read with no arithmetic; and the backend's own gate/up and down kernels
// (cuda_moe_mma.cu, included here) on the same tiles and token counts, epilogue and all.
// Build: nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
//        -DFMT_CONSTEVAL= -Isrc -Xlinker --unresolved-symbols=ignore-all bench/cuda_moe_arith.cu -o /tmp/moea
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_mma.cuh"
#include "cuda_cold_read.cuh"
// The backend's grouped MoE kernels themselves (moe_gate_up_mma_kernel, moe_down_mma_kernel),
// timed beside the bare loop; its host functions are never called (linked with unresolved
// symbols ignored).
#include "backend/cuda/cuda_moe_mma.cu"

namespace moe_arith {  // (named: two anonymous namespaces confuse nvcc's stub generator)

using namespace brass::backend::cuda;
using namespace brass::backend::cuda::mma;

constexpr int kN = 2880, kExperts = 32, kLayers = 4, kTok = 16;
constexpr size_t kMatBytes = size_t(kExperts) * (kN / 32) * (kN / 64) * kMxTileBytes;  // one matrix, all experts
constexpr size_t kLayerBytes = 2 * kMatBytes;                                          // gate | up

// Block (x, e): rows 32 x .. of expert e's NM matrices (2: gate and up; 1: as down),
// every token of the pass (8 per tile, `two`: tiles 0 and 1), then the block's warps
// summed as the kernel does.
template <int NM, int NT, int P, int ABL>
__global__ void __launch_bounds__(kKs* kWarp, 4) loop_kernel(const uint8_t* layer, const int8_t* xq, const float* xd,
                                                             bool two, float* sink) {
  constexpr int NA = NM * 2 * NT * 4;
  __shared__ float red[(kKs - 1) * NA][kWarp];
  const int e = blockIdx.y, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  const int64_t r0 = int64_t(e) * kN + int64_t(blockIdx.x) * kRows;
  const uint8_t* wq[NM];
  const uint8_t* wsc[NM];
#pragma unroll
  for (int m = 0; m < NM; ++m) {
    wq[m] = layer + m * kMatBytes;
    wsc[m] = nullptr;
  }
  const int8_t* xr[NT];
  const float* xdr[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int row = (8 * j + g + e) % kTok;
    xr[j] = xq + int64_t(row) * kN + 8 * t;
    xdr[j] = xd + int64_t(row) * (kN / 32);
  }
  float acc[NM][2][NT][4] = {};
  k_loop_mx1<kN, NM, NT, kKs, P, true, ABL>(wq, wsc, r0, xr, xdr, two, acc);
  reduce_warps<NA>(&acc[0][0][0][0], red);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NA; ++i) s += (&acc[0][0][0][0])[i];
  if (threadIdx.x < kWarp && s == 1234.5f) *sink = s;  // keeps the sums
}

// The same tiles with no arithmetic: a lane's three loads a step and matrix.
__global__ void __launch_bounds__(kKs* kWarp, 4) loads_kernel(const uint8_t* layer, unsigned* sink) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2;
  const size_t rb = size_t(blockIdx.y) * (kN / 32) + blockIdx.x;
  unsigned acc = 0;
#pragma unroll 1
  for (int u = warp; u < kN / 64; u += kKs)
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const uint8_t* tl = layer + m * kMatBytes + (rb * (kN / 64) + u) * kMxTileBytes;
      const uint4 a = __ldg(reinterpret_cast<const uint4*>(tl + 16 * lane));
      const uint4 b = __ldg(reinterpret_cast<const uint4*>(tl + 512 + 16 * lane));
      const uint2 c = __ldg(reinterpret_cast<const uint2*>(tl + 1024 + 8 * g));
      acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y;
    }
  if (acc == 0x12345678u) *sink = acc;
}

}  // namespace moe_arith

using namespace moe_arith;

int main() {
  ColdProbe pr(kLayerBytes * kLayers);
  if (!pr.ok()) return 1;
  // Random codes and E8M0 scales near 2^-6 (the sums stay finite); random int8 tokens and
  // positive scales (the loop negates the tokens itself).
  {
    std::mt19937 rng(7);
    std::vector<uint8_t> h(kLayerBytes);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint8_t>(rng());
    for (size_t i = 0; i < h.size(); i += kMxTileBytes)
      for (int b = 1024; b < kMxTileBytes; ++b) h[i + b] = static_cast<uint8_t>(118 + rng() % 6);
    for (int l = 0; l < kLayers; ++l)
      cudaMemcpy(pr.buf + l * kLayerBytes, h.data(), kLayerBytes, cudaMemcpyHostToDevice);
  }
  int8_t* xq = nullptr;
  float* xd = nullptr;
  float* fsink = nullptr;
  cudaMalloc(&xq, kTok * kN);
  cudaMalloc(&xd, kTok * (kN / 32) * sizeof(float));
  cudaMalloc(&fsink, sizeof(float));
  {
    std::mt19937 rng(11);
    std::vector<int8_t> q(kTok * kN);
    for (int8_t& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<float> d(kTok * (kN / 32));
    for (float& v : d) v = 0.001f + (rng() % 1000) * 1e-5f;
    cudaMemcpy(xq, q.data(), q.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(xd, d.data(), d.size() * sizeof(float), cudaMemcpyHostToDevice);
  }
  std::printf("a layer's gate + up tiles, 32 experts: %.1f MB, %d SMs\n", kLayerBytes / 1e6, pr.sms);
  const dim3 grid(kN / 32, kExperts), block(kKs * kWarp);
  pr.plain_layers(32, kLayerBytes, kLayers);
  auto timeit = [&](const char* name, auto launch) { pr.timeit_layers(name, 32, kLayerBytes, kLayers, launch); };
  timeit("tiles, loads only", [&](const uint8_t* l) { loads_kernel<<<grid, block>>>(l, pr.sink); });
  const bool quick = std::getenv("MOEA_QUICK") != nullptr;  // the backend's kernels only
#define RUN(NT, P, ABL, TWO, NAME) \
  if (!quick) timeit(NAME, [&](const uint8_t* l) { loop_kernel<2, NT, P, ABL><<<grid, block>>>(l, xq, xd, TWO, fsink); })
  RUN(1, 2, 0, false, "NT1 P2 (x8/x32 kernel), 8 tok");
  RUN(1, 1, 0, false, "NT1 P1, 8 tok");
  RUN(2, 1, 0, false, "NT2 P1 (x64 kernel), 8 tok");
  RUN(2, 1, 1, false, "NT2 P1, 8 tok, no decode");
  RUN(2, 1, 2, false, "NT2 P1, 8 tok, no scaling");
  RUN(2, 1, 4, false, "NT2 P1, 8 tok, one MMA");
  RUN(2, 1, 7, false, "NT2 P1, 8 tok, none of the three");
  RUN(2, 1, 0, true, "NT2 P1 (x64 kernel), 16 tok");
  RUN(2, 1, 1, true, "NT2 P1, 16 tok, no decode");
  RUN(2, 1, 2, true, "NT2 P1, 16 tok, no scaling");
  RUN(2, 1, 4, true, "NT2 P1, 16 tok, one MMA");
  RUN(2, 1, 7, true, "NT2 P1, 16 tok, none of the three");
  RUN(2, 1, 8, true, "NT2 P1, 16 tok, no int -> float");
  RUN(2, 1, 16, true, "NT2 P1, 16 tok, signed decode, 1 MMA");
  RUN(2, 1, 8, false, "NT2 P1, 8 tok, no int -> float");
  RUN(2, 1, 16, false, "NT2 P1, 8 tok, signed decode, 1 MMA");
  RUN(2, 1, 32, false, "NT2 P1, 8 tok, int -> float by the MMA");
  RUN(2, 1, 32, true, "NT2 P1, 16 tok, int -> float by the MMA");
  RUN(2, 1, 64, false, "NT2 P1, 8 tok, E8M0 as one shift");
  RUN(2, 1, 64, true, "NT2 P1, 16 tok, E8M0 as one shift");
  RUN(2, 1, 96, false, "NT2 P1, 8 tok, both");
  RUN(2, 1, 96, true, "NT2 P1, 16 tok, both");
  RUN(1, 2, 32, false, "NT1 P2, 8 tok, int -> float by the MMA");
  RUN(1, 2, 96, false, "NT1 P2, 8 tok, both");
  RUN(2, 2, 0, true, "NT2 P2, 16 tok");
#undef RUN
  // down's loop over one matrix (half a layer's bytes: the rate column is 2x)
  if (!quick) timeit("down loop NT1 P1 (x8/x32), 8 tok [half]",
         [&](const uint8_t* l) { loop_kernel<1, 1, 1, 0><<<grid, block>>>(l, xq, xd, false, fsink); });
  if (!quick) timeit("down loop NT2 P2 (x64), 8 tok [half]",
         [&](const uint8_t* l) { loop_kernel<1, 2, 2, 0><<<grid, block>>>(l, xq, xd, false, fsink); });
  if (!quick) timeit("down loop NT2 P2 (x64), 16 tok [half]",
         [&](const uint8_t* l) { loop_kernel<1, 2, 2, 0><<<grid, block>>>(l, xq, xd, true, fsink); });
  // The backend's kernels on the same tiles: every expert gets `per` slots (tokens
  // 0 .. n_tok - 1 at k = 4), sorted by expert.
  int32_t *counts = nullptr, *offsets = nullptr, *perm = nullptr;
  int8_t* act_q = nullptr;
  float *act_d = nullptr, *o = nullptr, *bias = nullptr;
  constexpr int kMaxSlots = kExperts * kTok;
  cudaMalloc(&counts, kExperts * sizeof(int32_t));
  cudaMalloc(&offsets, kExperts * sizeof(int32_t));
  cudaMalloc(&perm, kMaxSlots * sizeof(int32_t));
  cudaMalloc(&act_q, 2 * size_t(kMaxSlots) * kN);
  cudaMalloc(&act_d, size_t(kMaxSlots) * (kN / 32) * sizeof(float));
  cudaMalloc(&o, size_t(kMaxSlots) * kN * sizeof(float));
  cudaMalloc(&bias, size_t(kExperts) * kN * sizeof(float));  // a gate / up bias (values irrelevant)
  cudaMemset(bias, 0, size_t(kExperts) * kN * sizeof(float));
  int8_t* xq4 = nullptr;  // tokens of the backend's layout: n_tok = slots / 4 rows (no twin: the lean loop)
  float* xd4 = nullptr;
  cudaMalloc(&xq4, size_t(kMaxSlots / 4) * kN);
  cudaMalloc(&xd4, size_t(kMaxSlots / 4) * (kN / 32) * sizeof(float));
  cudaMemset(xq4, 3, size_t(kMaxSlots / 4) * kN);
  {
    std::vector<float> d(size_t(kMaxSlots / 4) * (kN / 32), 0.01f);
    cudaMemcpy(xd4, d.data(), d.size() * sizeof(float), cudaMemcpyHostToDevice);
  }
  auto route = [&](int per) {
    std::vector<int32_t> c(kExperts, per), off(kExperts), pm(kExperts * per);
    std::mt19937 rng(per);
    for (int e = 0; e < kExperts; ++e) off[e] = e * per;
    for (int i = 0; i < kExperts * per; ++i) pm[i] = static_cast<int32_t>(rng() % (kExperts * per));  // slot ids
    cudaMemcpy(counts, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(offsets, off.data(), off.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(perm, pm.data(), pm.size() * 4, cudaMemcpyHostToDevice);
  };
  auto mat = [&](const uint8_t* tiles) {
    DevW w;
    w.q = tiles;
    w.s = tiles;
    w.n_in = kN;
    w.ne1 = kN;
    w.rows = int64_t(kExperts) * kN;
    w.type = kMX;
    w.tiles = tiles;
    return w;
  };
  for (int per : {8, 16}) {
    route(per);
    const int n_tok = kExperts * per / 4;
    const int64_t xneg = int64_t(n_tok) * kN, aneg = int64_t(kExperts) * per * kN;
    char name[96];
    for (const float* gb : {static_cast<const float*>(nullptr), static_cast<const float*>(bias)}) {
      std::snprintf(name, sizeof name, "backend gate/up NT2 (x64), %d tok, %s", per, gb ? "biases" : "no biases");
      timeit(name, [&](const uint8_t* l) {
        moe_gate_up_mma_kernel<2, 4, kN, 1, true><<<grid, block>>>(mat(l), mat(l + kMatBytes), gb, gb, xq4, xd4,
                                                                   counts, offsets, perm, 4, act_q, act_d, 1.702f, 7.f,
                                                                   xneg, aneg, 0);
      });
    }
    // The one-tile kernels, with `split` blocks a row block (token tiles h, h + split, ...).
    auto one_tile = [&]<int S>() {
      const dim3 gs(grid.x * S, grid.y);
      std::snprintf(name, sizeof name, "backend gate/up NT1 P2 split %d, %d tok", S, per);
      timeit(name, [&](const uint8_t* l) {
        moe_gate_up_mma_kernel<1, 4, kN, 2, true, S><<<gs, block>>>(mat(l), mat(l + kMatBytes), bias, bias, xq4, xd4,
                                                                    counts, offsets, perm, 4, act_q, act_d, 1.702f, 7.f,
                                                                    xneg, aneg, 0);
      });
      std::snprintf(name, sizeof name, "backend down NT1 P1 split %d, %d tok [half]", S, per);
      timeit(name, [&](const uint8_t* l) {
        moe_down_mma_kernel<1, 4, kN, 1, true, S><<<gs, block>>>(mat(l), act_q, act_d, counts, offsets, o, aneg, 0);
      });
    };
    one_tile.template operator()<1>();
    one_tile.template operator()<2>();
    // down over one matrix's worth of tiles (half a layer's bytes: the rate column is 2x)
    std::snprintf(name, sizeof name, "backend down NT2 P2 (x64), %d tok [half]", per);
    timeit(name, [&](const uint8_t* l) {
      moe_down_mma_kernel<2, 4, kN, 2, true><<<grid, block>>>(mat(l), act_q, act_d, counts, offsets, o, aneg, 0);
    });
  }
  return 0;
}
