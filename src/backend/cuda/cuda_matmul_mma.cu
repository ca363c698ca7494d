// Dense y = x W^T + b for a few tokens (2..64: batched decode) on tensor cores, the weight
// (Q8_0 or MXFP4, split layout) read once per 8 NT tokens instead of once per token as
// the dp4a mat-vec does (cuda_q8.cu), and without the 16-bit copy of the whole matrix
// that the cuBLAS path makes per call (cuda_tc.cpp). Two kernels: int8 MMA on the Q8_0
// round trip of x (the q8x path's numerics, summed in another order) and, for Q8_0
// weights from a few tokens on, f16 MMA on fragments dequantized in registers (the
// tensor-core path's numerics), the latter also in 256-row blocks that share one copy of
// the activations in shared memory for calls of many row tiles (the output head).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_probe.cuh"

namespace brass::backend::cuda {

#ifdef BRASS_PROBE
// -DBRASS_PROBE builds: marks of matmul_h16_wide_kernel's split calls (q / k / v, wo; the
// last launch wins), per block (x + gx (y + gy z)): marks 0..5 (start, wait done, first
// chunk done, loop done, cluster partials ready, end) and the block's SM in slot 6.
constexpr int kWideProbeBlocks = 1024, kWideProbeMarks = 7;
__device__ unsigned long long g_wide_probe[kWideProbeBlocks][kWideProbeMarks];
#define WIDE_MARK(m)                                                                         \
  do {                                                                                       \
    const unsigned b_ = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);      \
    if (gridDim.z > 1 && threadIdx.x == 0 && b_ < kWideProbeBlocks) {                        \
      g_wide_probe[b_][m] = probe_now();                                                     \
      unsigned sm_;                                                                          \
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                       \
      g_wide_probe[b_][6] = sm_;                                                             \
    }                                                                                        \
  } while (0)
void probe_dump_wide(const char* path) {
  static unsigned long long h[kWideProbeBlocks][kWideProbeMarks];
  cudaDeviceSynchronize();
  if (cudaMemcpyFromSymbol(h, g_wide_probe, sizeof(h)) != cudaSuccess) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  for (int b = 0; b < kWideProbeBlocks; ++b)
    for (int m = 0; m < kWideProbeMarks; ++m)
      if (h[b][m]) std::fprintf(f, "5,%d,%d,%llu\n", b, m, h[b][m]);
  std::fclose(f);
}
#else
#define WIDE_MARK(m) \
  do {               \
  } while (0)
#endif

}  // namespace brass::backend::cuda

#include "backend/cuda/cuda_wide.cuh"

namespace brass::backend::cuda {
namespace {

using namespace mma;
using namespace wide;

// Warps per block (splitting K): 8 at <= 32 tokens per pass, 4 at 64 (the partial sums'
// shared memory and registers).
template <int NT>
constexpr int ks_dense() { return NT >= 8 ? 4 : 8; }

// grid (ceil(n_tok / (8 NT)), rows / 32, ksplit): block (x, y, z) computes rows [32 y,
// 32 y + 32) for tokens [8 NT x, 8 NT (x + 1)) over the z-th of ksplit ranges of K steps.
// The token tiles of a row tile are neighbours in launch order, so when a call takes two
// passes (64 tokens, 32 per pass) the second reads the rows from L2: for the 615 MB output
// head the passes were whole sweeps of the matrix, each from DRAM.
// Why split K across blocks: a 2880- or 4096-row projection has only 90 / 128 row tiles,
// a few warps per SM, each walking its K range with dependent loads (latency-bound). The
// split's partials are combined by the tile's last block (finish_split_tile).
template <int TYPE, int NT>
__global__ void __launch_bounds__(ks_dense<NT>() * kWarp) matmul_mma_kernel(Parts ps, const int8_t* __restrict__ xq,
                                                                const float* __restrict__ xd, int n_tok,
                                                                float* part, unsigned* tickets) {
  constexpr int NA = 2 * NT * 4, KS = ks_dense<NT>();
  __shared__ float red[(KS - 1) * NA][kWarp];
  pdl_wait();
  pdl_trigger();
  const Parts::One m = ps.at(static_cast<int>(blockIdx.y));
  const DevW& w = m.w;
  const int n = static_cast<int>(w.n_in);
  const int64_t r0 = m.r0;
  const int base = static_cast<int>(blockIdx.x) * 8 * NT;
  // (MXFP4: launch_quantize_rows_mma left the negated twin after the n_tok rows)
  const Cols<NT> cols =
      make_cols<NT>(base, n_tok, [](int i) { return i; }, xq, xd, n, TYPE == kMX ? static_cast<int64_t>(n_tok) * n : 0);
  const uint8_t* const wq[1] = {w.q};
  const uint8_t* const wsc[1] = {w.s};
  const int ksplit = static_cast<int>(gridDim.z), steps = k_steps<TYPE>(n);
  const int p0 = static_cast<int>(blockIdx.z) * steps / ksplit, p1 = (static_cast<int>(blockIdx.z) + 1) * steps / ksplit;
  float acc[1][2][NT][4] = {};
  k_loop<TYPE, 1, NT, KS>(wq, wsc, r0, n, cols, acc, p0, p1);
  if (!finish_split_tile<NA, KS>(&acc[0][0][0][0], red, part, tickets)) return;
  write_tile<NT>(acc[0], m.y, w.rows, m.bias, r0, base, n_tok);
}

// ---- Q8_0 weights on f16 tensor cores (mma.sync m16n8k16, f32 accumulation) ----
// The int8 kernel above scales every block's int32 result by two scales per C element
// (instructions per MMA grow with the token tiles); here each weight fragment is
// dequantized once to f16 (f16(q d): the rounding cuda_gemm.cu's dequantization makes for
// the cuBLAS path) and the MMAs accumulate across blocks unscaled. Numerics: the
// tensor-core path's (f16 weights and activations, f32 sums; cuda_tc_test's twin).
//
// K order: a dot product does not care in which order its K terms meet, so each thread
// takes the 8 natural bytes it loads (8t .. 8t + 7 of a row's 32-byte block) as its
// fragment slots: k 2t, 2t + 1, 2t + 8, 2t + 9 of the first k16 MMA and of the second;
// the activations' B slots then are the same 8 natural elements, one 16-byte load of f16.
__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int NT>
constexpr int ks_h16() { return NT >= 4 ? 4 : 8; }

// grid and blocks as matmul_mma_kernel; xh: (n_tok, n) f16 activations, natural order.
template <int NT>
__global__ void __launch_bounds__(ks_h16<NT>() * kWarp) matmul_h16_kernel(Parts ps, const __half* __restrict__ xh,
                                                                          int n_tok, float* part, unsigned* tickets) {
  constexpr int NA = 2 * NT * 4, KS = ks_h16<NT>();
  __shared__ float red[(KS - 1) * NA][kWarp];
  pdl_wait();
  pdl_trigger();
  const Parts::One m = ps.at(static_cast<int>(blockIdx.y));
  const DevW& w = m.w;
  const int n = static_cast<int>(w.n_in), nb = n / 32;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  const int64_t r0 = m.r0;
  const int base = static_cast<int>(blockIdx.x) * 8 * NT;
  const int ksplit = static_cast<int>(gridDim.z);
  const int p0 = static_cast<int>(blockIdx.z) * nb / ksplit, p1 = (static_cast<int>(blockIdx.z) + 1) * nb / ksplit;
  const uint8_t* q = w.q + (r0 + g) * n + 8 * t;                                 // row r0 + g + 8 i: + 8 i n
  const __half* sc = reinterpret_cast<const __half*>(w.s) + (r0 + g) * nb;         // + 8 i nb
  const __half* xb[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) xb[j] = base + 8 * j + g < n_tok ? xh + static_cast<int64_t>(base + 8 * j + g) * n + 8 * t : nullptr;
  float acc[2][NT][4] = {};
#pragma unroll 1
  for (int p = p0 + warp; p < p1; p += KS) {
    uint2 wv[4];
    __half2 d[4];
    uint4 bv[NT];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      wv[i] = __ldg(reinterpret_cast<const uint2*>(q + static_cast<int64_t>(8 * i) * n + 32 * p));
      d[i] = __half2half2(__ldg(sc + static_cast<int64_t>(8 * i) * nb + p));
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) bv[j] = xb[j] ? __ldg(reinterpret_cast<const uint4*>(xb[j] + 32 * p)) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      uint32_t a[2][4];  // [k16 chunk][fragment register]
      q8_half2(wv[2 * mt].x, d[2 * mt], a[0][0], a[0][2]);
      q8_half2(wv[2 * mt + 1].x, d[2 * mt + 1], a[0][1], a[0][3]);
      q8_half2(wv[2 * mt].y, d[2 * mt], a[1][0], a[1][2]);
      q8_half2(wv[2 * mt + 1].y, d[2 * mt + 1], a[1][1], a[1][3]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        mma_f16(acc[mt][j], a[0][0], a[0][1], a[0][2], a[0][3], bv[j].x, bv[j].y);
        mma_f16(acc[mt][j], a[1][0], a[1][1], a[1][2], a[1][3], bv[j].z, bv[j].w);
      }
    }
  }
  if (!finish_split_tile<NA, KS>(&acc[0][0][0], red, part, tickets)) return;
  write_tile<NT>(acc, m.y, w.rows, m.bias, r0, base, n_tok);
}

// ---- The same f16 MMA for calls of many row tiles (the output head), 256 rows a block ----
// matmul_h16_kernel's blocks each read the pass's activations (8 NT tokens x n halves) from
// L2 for 32 rows of weights: for the 201,088 x 2,880 head at 32 tokens that is 184 KB per
// 92 KB of weights, 1.16 GB of L2 reads a call for 0.6 GB of weights. Here a block's 8
// warps (32 rows each, the same fragments) walk the same whole K range, so the block loads
// each activation chunk once into shared memory for 256 rows: 8x less L2 traffic, and no K
// split (enough blocks without one: >= 16 an SM's worth of 32-row tiles).
//
// K streams in chunks of 64 columns (two Q8_0 blocks):
// - Weights: lane (g, t) loads 16 bytes of each of its rows g + 8 i (i < 4): bytes 16 t ..
//   16 t + 15 of the chunk, all in block t / 2, whose scale it loads. Its 8 fragment slots
//   of the chunk's first k32 step are bytes 16 t .. + 7, of the second 16 t + 8 .. + 15
//   (matmul_h16_kernel's K-order freedom: a k16 MMA's slots may come from two blocks, each
//   dequantized with its own scale). One LDG.128 per row and chunk (half the load
//   instructions of 8-byte steps), 2 KB of a warp's rows a chunk. Two register buffers in
//   turn: chunk c + 1's loads are in flight while chunk c computes, and c + 2's are issued
//   as soon as c is done, so a warp waits with 2 chunks (4 KB) in flight: 16 warps an SM
//   (2 blocks) keep ~32..64 KB in flight, what ~4 TB/s at ~1 us of loaded latency asks.
//   A bigger chunk would hold more registers per buffer (128 columns: 36 instead of 20).
// - Activations: (8 NT tokens, 64 halves) a chunk in a 3-stage cp.async ring: chunk c + 2
//   is copied while c computes; one barrier a chunk (after it, every warp is done with
//   chunk c - 1, whose stage c + 2 takes). 8 NT x 8 copies of 16 bytes: one a thread at
//   most. Rows padded by 8 halves (144 bytes, 9 16-byte units: odd): a quarter warp's
//   B loads (lanes g, g + 1 of t 0..3: bytes 144 g + 32 t + 16 s) hit 8 different 16-byte
//   bank groups; unpadded (128-byte rows) tokens g and g + 1 would collide 2-way.
// - A last chunk of 32 columns (n % 64 == 32): lanes t >= 2 (the missing block) load zero
//   weights and the stage's missing columns are stored as zeros, so they add 0 x 0.
// Tokens >= n_tok: their stage rows are stored as zeros (never stored to y). Warps whose
// 32 rows are past the last tile (rows need not be a multiple of 256) copy and take every
// barrier but load and compute nothing.
// One chunk of a lane's tile: weights b (rows g + 8 i), activations of the chunk's stage
// from xr (token g of tile j at + 8 j rows of kWideRow), both k32 steps.
template <int NT>
__device__ __forceinline__ void wide_chunk(const WideW& b, const __half* xr, float (&acc)[2][NT][4]) {
#pragma unroll
  for (int s = 0; s < 2; ++s) {  // k32 step: bytes 16 t + 8 s .. + 7 of each row
    uint4 bv[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) bv[j] = *reinterpret_cast<const uint4*>(xr + 8 * j * kWideRow + 8 * s);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const uint4 &lo = b.q[2 * mt], &hi = b.q[2 * mt + 1];  // rows g + 16 mt, g + 8 + 16 mt
      const __half2 dl = __half2half2(b.d[2 * mt]), dh = __half2half2(b.d[2 * mt + 1]);
      uint32_t a[2][4];  // [k16 chunk][fragment register]
      q8_half2(s ? lo.z : lo.x, dl, a[0][0], a[0][2]);
      q8_half2(s ? hi.z : hi.x, dh, a[0][1], a[0][3]);
      q8_half2(s ? lo.w : lo.y, dl, a[1][0], a[1][2]);
      q8_half2(s ? hi.w : hi.y, dh, a[1][1], a[1][3]);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        mma_f16(acc[mt][j], a[0][0], a[0][1], a[0][2], a[0][3], bv[j].x, bv[j].y);
        mma_f16(acc[mt][j], a[1][0], a[1][1], a[1][2], a[1][3], bv[j].z, bv[j].w);
      }
    }
  }
}

// grid (ceil(n_tok / (8 NT)), ceil(row tiles / 8), ksplit): block (x, y, z) computes row
// tiles [8 y, 8 y + 8) (warp w: tile 8 y + w, of whichever of ps's matrices holds it) for
// tokens [8 NT x, 8 NT (x + 1)) over the z-th of ksplit ranges of chunks. xh: (n_tok, n)
// f16 activations.
// Why a K split here too: q / k / v (160 row tiles: 20 blocks) and wo (90: 12) fill a
// fraction of the SMs; split up to 8 ways they fill ~1..2 blocks an SM, and each block's
// first two chunks of weights are in flight before the previous kernel ends. The ksplit
// blocks of a row block form a thread-block cluster (1, 1, ksplit): each leaves its
// partial sums in its shared memory, and after a cluster barrier block z adds its share of
// the elements over the ksplit blocks' memories in split order (deterministic) and writes
// y. (A ticket per tile with the last block summing the partials from L2 waited on ksplit
// dependent L2 round trips: the kernel was slower than matmul_h16_kernel.)
// TL: the weights from matrix 0's tile copy (DevW::tiles, kQ8TileBytes; one matrix, no K
// split, n % 64 == 0): a warp's chunk is one contiguous 2,176-byte tile.
// RP: a q / k / v call (K split) that rotates q and k and stores k and v in its caches
// (wide_finish_rope, re; 1: f16 caches, 2: f32).
template <int NT, bool TL = false, int RP = 0>
__global__ void __launch_bounds__(kWideWarps * kWarp, 2) matmul_h16_wide_kernel(Parts ps,
                                                                                const __half* __restrict__ xh,
                                                                                int n_tok, RopeEpi re) {
  constexpr int NA = 2 * NT * 4;
  WIDE_MARK(0);
  __shared__ __align__(16) __half xs[kWideStages][8 * NT][kWideRow];  // (stage, token, chunk column + pad)
  __shared__ float red[kWideWarps][NA][kWarp];                         // a K split's partial sums (warp, acc, lane)
  __shared__ float bsh[kWideWarps][kWarp];                             // a K split's bias (warp, tile row)
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  const int tile = static_cast<int>(blockIdx.y) * kWideWarps + warp;
  const bool live = tile < ps.end[2];
  const Parts::One m = ps.at(live ? tile : 0);
  const int n = static_cast<int>(ps.w[0].n_in), nb = n / 32, nch = (n + kWideChunk - 1) / kWideChunk;
  const int ksplit = static_cast<int>(gridDim.z), z = static_cast<int>(blockIdx.z);
  const int c0 = z * nch / ksplit, c1 = (z + 1) * nch / ksplit;  // this block's chunks
  const uint8_t* q = m.w.q + (m.r0 + g) * n + 16 * t;                                    // row g + 8 i: + 8 i n
  const __half* sc = reinterpret_cast<const __half*>(m.w.s) + (m.r0 + g) * nb + (t >> 1);  // + 8 i nb
  // Chunk c's weights into b (zeros past the block's range or on a dead warp: chunk c >=
  // c1, or the missing half of a last 32-column chunk). Whole chunks (a warp-uniform branch)
  // load with no condition on a lane: nothing may read the registers (as a select after a
  // load would) before the chunk computes.
  const uint8_t* tq = TL ? m.w.tiles + (m.r0 / kRows) * nch * kQ8TileBytes + 16 * lane : nullptr;
  auto load_w = [&](int c, WideW& b) {
    if constexpr (TL) {
      if (live && c < c1) {
        const uint8_t* tl = tq + c * kQ8TileBytes;
#pragma unroll
        for (int i = 0; i < 4; ++i) b.q[i] = __ldg(reinterpret_cast<const uint4*>(tl + 512 * i));
        const uint2 d = __ldg(reinterpret_cast<const uint2*>(tl - 16 * lane + 2048 + 8 * (2 * g + (t >> 1))));
        b.d[0] = __ushort_as_half(static_cast<unsigned short>(d.x));
        b.d[1] = __ushort_as_half(static_cast<unsigned short>(d.x >> 16));
        b.d[2] = __ushort_as_half(static_cast<unsigned short>(d.y));
        b.d[3] = __ushort_as_half(static_cast<unsigned short>(d.y >> 16));
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          b.q[i] = make_uint4(0, 0, 0, 0);
          b.d[i] = __ushort_as_half(0);
        }
      }
    } else if (live && c < c1 && 2 * c + 2 <= nb) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        b.q[i] = __ldg(reinterpret_cast<const uint4*>(q + (8 * i * n + kWideChunk * c)));
        b.d[i] = __ldg(sc + (8 * i * nb + 2 * c));
      }
    } else {
      const bool ok = live && c < c1 && 2 * c + (t >> 1) < nb;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        b.q[i] = ok ? __ldg(reinterpret_cast<const uint4*>(q + (8 * i * n + kWideChunk * c))) : make_uint4(0, 0, 0, 0);
        b.d[i] = ok ? __ldg(sc + (8 * i * nb + 2 * c)) : __ushort_as_half(0);
      }
    }
  };
  // Thread's copy: piece cpc (8 halves) of stage row ct (token base + ct), if ct < 8 NT.
  const int base = static_cast<int>(blockIdx.x) * 8 * NT;
  const int ct = threadIdx.x / 8, cpc = threadIdx.x % 8;
  const bool copier = ct < 8 * NT, have_tok = copier && base + ct < n_tok;
  const __half* xsrc = xh + static_cast<int64_t>(have_tok ? base + ct : 0) * n + 8 * cpc;
  // Chunk c's activations into stage c % 3, then one commit (empty past the last chunk:
  // one group per chunk keeps cp_async_wait_group's count).
  auto load_x = [&](int c) {
    if (copier && c < c1) {
      __half* dst = &xs[c % kWideStages][ct][8 * cpc];
      if (have_tok && kWideChunk * c + 8 * cpc < n)
        cp_async16(dst, xsrc + kWideChunk * c);
      else
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
    cp_async_commit();
  };
  float acc[2][NT][4] = {};
  // Chunk c from weights b (stage c % 3); then b takes chunk c + 2's weights.
  auto chunk = [&](int c, WideW& b) {
    cp_async_wait_group<1>();  // this thread's copies of chunk c have landed (c + 1's may pend)
    __syncthreads();           // everyone's, and every warp is done with chunk c - 1's stage
    load_x(c + 2);
    if (live) wide_chunk<NT>(b, &xs[c % kWideStages][g][16 * t], acc);
    load_w(c + 2, b);
  };
  // Weights are static: the first two chunks' loads go out before the wait for the
  // previous kernel (the activations it writes are read only after it).
  WideW wa, wb;
  load_w(c0, wa);
  load_w(c0 + 1, wb);
  // A K split's bias of tile row `lane` (static too), parked in shared memory at the end:
  // the split's sum then waits on no global load (+0.3% at 64 streams on the H200).
  const float bias_mine = ksplit > 1 && live && m.bias ? __ldg(m.bias + m.r0 + lane) : 0.f;
  pdl_wait();
  WIDE_MARK(1);
  pdl_trigger();
  load_x(c0);
  load_x(c0 + 1);
#pragma unroll 1
  for (int c = c0; c < c1; c += 2) {
    chunk(c, wa);
#ifdef BRASS_PROBE
    if (c == c0) {
      __syncthreads();
      WIDE_MARK(2);
    }
#endif
    if (c + 1 < c1) chunk(c + 1, wb);  // uniform over the block: the barriers match
  }
  WIDE_MARK(3);
  if constexpr (RP == 1)
    wide_finish_rope<NT, __half>(acc, red, bsh, bias_mine, ps, base, n_tok, re);
  else if constexpr (RP == 2)
    wide_finish_rope<NT, float>(acc, red, bsh, bias_mine, ps, base, n_tok, re);
  else
    wide_finish<NT>(acc, red, bsh, bias_mine, ps, tile, base, n_tok);
}

// One warp per 32-group of the whole (n_rows, n) input: every group's load is in flight
// at once (a block per row walking its groups took ~10 us for 64 rows of 2880).
template <int TYPE>
__global__ void __launch_bounds__(256) quantize_rows_kernel(const float* __restrict__ x, int64_t n_groups, int8_t* xq,
                                                             float* xd) {
  const int64_t gi = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  pdl_wait();
  if (gi < n_groups) quantize_group_mma<TYPE>(x, gi, xq, xd, TYPE == kMX ? n_groups * 32 : 0);
  // Triggered at the end, not the start: with many small blocks (a 512-token prefill: 5,760)
  // dependents launched early would sit in their waits on SM slots these blocks still need.
  pdl_trigger();
}

// Tickets: a fixed area at the start of the scratch (zero at rest: every split launch
// resets the tickets it used), so the tiles of a split launch are limited to it.
constexpr int64_t kMaxTickets = 16384;

// Measurement knobs, read once (env_int): BRASS_CUDA_MMA_DENSE_NT caps the token tiles per
// pass (1, 2, 4, 8: 8..64 tokens), BRASS_CUDA_MMA_BLOCKS_PER_SM the K split's target.
// Default 4 (32 tokens per pass; 64 tokens read the weight twice, the second time mostly
// from L2): at 64 tokens on the H200 q/k/v 0.077 -> 0.062 ms, wo 0.030 -> 0.022, output
// head 0.78 -> 0.56 against 8 (64 tokens per pass: 2 x 8 x 4 accumulators per thread).
int max_nt() {
  static const int v = env_int("BRASS_CUDA_MMA_DENSE_NT", 4);
  return v;
}
int blocks_per_sm() {
  static const int v = env_int("BRASS_CUDA_MMA_BLOCKS_PER_SM", 4);
  return v;
}
// BRASS_CUDA_MMA_WIDE=0: calls of many row tiles stay on matmul_h16_kernel.
bool wide_enabled() {
  static const bool v = knob_on("BRASS_CUDA_MMA_WIDE");
  return v;
}
// BRASS_CUDA_MMA_WIDE_SPLIT=0: calls of few row tiles (q / k / v, wo) stay on
// matmul_h16_kernel instead of the 256-row blocks split over K.
bool wide_split_enabled() {
  static const bool v = knob_on("BRASS_CUDA_MMA_WIDE_SPLIT");
  return v;
}
// BRASS_CUDA_MMA_WIDE_BPS: the split's target blocks an SM (default 2).
int wide_blocks_per_sm() {
  static const int v = env_int("BRASS_CUDA_MMA_WIDE_BPS", 2);
  return v;
}

// BRASS_CUDA_MMA_TILES=0: the head's calls read the split layout though it has a tile copy.
bool mma_tiles_on() {
  static const bool v = knob_on("BRASS_CUDA_MMA_TILES");
  return v;
}

// K split: enough blocks for ~blocks_per_sm() per SM, each warp still >= 2 K steps.
int pick_ksplit(int64_t tiles, int steps, int ks) {
  if (tiles > kMaxTickets) return 1;
  const int64_t want = (static_cast<int64_t>(blocks_per_sm()) * sm_count() + tiles - 1) / tiles;
  return static_cast<int>(std::clamp<int64_t>(want, 1, std::max(1, std::min(16, steps / (2 * ks)))));
}

// The largest K split <= ks whose clusters of `ks` blocks are all resident at once for
// `clusters` of them (cudaOccupancyMaxActiveClusters: a GPC holds whole clusters, so 40
// clusters of 7 blocks took two waves on the H200 where 40 of 6 take one).
template <int NT>
int fit_ksplit(int64_t clusters, int ks) {
  static int active[9] = {};  // per cluster size, queried once (the same on every call)
  for (; ks > 1; --ks) {
    if (active[ks] == 0) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(1, 1, ks);
      cfg.blockDim = dim3(kWideWarps * kWarp);
      cudaLaunchAttribute at;
      at.id = cudaLaunchAttributeClusterDimension;
      at.val.clusterDim.x = 1;
      at.val.clusterDim.y = 1;
      at.val.clusterDim.z = ks;
      cfg.attrs = &at;
      cfg.numAttrs = 1;
      int n = 0;
      if (cudaOccupancyMaxActiveClusters(&n, matmul_h16_wide_kernel<NT>, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 1;  // unknown: take the smaller split
      }
      active[ks] = std::max(n, 1);
    }
    if (clusters <= active[ks]) break;
  }
  return ks;
}
int fit_ksplit(int nt, int64_t clusters, int ks) {
  return nt == 1 ? fit_ksplit<1>(clusters, ks) : nt == 2 ? fit_ksplit<2>(clusters, ks) : fit_ksplit<4>(clusters, ks);
}

// One call's launch shape: f16 or int8 kernel (f16: 32 or 256 rows a block), token tiles
// per pass, grid (gx: 32-row tiles, gy: token passes), K split.
struct Plan {
  bool h16, wide, wg;  // wg: the output head's 33..64 tokens in one pass on wgmma (cuda_matmul_wg.cu)
  bool tiles;          // one matrix with a tile copy (the output head): its no-split calls read the tiles
  int nt, ksplit;
  int64_t gx, gy;
  int64_t part_floats() const { return ksplit > 1 && !wide ? ksplit * gx * gy * (2 * nt * 4) * kWarp : 0; }
};

Plan plan(std::span<const MatmulP> ms, bool h16) {
  const MatmulP& a = ms[0];
  const int64_t per_pass = std::min<int64_t>(a.n_tok, 8 * max_nt());
  Plan p{};
  p.h16 = h16 && a.w.type == kQ8;
  p.nt = per_pass <= 8 ? 1 : per_pass <= 16 ? 2 : per_pass <= 32 ? 4 : 8;
  p.gx = 0;
  for (const MatmulP& m : ms) p.gx += m.w.rows / kRows;
  p.gy = (a.n_tok + 8 * p.nt - 1) / (8 * p.nt);
  const int steps = a.w.type == kMX ? k_steps<kMX>(static_cast<int>(a.w.n_in)) : k_steps<kQ8>(static_cast<int>(a.w.n_in));
  const int ks = p.h16 ? (p.nt >= 4 ? 4 : 8) : (p.nt >= 8 ? 4 : 8);
  // 256 rows a block once the 32-row tiles number >= 16 an SM (the output head: 6,284 at
  // 32 tokens; q / k / v's 160 and wo's 90 keep their K-split 32-row blocks): the wide
  // blocks still fill the SMs, each reading the activations once for 8 tiles.
  // Fewer tiles (q / k / v, wo): the same 256-row blocks with K split towards
  // wide_blocks_per_sm() blocks an SM, in clusters of at most 8 (the portable size) that
  // are all resident at once (fit_ksplit), each block >= 2 chunks.
  const int64_t sms = sm_count();
  const bool many = p.gx * p.gy >= 16 * sms;
  p.tiles = ms.size() == 1 && a.w.tiles && mma_tiles_on() && a.w.n_in % 64 == 0;
  // The head with its tile copy at 33..64 tokens: one pass on wgmma (cuda_matmul_wg.cu).
  p.wg = p.h16 && p.tiles && p.gx >= 16 * sms && wg_usable(a.n_tok, a.w.n_in);
  if (p.wg) {
    p.nt = 8;
    p.gy = 1;
    p.wide = true;
    p.ksplit = 1;
    return p;
  }
  p.wide = p.h16 && p.nt <= 4 && wide_enabled() && (many || wide_split_enabled());
  if (p.wide) {
    const int64_t blocks = (p.gx + kWideWarps - 1) / kWideWarps * p.gy, want = wide_blocks_per_sm() * sms;
    const int nch = static_cast<int>((a.w.n_in + kWideChunk - 1) / kWideChunk);
    const int split = static_cast<int>(std::clamp<int64_t>(want / blocks, 1, std::clamp(nch / 2, 1, 8)));
    p.ksplit = many ? 1 : fit_ksplit(p.nt, blocks, split);
  } else {
    p.ksplit = pick_ksplit(p.gx * p.gy, steps, ks);
  }
  return p;
}

Parts parts_of(std::span<const MatmulP> ms) {
  Parts ps{};
  int end = 0;
  for (int j = 0; j < 3; ++j) {
    const MatmulP& m = ms[std::min<size_t>(j, ms.size() - 1)];
    if (j < static_cast<int>(ms.size())) end += static_cast<int>(m.w.rows / kRows);
    ps.w[j] = m.w;
    ps.bias[j] = m.bias;
    ps.y[j] = m.y;
    ps.end[j] = end;
  }
  return ps;
}

template <int TYPE, int NT>
void launch_nt(const Parts& ps, int64_t n_tok, const Plan& pl, const int8_t* xq, const float* xd, float* part,
               unsigned* tickets, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>(pl.gy), static_cast<unsigned>(pl.gx), static_cast<unsigned>(pl.ksplit));
  launch_pdl(matmul_mma_kernel<TYPE, NT>, grid, dim3(ks_dense<NT>() * kWarp), 0, st, ps, xq, xd,
             static_cast<int>(n_tok), part, tickets);
  BRASS_CUDA_LAUNCHED();
}

template <int NT>
void launch_h16(const Parts& ps, int64_t n_tok, const Plan& pl, const __half* xh, float* part, unsigned* tickets,
                cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>(pl.gy), static_cast<unsigned>(pl.gx), static_cast<unsigned>(pl.ksplit));
  launch_pdl(matmul_h16_kernel<NT>, grid, dim3(ks_h16<NT>() * kWarp), 0, st, ps, xh, static_cast<int>(n_tok), part,
             tickets);
  BRASS_CUDA_LAUNCHED();
}

// Grid y: ceil(tiles / 8) <= 8,192 (matmul_mma_supported: <= 65,535 tiles), within 65,535.
// A K split launches as clusters of its ksplit blocks (grid z).
// A call of one matrix with a tile copy and no K split (the output head) reads the tiles.
// H200, 8 / 32 / 64 streams: BENCHMARKS.md, session 31. BRASS_CUDA_MMA_TILES=0: the split
// layout (measurement knob).
// rope: the q / k / v call's RoPE + KV store (the plan has a K split), or null.
template <int NT>
void launch_h16_wide(const Parts& ps, int64_t n_tok, const Plan& pl, const __half* xh, cudaStream_t st,
                     const RopeEpi* rope) {
  const dim3 grid(static_cast<unsigned>(pl.gy), static_cast<unsigned>((pl.gx + kWideWarps - 1) / kWideWarps),
                  static_cast<unsigned>(pl.ksplit));
  const bool tl = pl.tiles && pl.ksplit == 1;
  auto* kern = rope ? (rope->f16 ? matmul_h16_wide_kernel<NT, false, 1> : matmul_h16_wide_kernel<NT, false, 2>)
               : tl ? matmul_h16_wide_kernel<NT, true>
                    : matmul_h16_wide_kernel<NT, false>;
  launch_pdl_cluster(kern, grid, dim3(kWideWarps * kWarp), dim3(1, 1, grid.z), 0, st, ps, xh, static_cast<int>(n_tok),
                     rope ? *rope : RopeEpi{});
  BRASS_CUDA_LAUNCHED();
}

// Tokens per tile pass: up to 64, so a 64-stream step reads the weight once.
template <int TYPE>
void launch_typed(const MatmulP& a, const Parts& ps, const Plan& pl, int8_t* xq, float* xd, float* part,
                  unsigned* tickets, cudaStream_t st) {
  launch_quantize_rows_mma(TYPE, a.x, a.n_tok, a.w.n_in, xq, xd, st);
  switch (pl.nt) {
    case 1: launch_nt<TYPE, 1>(ps, a.n_tok, pl, xq, xd, part, tickets, st); break;
    case 2: launch_nt<TYPE, 2>(ps, a.n_tok, pl, xq, xd, part, tickets, st); break;
    case 4: launch_nt<TYPE, 4>(ps, a.n_tok, pl, xq, xd, part, tickets, st); break;
    default: launch_nt<TYPE, 8>(ps, a.n_tok, pl, xq, xd, part, tickets, st); break;
  }
}

// ready: a.x in f16 already (the producer wrote it), else xh takes it from to_half.
void launch_half(const MatmulP& a, const Parts& ps, const Plan& pl, __half* xh_scratch, const __half* ready,
                 float* part, unsigned* tickets, cudaStream_t st, const RopeEpi* rope, const PickEpi* pick) {
  if (pl.wg) {  // (its own K order: to_half_wg)
    launch_h16_wg(ps, a.n_tok, pl.gx, pl.ksplit, a.x, xh_scratch, st, pick);
    return;
  }
  if (!ready) launch_to_half(a.x, nullptr, 1, xh_scratch, false, a.n_tok, a.w.n_in, st);
  const __half* xh = ready ? ready : xh_scratch;
  if (pl.wide) {
    switch (pl.nt) {
      case 1: launch_h16_wide<1>(ps, a.n_tok, pl, xh, st, rope); break;
      case 2: launch_h16_wide<2>(ps, a.n_tok, pl, xh, st, rope); break;
      default: launch_h16_wide<4>(ps, a.n_tok, pl, xh, st, rope); break;
    }
    return;
  }
  switch (pl.nt) {
    case 1: launch_h16<1>(ps, a.n_tok, pl, xh, part, tickets, st); break;
    case 2: launch_h16<2>(ps, a.n_tok, pl, xh, part, tickets, st); break;
    case 4: launch_h16<4>(ps, a.n_tok, pl, xh, part, tickets, st); break;
    default: launch_h16<8>(ps, a.n_tok, pl, xh, part, tickets, st); break;
  }
}

int64_t al256(int64_t v) { return (v + 255) / 256 * 256; }

// One warp a tile (kQ8TileBytes): lane l copies its 16 bytes of rows g + 8 i; lanes 0..15
// (g' = l / 2, h = l % 2) the four scales of rows g' + 8 i, block 2 c + h.
__global__ void q8_tiles_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ s, uint8_t* dst,
                                int64_t n_in, int64_t chunks) {
  const int64_t tile = blockIdx.x, rb = tile / chunks, c = tile % chunks;
  const int l = threadIdx.x, g = l / 4, t = l % 4;
  uint8_t* out = dst + tile * kQ8TileBytes;
  for (int i = 0; i < 4; ++i)
    *reinterpret_cast<uint4*>(out + 512 * i + 16 * l) =
        *reinterpret_cast<const uint4*>(q + (rb * 32 + g + 8 * i) * n_in + 64 * c + 16 * t);
  if (l < 16) {
    const int gg = l / 2, h = l % 2;
    for (int i = 0; i < 4; ++i)
      reinterpret_cast<uint16_t*>(out + 2048 + 8 * (2 * gg + h))[i] =
          reinterpret_cast<const uint16_t*>(s)[(rb * 32 + gg + 8 * i) * (n_in / 32) + 2 * c + h];
  }
}

}  // namespace

void launch_q8_tiles(const uint8_t* q, const uint8_t* s, uint8_t* dst, int64_t n_in, int64_t rows, cudaStream_t st) {
  const int64_t chunks = n_in / 64, tiles = rows / 32 * chunks;
  q8_tiles_kernel<<<static_cast<unsigned>(tiles), kWarp, 0, st>>>(q, s, dst, n_in, chunks);
  BRASS_CUDA_LAUNCHED();
}

void launch_quantize_rows_mma(int type, const float* x, int64_t n_rows, int64_t n, int8_t* xq, float* xd,
                              cudaStream_t st) {
  if (n_rows <= 0) return;
  const int64_t groups = n_rows * (n / 32);  // rows are contiguous: group gi of row r is r * (n / 32) + gi
  const dim3 grid(static_cast<unsigned>((groups + 7) / 8));
  if (type == kMX)
    launch_pdl(quantize_rows_kernel<kMX>, grid, dim3(256), 0, st, x, groups, xq, xd);
  else
    launch_pdl(quantize_rows_kernel<kQ8>, grid, dim3(256), 0, st, x, groups, xq, xd);
  BRASS_CUDA_LAUNCHED();
}

bool matmul_mma_supported(const DevW& w) {
  if (w.type != kQ8 && w.type != kMX) return false;
  return w.n_in % (w.type == kMX ? 64 : 32) == 0 && w.rows % kRows == 0 && w.ne1 == w.rows && w.n_in <= (1 << 20) &&
         w.rows / kRows <= 65535 / 3;  // row tiles go in grid y (a fused call stacks up to three matrices)
}

// Scratch: tickets (kMaxTickets unsigned) | xq (2, n_tok, n_in) int8 (MXFP4: q and -q) or
// xh (n_tok, n_in) f16
// | xd (n_tok, n_in / 32) | the split partials (ksplit, tiles, NA, 32) f32.
int64_t matmul_mma_scratch_bytes(std::span<const MatmulP> ms, bool h16) {
  const MatmulP& a = ms[0];
  return al256(kMaxTickets * 4) + al256(a.n_tok * a.w.n_in * 2) + al256(a.n_tok * (a.w.n_in / 32) * 4) +
         plan(ms, h16).part_floats() * 4;
}

bool matmul_mma_fusable(std::span<const MatmulP> ms) {
  if (ms.empty() || ms.size() > 3) return false;
  for (const MatmulP& m : ms)
    if (!matmul_mma_supported(m.w) || m.w.type != ms[0].w.type || m.w.n_in != ms[0].w.n_in || m.x != ms[0].x ||
        m.n_tok != ms[0].n_tok)
      return false;
  return true;
}

bool matmul_mma_rope_fusable(std::span<const MatmulP> ms, bool h16, int64_t head_dim) {
  if (ms.size() != 3 || head_dim != 64 || !matmul_mma_fusable(ms)) return false;
  for (const MatmulP& m : ms)
    if (m.w.rows % 64 != 0) return false;  // whole heads: a head's two tiles in one block
  const Plan pl = plan(ms, h16);
  return pl.h16 && pl.wide && !pl.wg && pl.ksplit > 1;
}

bool matmul_mma_pick_fusable(const MatmulP& m, bool h16) {
  const Plan pl = plan(std::span<const MatmulP>(&m, 1), h16);
  return pl.wg && pl.ksplit == 1;
}

int64_t matmul_mma_pick_parts(const MatmulP& m) { return wg_pick_parts_count(m.n_tok, m.w.rows / kRows); }

void launch_matmul_mma(std::span<const MatmulP> ms, bool h16, void* scratch, cudaStream_t st, const __half* xh,
                       const RopeEpi* rope, const PickEpi* pick) {
  const MatmulP& a = ms[0];
  if (a.n_tok <= 0) return;
  uint8_t* s = static_cast<uint8_t*>(scratch);
  unsigned* tickets = reinterpret_cast<unsigned*>(s);
  uint8_t* xs = s + al256(kMaxTickets * 4);
  float* xd = reinterpret_cast<float*>(xs + al256(a.n_tok * a.w.n_in * 2));
  float* part = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(xd) + al256(a.n_tok * (a.w.n_in / 32) * 4));
  const Plan pl = plan(ms, h16);
  const Parts ps = parts_of(ms);
  if (pl.h16)
    launch_half(a, ps, pl, reinterpret_cast<__half*>(xs), xh, part, tickets, st, rope, pick);
  else if (a.w.type == kQ8)
    launch_typed<kQ8>(a, ps, pl, reinterpret_cast<int8_t*>(xs), xd, part, tickets, st);
  else
    launch_typed<kMX>(a, ps, pl, reinterpret_cast<int8_t*>(xs), xd, part, tickets, st);
}

}  // namespace brass::backend::cuda
