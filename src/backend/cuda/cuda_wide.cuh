// Pieces shared by the dense f16 MMA kernels of 256-row blocks (cuda_matmul_mma.cu: the
// mma.sync wide kernel of up to 32 tokens a pass; cuda_matmul_wg.cu: the wgmma kernel of
// 33..64 tokens in one pass): the fused matrices of a call (Parts), the Q8_0 -> f16
// fragment dequantization, a lane's weights of one 64-column chunk, and the end of a block
// (its tile written, or a K split's partial sums added across a cluster).
// WIDE_MARK(m): probe marks of -DBRASS_PROBE builds (cuda_matmul_mma.cu defines it before
// including this header); nothing elsewhere.
#pragma once

#include <cooperative_groups.h>

#include "backend/cuda/cuda_mma.cuh"

#ifndef WIDE_MARK
#define WIDE_MARK(m) \
  do {               \
  } while (0)
#endif

namespace brass::backend::cuda::wide {

using namespace mma;

// Up to three matrices of one input side by side in the grid's x (q / k / v of attention:
// one launch and one activation conversion instead of three). Matrix j owns row tiles
// [end[j - 1], end[j]); every matrix has the input's n_in and the call's type.
struct Parts {
  DevW w[3];
  const float* bias[3];
  float* y[3];
  int end[3];
  // The matrix of row tile x and the tile's first row in it (selects instead of a dynamic
  // index into the parameter arrays).
  struct One { DevW w; const float* bias; float* y; int64_t r0; };
  __device__ __forceinline__ One at(int x) const {
    const int j = x < end[0] ? 0 : x < end[1] ? 1 : 2;
    const int x0 = j == 0 ? 0 : j == 1 ? end[0] : end[1];
    return {j == 0 ? w[0] : j == 1 ? w[1] : w[2], j == 0 ? bias[0] : j == 1 ? bias[1] : bias[2],
            j == 0 ? y[0] : j == 1 ? y[1] : y[2], static_cast<int64_t>(x - x0) * kRows};
  }
};

// Four int8 (word w) times the f16 scale d -> f16 pairs (bytes 0, 1) and (bytes 2, 3):
// 0x64XX is 1024 + XX in f16, so the biased byte q + 128 lands in the mantissa and
// subtracting 1152 leaves q exactly; the product with d is rounded once, as f16(q * d).
__device__ __forceinline__ void q8_half2(uint32_t w, __half2 d, uint32_t& lo, uint32_t& hi) {
  const uint32_t u = w ^ 0x80808080u;
  const __half2 k1152 = __half2half2(__ushort_as_half(0x6480));  // 1152.0
  uint32_t l = prmt(u, 0x64646464u, 0x5140u), h = prmt(u, 0x64646464u, 0x5342u);
  const __half2 lv = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&l), k1152), d);
  const __half2 hv = __hmul2(__hsub2(*reinterpret_cast<__half2*>(&h), k1152), d);
  lo = *reinterpret_cast<const uint32_t*>(&lv);
  hi = *reinterpret_cast<const uint32_t*>(&hv);
}

constexpr int kWideWarps = 8;
constexpr int kWideChunk = 64;               // K columns per chunk (two Q8_0 blocks)
constexpr int kWideRow = kWideChunk + 8;     // halves per stage row (padded)
constexpr int kWideStages = 3;

// A lane's weights of one chunk: rows g + 8 i, bytes 16 t .. 16 t + 15 and their block's scale.
struct WideW {
  uint4 q[4];
  __half d[4];
};

// The end of a wide block: without a K split warp w writes its tile (+ bias); with one,
// the ksplit blocks of the cluster (1, 1, ksplit) leave their partial sums in red (warp,
// acc, lane) and, after a cluster barrier, block z adds its share of the elements over the
// blocks' memories in split order (deterministic) and writes y + bias (bias_mine: the
// bias of the thread's tile row `lane`, parked in bsh).
template <int NT>
__device__ __forceinline__ void wide_finish(const float (&acc)[2][NT][4], float (*red)[2 * NT * 4][kWarp],
                                            float (*bsh)[kWarp], float bias_mine, const Parts& ps, int tile,
                                            int base, int n_tok) {
  constexpr int NA = 2 * NT * 4;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int ksplit = static_cast<int>(gridDim.z), z = static_cast<int>(blockIdx.z);
  if (ksplit == 1) {
    if (tile < ps.end[2]) {
      const Parts::One o = ps.at(tile);  // again from the parameters: not held across the loop
      write_tile<NT>(acc, o.y, o.w.rows, o.bias, o.r0, base, n_tok);
    }
    return;
  }
  const float* a = &acc[0][0][0];
#pragma unroll
  for (int i = 0; i < NA; ++i) red[warp][i][lane] = a[i];
  bsh[warp][lane] = bias_mine;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's partials (and biases) are in its shared memory
  WIDE_MARK(4);
  // Element e = (w, i, l) of the block's kWideWarps x NA x 32: block z sums [e0, e1), a
  // thread kGroup elements at a time: every peer load of a group is issued before its
  // stores (a store to y may alias a generic load, so nothing moves across one). Only the
  // elements that are stored are loaded (see the barrier below).
  constexpr int kElems = kWideWarps * NA * kWarp, kGroup = 4, kThreads = kWideWarps * kWarp;
  const int e0 = z * kElems / ksplit, e1 = (z + 1) * kElems / ksplit;
  for (int eg = e0 + static_cast<int>(threadIdx.x); eg < e1; eg += kGroup * kThreads) {
    float sum[kGroup];
    float* dst[kGroup];  // the element in y, null: not stored
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const int e = eg + u * kThreads;
      const int w = e / (NA * kWarp), i = e / kWarp % NA, l = e % kWarp;
      const int wt = static_cast<int>(blockIdx.y) * kWideWarps + w;
      const int mt = i / (NT * 4), j = i / 4 % NT, c = i % 4;
      const int tc = base + 8 * j + 2 * (l & 3) + (c & 1);
      const int rr = c_row(l >> 2, mt, c);
      sum[u] = 0.f;  // added in split order
      dst[u] = nullptr;
      if (e < e1 && wt < ps.end[2] && tc < n_tok) {
        const Parts::One o = ps.at(wt);
        dst[u] = o.y + static_cast<int64_t>(tc) * o.w.rows + o.r0 + rr;
#pragma unroll
        for (int r = 0; r < 8; ++r)
          if (r < ksplit) sum[u] += cluster.map_shared_rank(&red[0][0][0], r)[e];
        sum[u] += bsh[w][rr];
      }
    }
#pragma unroll
    for (int u = 0; u < kGroup; ++u)
      if (dst[u]) *dst[u] = sum[u];
  }
  // No block leaves while another may read its shared memory. Relaxed: every value loaded
  // from a peer feeds a store to y above, which issues only once the load has returned,
  // and the arrive issues after the stores; y needs no ordering here (the next kernel waits
  // for this grid's completion). cluster.sync() would fence first (MEMBAR.ALL.GPU: waiting
  // for the y stores to drain) and invalidate L1 after: +0.4% at 64 streams, +0.5% at 32
  // on the H200.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  WIDE_MARK(5);
}

// wide_finish's split sum for a q / k / v call with the RoPE + KV store fused (RopeEpi;
// KV: the cache's element type): rows r and r + 32 of a 64-row head are the same (acc,
// lane) element of warps 2 p and 2 p + 1 (a head is two 32-row tiles, and every matrix
// starts at an even tile), so a thread sums that pair, rotates it as
// rope_store_multi_kernel does (rope_cs / rope_pair: the same bits) unless it is v, and
// writes it to y (q, k roped; v as is) and, for k and v, to the token's cache row. Block z
// takes its share of the pairs in split order; the sums are wide_finish's, element by
// element. Each token's position, cache row and caches are looked up once (threads < 8 NT,
// before the cluster barrier, overlapping the wait for the other blocks).
template <int NT, class KV>
__device__ __forceinline__ void wide_finish_rope(const float (&acc)[2][NT][4], float (*red)[2 * NT * 4][kWarp],
                                                 float (*bsh)[kWarp], float bias_mine, const Parts& ps, int base,
                                                 int n_tok, const RopeEpi& re) {
  constexpr int NA = 2 * NT * 4;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int ksplit = static_cast<int>(gridDim.z), z = static_cast<int>(blockIdx.z);
  __shared__ int32_t tpos[8 * NT];
  __shared__ int64_t tslot[8 * NT];
  __shared__ KV* tcache[2][8 * NT];  // k, v
  const float* a = &acc[0][0][0];
#pragma unroll
  for (int i = 0; i < NA; ++i) red[warp][i][lane] = a[i];
  bsh[warp][lane] = bias_mine;
  if (static_cast<int>(threadIdx.x) < 8 * NT && base + static_cast<int>(threadIdx.x) < n_tok) {
    const KvDestDev d = static_cast<const RopeRowDev*>(re.rows)[base + threadIdx.x].dst;
    const int32_t p = d.position();
    tpos[threadIdx.x] = p;
    tslot[threadIdx.x] = d.kv.row(p);
    tcache[0][threadIdx.x] = static_cast<KV*>(d.kc);
    tcache[1][threadIdx.x] = static_cast<KV*>(d.vc);
  }
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's partials (and biases), and this block's token lookups
  // Pair q = (p, i, l): elements (2 p, i, l) and (2 p + 1, i, l) of the block's
  // kWideWarps x NA x 32; kGroup pairs a thread at a time, loads before stores.
  constexpr int kPairs = kWideWarps / 2 * NA * kWarp, kGroup = 2, kThreads = kWideWarps * kWarp;
  const int q0 = z * kPairs / ksplit, q1 = (z + 1) * kPairs / ksplit;
  for (int qg = q0 + static_cast<int>(threadIdx.x); qg < q1; qg += kGroup * kThreads) {
    float s0[kGroup], s1[kGroup];
    int tile[kGroup], rr[kGroup], tc[kGroup];
    bool ok[kGroup];
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      const int q = qg + u * kThreads;
      const int wp = q / (NA * kWarp), i = q / kWarp % NA, l = q % kWarp;
      const int e0 = (2 * wp * NA + i) * kWarp + l, e1 = e0 + NA * kWarp;
      const int mt = i / (NT * 4), j = i / 4 % NT, c = i % 4;
      tile[u] = static_cast<int>(blockIdx.y) * kWideWarps + 2 * wp;
      tc[u] = base + 8 * j + 2 * (l & 3) + (c & 1);
      rr[u] = c_row(l >> 2, mt, c);
      s0[u] = 0.f;  // added in split order
      s1[u] = 0.f;
      ok[u] = q < q1 && tile[u] < ps.end[2] && tc[u] < n_tok;
      if (ok[u]) {
#pragma unroll
        for (int r = 0; r < 8; ++r)
          if (r < ksplit) {
            const float* peer = cluster.map_shared_rank(&red[0][0][0], r);
            s0[u] += peer[e0];
            s1[u] += peer[e1];
          }
        s0[u] += bsh[2 * wp][rr[u]];
        s1[u] += bsh[2 * wp + 1][rr[u]];
      }
    }
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      if (!ok[u]) continue;
      const int m = tile[u] < ps.end[0] ? 0 : tile[u] < ps.end[1] ? 1 : 2;  // q, k, v
      const Parts::One o = ps.at(tile[u]);
      const int ti = tc[u] - base;
      float x0 = s0[u], x1 = s1[u];
      if (m < 2) {
        float cs, sn;
        rope_cs(tpos[ti], re.inv_freq[rr[u]], re.mscale, cs, sn);
        rope_pair(x0, x1, cs, sn);
      }
      const int64_t r = o.r0 + rr[u];
      float* y = o.y + static_cast<int64_t>(tc[u]) * o.w.rows + r;
      y[0] = x0;
      y[32] = x1;
      if (m > 0) {
        KV* kv = tcache[m - 1][ti] + tslot[ti] * o.w.rows + r;
        store_kv(kv, x0);
        store_kv(kv + 32, x1);
      }
    }
  }
  // As wide_finish: no block leaves while another may read its shared memory.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// ---- cuda_matmul_wg.cu: the output head's 33..64 tokens in one pass on wgmma (sm_90a) ----
// Whether a call of n_tok tokens over rows of n_in may take it: compute capability 9.0,
// 33..64 tokens, n_in a multiple of 64, BRASS_CUDA_MMA_WG not 0 (measurement knob); the
// caller checks for the tile copy (DevW::tiles).
bool wg_usable(int64_t n_tok, int64_t n_in);
// x (n_tok, n_in) f32 -> xh (f16, the kernel's K order), then y of ps's matrix 0 (read from
// its tile copy; tiles 32-row tiles) over a K split of ksplit (clusters of ksplit blocks).
// pick (ksplit 1, or null): then each token's argmax row into pick->out, through
// wg_pick_parts_count(n_tok, tiles) entries of pick->parts.
void launch_h16_wg(const Parts& ps, int64_t n_tok, int64_t tiles, int ksplit, const float* x, __half* xh,
                   cudaStream_t st, const PickEpi* pick = nullptr);
int64_t wg_pick_parts_count(int64_t n_tok, int64_t tiles);

}  // namespace brass::backend::cuda::wide
