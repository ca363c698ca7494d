// One-token int8-activation kernels that issue every weight load of a warp at once, and
// for static weights before the PDL wait (cuda_rowfrag.cuh), so the loads overlap the
// previous kernel's tail instead of following it:
// - the dense mat-vec of matrices up to 64 MB (wo, ...);
// - the MoE block of one decode token (MoeBlockP: residual add, norm, router, top-k,
//   experts) in three kernels instead of five (add_rms_norm, router matmul, top-k,
//   gate/up, down):
//   1. norm_router, grid (n_expert): every block adds the residual and norms it (the same
//      bits in every block) and computes its expert's router logit, the norm weights and
//      its router row loaded before the wait; the last block to finish (ticket) writes
//      the residual (only once every block has read it), xn and its int8 copy (Q8_0 per
//      32, MXFP4 order for MXFP4 experts), and picks the top k (pick_experts). Up to 32
//      experts it is one cluster of 8 blocks instead (norm_router_cluster_kernel). With
//      the attention's wo handed in (MoeBlockP::wo_x) it is wo_router_kernel instead
//      (cuda_wo_router.cu): wo, the residual add, the norm, the router and the top k.
//   2. gate/up, a warp per (slot, ff row), 4 per block: both rows and the int8 x in flight
//      together; the SwiGLU output goes out in f32, and the last of the 8 blocks of a
//      32-row group (ticket) quantizes the group (act_q, act_d).
//   3. down: the four experts' rows load before the wait (the ids come from kernel 1, two
//      kernels back); after it the block copies the int8 activations to shared memory.
// Why: the streaming q8x kernels (cuda_q8.cu) are latency-bound at one token: each waits,
// quantizes x, then walks its rows a pair at a time, one DRAM round trip each. On the
// H200 (ncu, gpt-oss-20b, one token): wo 12.7 us for 12.6 MB, MoE gate/up 25 us for 35 MB,
// down 13.5 us for 18 MB, and add_rms_norm + router + top-k ~12 us of launches.
// Numerics: each lane sums its chunks in row_dot_q8x's order and the quantization is
// quant::quantize_row(Q8_0)'s, so the q8x twins apply (router logits and the norm: sums
// in another order).
#include <algorithm>
#include <cstdio>

#include <cooperative_groups.h>

#include "backend/cuda/cuda_probe.cuh"
#include "backend/cuda/cuda_rowfrag.cuh"
#include "backend/oai_swiglu.h"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kNormVec = 3;       // float4s per thread in norm_router: n_embd <= 3072
constexpr int kGuRows = 4;        // gate/up rows per block (one per warp)

// q/k/v's shared memory: xf [n] f32 | xq [n] | xd [n / 32] f32, then (staged rows) from
// this offset [8][2][n] quants and [8][2][n / 16 bytes] scales.
__host__ __device__ __forceinline__ size_t qkv_stage_offset(int64_t n) {
  return static_cast<size_t>((5 * n + n / 8 + 15) / 16 * 16);
}
__host__ __device__ __forceinline__ size_t qkv_smem(int64_t n, bool stage) {
  return qkv_stage_offset(n) + (stage ? static_cast<size_t>(kWarps * 2 * (n + n / 16)) : 0);
}
// down's shared memory: act_q [4][n_ff] | act_d [4][n_ff / 32] f32, then (staged MXFP4
// codes) [8][4][n_ff / 2].
__host__ __device__ __forceinline__ size_t down_act_smem(int64_t n_ff) {
  return static_cast<size_t>(4 * n_ff + 4 * (n_ff / 32) * 4);
}
__host__ __device__ __forceinline__ size_t down_smem(int64_t n_ff, bool stage) {
  return down_act_smem(n_ff) + (stage ? static_cast<size_t>(kWarps * 4 * (n_ff / 2)) : 0);
}

// grid (ceil(rows / 8)): warp w of block b owns row 8 b + w.
template <int TYPE, int C>
__global__ void __launch_bounds__(kThreads) matvec_pre_kernel(DevW w, const float* __restrict__ bias,
                                                              const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int n = static_cast<int>(w.n_in);
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + n);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool live = r < w.rows;
  RowFrag<C> f;
  float b = 0.f;
  if (live) {
    frag_load<TYPE, C>(f, w, r, lane);
    if (bias) b = bias[r];
  }
  BRASS_PROBE_MARK(4, 0);
  pdl_wait();
  pdl_trigger();
  BRASS_PROBE_MARK(4, 1);
  quantize_x_smem<TYPE == kMX>(x, n, xq, xd);
  __syncthreads();
  BRASS_PROBE_MARK(4, 2);
  if (!live) return;
  const float a = warp_sum(frag_dot<TYPE, C>(f, xq, xd, frag_chunks<TYPE>(n), lane));
  if (lane == 0) y[r] = a + b;
  BRASS_PROBE_MARK(4, 3);
}

// norm_router's residual: y (+ add) of the token as this thread's kNormVec float4s and
// the RMSNorm's factor (residual_inv_rms, cuda_common.cuh; sh: kWarps floats).
__device__ __forceinline__ float token_inv_rms(const MoeBlockP& p, int n4, float4 (&v)[kNormVec], float* sh) {
  return residual_inv_rms<kNormVec, kThreads>(reinterpret_cast<const float4*>(p.y),
                                              reinterpret_cast<const float4*>(p.add), n4, p.eps, v, sh);
}

// counters[0]: the block ticket.
template <bool MXO>
__global__ void __launch_bounds__(kThreads) norm_router_kernel(MoeBlockP p, int8_t* xq, float* xd,
                                                               unsigned* counters) {
  extern __shared__ __align__(16) float sv[];  // [n] xn (last block)
  __shared__ float red[kWarps];
  __shared__ float lg[kMaxExperts];
  __shared__ bool last;
  const int n4 = static_cast<int>(p.router.n_in / 4);
  const int e = blockIdx.x;
  const float4* wr = reinterpret_cast<const float4*>(p.router.q) + static_cast<int64_t>(e) * n4;
  const float4* nw4 = reinterpret_cast<const float4*>(p.norm);
  float4 w[kNormVec], nw[kNormVec], v[kNormVec];
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {  // static: issued before the wait (pdl_wait_fenced)
    const int j = threadIdx.x + i * kThreads;
    w[i] = j < n4 ? __ldg(wr + j) : make_float4(0, 0, 0, 0);
    nw[i] = j < n4 ? __ldg(nw4 + j) : make_float4(0, 0, 0, 0);
  }
  BRASS_PROBE_MARK(0, 0);
  pdl_wait_fenced();
  pdl_trigger();
  BRASS_PROBE_MARK(0, 1);
  const float inv = token_inv_rms(p, n4, v, red);
  float dot = 0.f;
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    const float4 xv = f4_scale(v[i], inv, nw[i]);
    dot += xv.x * w[i].x + xv.y * w[i].y + xv.z * w[i].z + xv.w * w[i].w;
  }
  dot = block_sum(dot, red);
  if (threadIdx.x == 0) {
    p.logits[e] = dot + (p.router_bias ? p.router_bias[e] : 0.f);
    last = ticket_acq_rel(&counters[0]) == gridDim.x - 1;
  }
  __syncthreads();
  BRASS_PROBE_MARK(0, 2);
  if (!last) return;
  for (int i = threadIdx.x; i < p.n_expert; i += kThreads) lg[i] = __ldcg(p.logits + i);
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    const int j = threadIdx.x + i * kThreads;
    if (j >= n4) continue;
    const float4 xv = f4_scale(v[i], inv, nw[i]);
    if (p.add) reinterpret_cast<float4*>(p.y)[j] = v[i];
    reinterpret_cast<float4*>(p.xn)[j] = xv;
    reinterpret_cast<float4*>(sv)[j] = xv;
  }
  __syncthreads();
  if (threadIdx.x < kWarp)  // the ids first: the next kernel's loads wait on them
    pick_experts(lg, static_cast<int>(p.n_expert), static_cast<int>(p.moe.k), const_cast<int32_t*>(p.moe.ids),
                 const_cast<float*>(p.moe.weights), static_cast<int>(threadIdx.x));
  BRASS_PROBE_MARK(0, 3);
  quantize_x_smem<MXO>(sv, 4 * n4, xq, xd);
  if (threadIdx.x == 0) counters[0] = 0u;  // graph replays start from 0
  BRASS_PROBE_MARK(0, 4);
}

// norm_router as one cluster of kNrCluster blocks (the default for n_expert <= 4 x 8;
// BRASS_CUDA_NR_CLUSTER=0 takes norm_router_kernel): block b holds the router rows of
// experts [kNrEpb b, kNrEpb b + kNrEpb) in registers (loaded before the wait), adds the
// residual and norms it as norm_router_kernel does, and writes its logits into every
// block's shared memory (lg, distributed shared memory). After one cluster barrier every
// block holds all the logits: warp 0 of block 0 picks the experts and stores them;
// block b writes its share of y, xn and of xq / xd (the 32-groups g with
// g % kNrCluster == b, quantized from registers as quantize_x_smem does it).
// Why: norm_router_kernel's block per expert meets through global memory: a ticket (a
// release fence and an atomic), the last block's read of the logits and the pick's
// softmax reading its global picks back. On the H200 (same calls): tg128 813-817 ->
// 824-826 tok/s, norm_router + gate/up 23.1 -> 22.1 us a layer. The cluster starts only as wo
// ends (probe: its 8 blocks found no room beside wo's, with the rows in registers or
// staged in 46 KB of shared memory alike), so its row loads overlap little.
// Numerics: norm_router_kernel's (the same sums in the same order, the same quantization).
constexpr int kNrCluster = 8, kNrEpb = 4, kNrMaxK = 8;
template <bool MXO>
__global__ void __launch_bounds__(kThreads) norm_router_cluster_kernel(MoeBlockP p, int8_t* xq, float* xd) {
  __shared__ float red[kWarps][kNrEpb];
  __shared__ float lg[kNrCluster * kNrEpb];  // every expert's logit, written by its block
  const int n4 = static_cast<int>(p.router.n_in / 4), n_expert = static_cast<int>(p.n_expert);
  const int b = static_cast<int>(blockIdx.x), tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const float4* nw4 = reinterpret_cast<const float4*>(p.norm);
  float4 w[kNrEpb][kNormVec], nw[kNormVec], v[kNormVec];
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {  // static: issued before the wait (pdl_wait_fenced)
    const int j = tid + i * kThreads;
    nw[i] = j < n4 ? __ldg(nw4 + j) : make_float4(0, 0, 0, 0);
#pragma unroll
    for (int e = 0; e < kNrEpb; ++e) {
      const int ex = b * kNrEpb + e;
      w[e][i] = j < n4 && ex < n_expert ? __ldg(reinterpret_cast<const float4*>(p.router.q) + int64_t(ex) * n4 + j)
                                        : make_float4(0, 0, 0, 0);
    }
  }
  const bool mine = tid < kNrEpb && b * kNrEpb + tid < n_expert;  // thread e < kNrEpb: expert kNrEpb b + e
  const float bias = mine && p.router_bias ? __ldg(p.router_bias + b * kNrEpb + tid) : 0.f;
  BRASS_PROBE_MARK(0, 0);
  pdl_wait_fenced();
  pdl_trigger();
  BRASS_PROBE_MARK(0, 1);
  const float inv = token_inv_rms(p, n4, v, &red[0][0]);
  float4 xv[kNormVec];
  float dot[kNrEpb] = {};
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    xv[i] = f4_scale(v[i], inv, nw[i]);
#pragma unroll
    for (int e = 0; e < kNrEpb; ++e)
      dot[e] += xv[i].x * w[e][i].x + xv[i].y * w[e][i].y + xv[i].z * w[e][i].z + xv[i].w * w[e][i].w;
  }
#pragma unroll
  for (int e = 0; e < kNrEpb; ++e) {  // block_sum's order, kNrEpb sums at once
    const float s = warp_sum(dot[e]);
    if (lane == 0) red[warp][e] = s;
  }
  __syncthreads();
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  if (mine) {
    float s = 0.f;
    for (int i = 0; i < kWarps; ++i) s += red[i][tid];
    const float l = s + bias;
    p.logits[b * kNrEpb + tid] = l;
#pragma unroll
    for (int r = 0; r < kNrCluster; ++r) cluster.map_shared_rank(lg, r)[b * kNrEpb + tid] = l;
  }
  cluster.sync();  // every block's logits in every block; every block has read y
  BRASS_PROBE_MARK(0, 2);
  if (b == 0 && warp == 0)
    pick_experts(lg, n_expert, static_cast<int>(p.moe.k), const_cast<int32_t*>(p.moe.ids),
                 const_cast<float*>(p.moe.weights), lane);
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    const int j = tid + i * kThreads;  // the 32-group j / 8 of float4 j: 8 neighbouring threads
    const bool own = j < n4 && (j / 8) % kNrCluster == b;
    if (own && p.add) reinterpret_cast<float4*>(p.y)[j] = v[i];
    store_xn_q8<MXO>(xv[i], j, own, p.xn, xq, xd);
  }
  BRASS_PROBE_MARK(0, 4);
  // No block leaves while another may still write its logits into it: they all did before
  // the barrier above, so nothing is left to wait for.
}

// grid (n_ff / 4, k), 4 warps: warp w owns ff row 4 b + w of slot blockIdx.y.
// counters: one per (slot, 32-row group), the ticket of the group's 8 blocks.
// XS: x (n_in <= kMaxXs) copied to shared memory while the rows load, so the dot products
// read it there instead of from L2 once the rows have arrived.
constexpr int kMaxXs = 4 * kNormVec * kThreads;  // the launch's n_embd bound
template <int TYPE, int C, bool XS, bool LUT = false, bool EF = false>
__global__ void __launch_bounds__(kGuRows * kWarp) gate_up_xq_kernel(DevW gate, DevW up, const float* __restrict__ gb,
                                                                     const float* __restrict__ ub,
                                                                     const int8_t* __restrict__ xq,
                                                                     const float* __restrict__ xd,
                                                                     const int32_t* __restrict__ ids, float* act,
                                                                     int8_t* act_q, float* act_d, unsigned* counters,
                                                                     float alpha, float limit) {
  __shared__ bool last;
  __shared__ __align__(16) int8_t sxq[XS ? kMaxXs : 16];
  __shared__ float sxd[XS ? kMaxXs / 32 : 1];
  __shared__ uint32_t slut[LUT ? 2 * kWarp : 1];  // LUT: MXFP4's tables a copy a lane (mx_lut_store)
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n_ff = gate.ne1, slot = blockIdx.y;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kGuRows + warp;
  BRASS_PROBE_ENTRY(1);
  BRASS_PROBE_MARK(1, 0);
  pdl_wait();  // the ids and x come from the kernel just before
  pdl_trigger();
  BRASS_PROBE_MARK(1, 1);
  const int64_t row = static_cast<int64_t>(ids[slot]) * n_ff + r;
#ifdef BRASS_PROBE
  if (threadIdx.x == 0) last = row == -1;  // a store that waits for the id
  BRASS_PROBE_MARK(1, 2);
#endif
  RowFrag<C> g, u;
  frag_load<TYPE, C, EF>(g, gate, row, lane);
  frag_load<TYPE, C, EF>(u, up, row, lane);
  const float bg = gb ? gb[row] : 0.f, bu = ub ? ub[row] : 0.f;
  const int nc = frag_chunks<TYPE>(gate.n_in);
  if constexpr (XS) {  // all loads of the copy in flight together (n / 16 <= 2 per thread)
    constexpr int kT = kGuRows * kWarp;
    const int n16 = static_cast<int>(gate.n_in / 16), n32 = static_cast<int>(gate.n_in / 32), t = threadIdx.x;
    const int4* x4 = reinterpret_cast<const int4*>(xq);
    const int4 a0 = t < n16 ? x4[t] : make_int4(0, 0, 0, 0);
    const int4 a1 = t + kT < n16 ? x4[t + kT] : make_int4(0, 0, 0, 0);
    const float d0 = t < n32 ? xd[t] : 0.f;
    if (t < n16) reinterpret_cast<int4*>(sxq)[t] = a0;
    if (t + kT < n16) reinterpret_cast<int4*>(sxq)[t + kT] = a1;
    if (t < n32) sxd[t] = d0;
    if constexpr (LUT) mx_lut_store(slut, t);
    __syncthreads();
  }
  const int8_t* xs = XS ? sxq : xq;
  const float* ds = XS ? sxd : xd;
  const MxLut lut = LUT ? mx_lut_load(slut, lane) : MxLut{};
  const float2 guv = frag_dot2<TYPE, C>(g, u, xs, ds, nc, lane, lut);  // x read once for both rows
  const float gv = warp_sum(guv.x), uv = warp_sum(guv.y);
  if (lane == 0) act[slot * n_ff + r] = oai_swiglu(gv + bg, uv + bu, alpha, limit);
  BRASS_PROBE_MARK(1, 3);
  // One ticket per block (the release is cumulative over the barrier): the group's 8th
  // block quantizes it. (A ticket per warp, 32 atomics on one counter, measured slower.)
  const int64_t grp = slot * (n_ff / 32) + r / 32;
  __syncthreads();
  if (threadIdx.x == 0) last = ticket_acq_rel(&counters[grp]) == 32 / kGuRows - 1;
  __syncthreads();
  BRASS_PROBE_MARK(1, 4);
  if (!last || warp != 0) return;
  const int64_t g0 = r / 32 * 32;
  quantize_group_warp<TYPE == kMX>(__ldcg(act + slot * n_ff + g0 + lane), lane, act_q + slot * n_ff + g0,
                                   act_d + grp);
  if (lane == 0) counters[grp] = 0u;  // graph replays start from 0
  BRASS_PROBE_MARK(1, 5);
}

// grid (ceil(n_embd / 8)), one token, k = 4: warp w of block b owns output row 8 b + w for
// all four experts. The ids were written two kernels back (complete once this kernel's
// pre-wait code runs: cuda_common.cuh), so the four rows load before the wait; after it
// the block copies the four slots' int8 activations to shared memory (one round trip).
// STAGE (MXFP4): the rows' codes go to shared memory by cp.async (their scales stay in
// registers), so the kernel fits 3 blocks an SM and all 360 blocks of gpt-oss load before
// the wait (in registers, 124 of them: 2 blocks an SM, 96 blocks after the wait).
// EF: the rows' loads evict first (BRASS_CUDA_MOE_EVICT_FIRST).
// PACED (STAGE): a warp asks for its next row only once the last is in, so an SM has ~35
// KB of down's rows in flight instead of ~140 KB. Its loads wait in order (ARCHITECTURE.md:
// an SM serves its loads in order), and gate/up's last blocks share these SMs: their
// tickets, group sums and quantization then queue behind a row a warp, not four. The
// first three rows are in by down's wait; the last is waited for just before its dot.
template <int TYPE, int C, bool STAGE, bool LUT = false, bool EF = false, bool PACED = false>
__global__ void __launch_bounds__(kThreads, STAGE ? 3 : 2)
    moe_down_pre_kernel(DevW down, const float* __restrict__ db, const int8_t* __restrict__ act_qd,
                        const int32_t* __restrict__ ids,
                        const float* __restrict__ wts, float* out, bool accumulate) {
  constexpr int K = 4;
  extern __shared__ __align__(16) uint8_t smem[];
  const int n = static_cast<int>(down.n_in);  // n_ff
  const int64_t n_embd = down.ne1;
  int8_t* sq = reinterpret_cast<int8_t*>(smem);       // [K][n]
  float* sd = reinterpret_cast<float*>(smem + K * n);  // [K][n / 32]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  // STAGE: [8 warps][K rows][n / 2] codes after the activations
  uint8_t* ws = smem + down_act_smem(n) + static_cast<size_t>(warp) * K * (n / 2);
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool live = r < n_embd;
  RowFrag<C> f[K];
  BRASS_PROBE_ENTRY(2);
  float b[K];
  if (live) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int64_t row = static_cast<int64_t>(ids[j]) * n_embd + r;
      if constexpr (STAGE) {
        const uint64_t pol = EF ? l2_policy_evict_first() : 0;
        for (int c = lane; c < n / 32; c += kWarp) {
          if constexpr (EF) cp_async16_hint(ws + j * (n / 2) + c * 16, down.q + row * (n / 2) + c * 16, pol);
          else cp_async16(ws + j * (n / 2) + c * 16, down.q + row * (n / 2) + c * 16);
        }
        if constexpr (PACED) {
          if (j + 1 < K) cp_async_wait_all();
        }
        frag_load_mx_scales<C, EF>(f[j], down, row, lane);
      } else {
        frag_load<TYPE, C>(f[j], down, row, lane);
      }
      b[j] = db ? db[row] : 0.f;
    }
  }
  BRASS_PROBE_MARK(2, 0);
  pdl_wait();
  pdl_trigger();
  BRASS_PROBE_MARK(2, 1);
  // act_q [K][n] and act_d [K][n / 32] lie back to back in global and shared memory: one
  // copy with all of a thread's loads in flight (two plain loops: ~5 round trips)
  copy_to_smem<4>(reinterpret_cast<int4*>(smem), reinterpret_cast<const int4*>(act_qd),
                  static_cast<int>(down_act_smem(n) / 16));
  // PACED: the last row's copies are waited for just before its dot (a lane reads only the
  // chunks it copied: no barrier), so the first rows' dots overlap its arrival
  if constexpr (STAGE && !PACED) cp_async_wait_all();
  __shared__ uint32_t slut[LUT ? 2 * kWarp : 1];  // LUT: as in gate_up_xq_kernel
  if constexpr (LUT) mx_lut_store(slut, threadIdx.x);
  __syncthreads();
  BRASS_PROBE_MARK(2, 2);
  if (!live) return;
  const int nc = frag_chunks<TYPE>(n);
  float part[K];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    if constexpr (PACED) {
      if (j == K - 1) cp_async_wait_all();
    }
    if constexpr (STAGE)
      part[j] = staged_dot_mx<C>(ws + j * (n / 2), f[j], sq + j * n, sd + j * (n / 32), nc, lane,
                                 LUT ? mx_lut_load(slut, lane) : MxLut{});
    else part[j] = frag_dot<TYPE, C>(f[j], sq + j * n, sd + j * (n / 32), nc, lane);
  }
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < K; ++j) sum += wts[j] * (warp_sum(part[j]) + b[j]);
  if (lane == 0) out[r] = accumulate ? out[r] + sum : sum;
  BRASS_PROBE_MARK(2, 3);
}

// grid (ceil(units / 8)), a warp per unit = (q / k / v head, pair j): rows j and j + half
// of the head, as qkv_kernel (cuda_attention.cu) for one token. Both rows load before the
// wait; after it every block norms the residual itself when p.norm is set (block 0 writes
// xn) and quantizes x into shared memory; then bias, RoPE and the K / V store.
// STAGE (Q8_0): the rows go to shared memory by cp.async instead of registers, so the
// kernel fits 3 blocks an SM and all of gpt-oss's 320 blocks load before the wait (in
// registers, 117 of them, 56 blocks ran as a second wave: ~5 us a layer on the H200).
template <int TYPE, int C, class KV, bool STAGE>
__global__ void __launch_bounds__(kThreads, STAGE ? 3 : 2) qkv_pre_kernel(QkvPreP p) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float red[kWarps];
  const int n = static_cast<int>(p.wq.n_in), n4 = n / 4;
  float* xf = reinterpret_cast<float*>(smem);            // [n] the normed input
  int8_t* xq = reinterpret_cast<int8_t*>(smem + 4 * n);  // [n]
  float* xd = reinterpret_cast<float*>(smem + 5 * n);    // [n / 32]
  // STAGE: [8 warps][2 rows][n] quants, then [8][2][n / 16 bytes] f16 scales
  uint8_t* wsq = smem + qkv_stage_offset(n) + static_cast<size_t>(threadIdx.x / kWarp) * 2 * n;
  uint8_t* wss = smem + qkv_stage_offset(n) + static_cast<size_t>(kWarps) * 2 * n +
                 static_cast<size_t>(threadIdx.x / kWarp) * 2 * (n / 16);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int half = p.head_dim / 2;
  const int unit = blockIdx.x * kWarps + warp;
  const bool live = unit < (p.n_head + 2 * p.n_head_kv) * half;
  int hh = unit / half;
  const int j = unit % half;
  const int kind = hh >= p.n_head + p.n_head_kv ? 2 : hh >= p.n_head ? 1 : 0;  // q, k, v
  // (by value with ternaries: a pointer into the kernel parameters would copy them to the stack)
  const DevW w = kind == 0 ? p.wq : kind == 1 ? p.wk : p.wv;
  const float* bias = kind == 0 ? p.bq : kind == 1 ? p.bk : p.bv;
  float* dst = kind == 0 ? p.q : kind == 1 ? p.k : p.v;
  const int nh = kind == 0 ? p.n_head : p.n_head_kv;
  hh -= kind == 0 ? 0 : kind == 1 ? p.n_head : p.n_head + p.n_head_kv;
  const int64_t r0 = static_cast<int64_t>(hh) * p.head_dim + j, r1 = r0 + half;
  BRASS_PROBE_ENTRY(3);
  RowFrag<STAGE ? 1 : C> f0, f1;
  float b0 = 0.f, b1 = 0.f, freq = 0.f;
  if (live) {  // static: before the wait
    if constexpr (STAGE) {
      for (int row = 0; row < 2; ++row) {
        const int64_t r = row ? r1 : r0;
        for (int c = lane; c < n / 16; c += kWarp) cp_async16(wsq + row * n + c * 16, w.q + r * n + c * 16);
        for (int c = lane; c < n / 64; c += kWarp) cp_async4(wss + row * (n / 16) + c * 4, w.s + r * (n / 16) + c * 4);
      }
    } else {
      frag_load<TYPE, C>(f0, w, r0, lane);
      frag_load<TYPE, C>(f1, w, r1, lane);
    }
    if (bias) { b0 = bias[r0]; b1 = bias[r1]; }
    freq = p.inv_freq[j];
  }
  float4 nw[kNormVec];
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    const int jj = threadIdx.x + i * kThreads;
    nw[i] = p.norm && jj < n4 ? __ldg(reinterpret_cast<const float4*>(p.norm) + jj) : make_float4(1, 1, 1, 1);
  }
  BRASS_PROBE_MARK(3, 0);
  pdl_wait();
  pdl_trigger();
  BRASS_PROBE_MARK(3, 1);
  float4 v[kNormVec];
  load_row_f4<kNormVec, kThreads>(reinterpret_cast<const float4*>(p.x), n4, v);
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
  float inv = 1.f;
  if (p.norm) {
    ss = block_sum(ss, red);
    inv = 1.0f / sqrtf(ss / static_cast<float>(n) + p.eps);
  }
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {
    const int jj = threadIdx.x + i * kThreads;
    if (jj >= n4) continue;
    const float4 xv = p.norm ? f4_scale(v[i], inv, nw[i]) : v[i];
    reinterpret_cast<float4*>(xf)[jj] = xv;
    if (p.norm && blockIdx.x == 0) reinterpret_cast<float4*>(p.xn)[jj] = xv;
  }
  __syncthreads();
  quantize_x_smem<TYPE == kMX>(xf, n, xq, xd);
  if constexpr (STAGE) cp_async_wait_all();
  __syncthreads();
  BRASS_PROBE_MARK(3, 2);
  if (!live) return;
  const int nc = frag_chunks<TYPE>(n);
  float a0, a1;
  if constexpr (STAGE) {
    const auto* s16 = reinterpret_cast<const unsigned short*>(wss);
    const float2 d = staged_dot2_q8<C>(wsq, s16, wsq + n, s16 + n / 32, xq, xd, nc, lane);
    a0 = warp_sum(d.x);
    a1 = warp_sum(d.y);
  } else {
    const float2 d = frag_dot2<TYPE, C>(f0, f1, xq, xd, nc, lane);
    a0 = warp_sum(d.x);
    a1 = warp_sum(d.y);
  }
  BRASS_PROBE_MARK(3, 4);
  if (lane != 0) return;
  float x0 = a0 + b0, x1 = a1 + b1;
  const int32_t pp = p.pos[0];
  if (kind < 2) {
    float sn, cs;
    sincosf(static_cast<float>(pp) * freq, &sn, &cs);
    cs *= p.mscale;
    sn *= p.mscale;
    const float y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
    x0 = y0;
    x1 = y1;
  }
  dst[r0] = x0;
  dst[r1] = x1;
  BRASS_PROBE_MARK(3, 3);
  if (kind > 0) {
    const int64_t row = static_cast<int64_t>(nh) * p.head_dim, slot = p.kv.row(pp);
    KV* c = static_cast<KV*>(kind == 1 ? p.kc : p.vc);
    store_kv(c + slot * row + r0, x0);
    store_kv(c + slot * row + r1, x1);
  }
}

// BRASS_CUDA_PRE=0 turns these kernels off.
bool pre_on() {
  static const bool on = knob_on("BRASS_CUDA_PRE");
  return on;
}

constexpr int kStageMaxSmem = 72 * 1024;  // staged kernels: 3 blocks an SM with room to spare

// Lets a staged kernel take over 48 KB of dynamic shared memory (once per kernel: one
// instantiation per kernel address). It asks for no carveout: with the most shared memory
// asked for (cudaSharedmemCarveoutMaxShared, as it was), tg128 was 890-892 tok/s against
// 897-900 without, @ d4096 815-816 against 839.5 (H200, one build, two rounds, session 39):
// an SM keeps its split of L1 and shared memory while it holds blocks, so the kernels
// whose blocks PDL placed beside these ones, the streaming ones, ran with the smallest L1.
// BRASS_CUDA_STAGE_CARVEOUT=<percent> asks for one (measurement knob).
template <auto Kernel>
void allow_staged_smem() {
  static const bool set = [] {
    BRASS_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStageMaxSmem));
    if (const int carve = env_count("BRASS_CUDA_STAGE_CARVEOUT", -1); carve >= 0)
      BRASS_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carve));
    return true;
  }();
  (void)set;
}

// BRASS_CUDA_MX_LUT=0: the one-token MoE's MXFP4 tables as constants (MxLut).
bool mx_lut_on() {
  static const bool on = knob_on("BRASS_CUDA_MX_LUT");
  return on;
}

// BRASS_CUDA_DOWN_STAGE=0: the MoE down rows in registers.
bool down_stage_on() {
  static const bool on = knob_on("BRASS_CUDA_DOWN_STAGE");
  return on;
}

size_t xq_smem(int64_t n) { return static_cast<size_t>(n + n / 32 * 4); }

// Matrices up to this size take the preloading mat-vec: the whole of a small one is in
// flight at once; for a big one (the 615 MB output head) most blocks start long after
// the wait and the streaming kernel's row pairs keep more bytes in flight per warp.
constexpr int64_t kPreMaxBytes = int64_t(64) << 20;

template <int TYPE, int C>
void matvec_pre_c(const MatmulP& a, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>((a.w.rows + kWarps - 1) / kWarps));
  launch_pdl(matvec_pre_kernel<TYPE, C>, grid, dim3(kThreads), xq_smem(a.w.n_in), st, a.w, a.bias, a.x, a.y);
}
template <int TYPE>
bool matvec_pre_t(const MatmulP& a, cudaStream_t st) {
  switch (frag_size(frag_chunks<TYPE>(a.w.n_in))) {
    case 1: matvec_pre_c<TYPE, 1>(a, st); return true;
    case 3: matvec_pre_c<TYPE, 3>(a, st); return true;
    case 6: matvec_pre_c<TYPE, 6>(a, st); return true;
    case 8: matvec_pre_c<TYPE, 8>(a, st); return true;
    default: return false;
  }
}

// Scratch layout of the MoE block: xq [n_embd] | xd [n_embd / 32] | act [4][n_ff] f32 |
// act_q [4][n_ff] | act_d [4][n_ff / 32] (each 16-byte aligned; act_d right after act_q
// as n_ff % 32 == 0: moe_down_pre_kernel copies both at once).
struct BlockScratch {
  int8_t* xq; float* xd; float* act; int8_t* act_q; float* act_d;
  int64_t bytes;
  BlockScratch(void* base, int64_t n_embd, int64_t n_ff) {
    auto al = [](int64_t b) { return (b + 15) / 16 * 16; };
    uint8_t* s = static_cast<uint8_t*>(base);
    int64_t o = 0;
    xq = reinterpret_cast<int8_t*>(s + o); o += al(n_embd);
    xd = reinterpret_cast<float*>(s + o); o += al(n_embd / 32 * 4);
    act = reinterpret_cast<float*>(s + o); o += al(4 * n_ff * 4);
    act_q = reinterpret_cast<int8_t*>(s + o); o += al(4 * n_ff);
    act_d = reinterpret_cast<float*>(s + o); o += al(4 * n_ff / 32 * 4);
    bytes = o;
  }
};

// The counters: [0] norm_router's (or wo_router's) ticket | gate/up's group tickets
// [k][n_ff / 32] | wo_router's 64-bit sums (at an even index: 8-byte aligned).
int64_t wo_router_acc_at(const MoeBlockP& a) { return (1 + a.moe.k * (a.moe.gate.ne1 / 32) + 1) / 2 * 2; }
unsigned long long* wo_router_acc(const MoeBlockP& a, unsigned* counters) {
  return reinterpret_cast<unsigned long long*>(counters + wo_router_acc_at(a));
}

// BRASS_CUDA_GU_XSMEM=0: gate/up reads x from global memory (measurement knob).
bool gu_xsmem_on() {
  static const bool on = knob_on("BRASS_CUDA_GU_XSMEM");
  return on;
}

template <int TYPE, int C>
void block_c(const MoeBlockP& a, const BlockScratch& s, unsigned* counters, cudaStream_t st) {
  const MoeP& m = a.moe;
  const int64_t n_embd = m.gate.n_in, n_ff = m.gate.ne1;
  static const bool cl = knob_on("BRASS_CUDA_NR_CLUSTER");
  if (a.wo_x) {  // wo fused in (launch_moe_block checked wo_router_fits); counters[0]: its ticket
    launch_wo_router(a, s.xq, s.xd, wo_router_acc(a, counters), counters, TYPE == kMX, st);
  } else if (cl && a.n_expert <= kNrCluster * kNrEpb && a.moe.k <= kNrMaxK) {
    launch_pdl_cluster(norm_router_cluster_kernel<TYPE == kMX>, dim3(kNrCluster), dim3(kThreads),
                       dim3(kNrCluster, 1, 1), 0, st, a, s.xq, s.xd);
  } else {
    launch_pdl(norm_router_kernel<TYPE == kMX>, dim3(static_cast<unsigned>(a.n_expert)), dim3(kThreads),
               static_cast<size_t>(n_embd) * 4, st, a, s.xq, s.xd, counters);
  }
  BRASS_CUDA_LAUNCHED();
  const bool lut = TYPE == kMX && mx_lut_on();
  // The experts' rows are read once a token: their loads ask the L2 to evict them first
  // (MXFP4 experts with the tables in registers, the gpt-oss path: LUT and EF are
  // instantiated for MXFP4 only, `lut` being false otherwise;
  // BRASS_CUDA_MOE_EVICT_FIRST=0: plain loads, measurement knob). H200, one build, three
  // rounds (session 41): tg128 893.0-897.5 -> 897.3-901.4 tok/s, @ d4096 843.9-847.1 ->
  // 847.9-849.2.
  static const bool ef = env_bool("BRASS_CUDA_MOE_EVICT_FIRST", true);
  auto gu = !gu_xsmem_on() ? gate_up_xq_kernel<TYPE, C, false>
            : lut && ef    ? gate_up_xq_kernel<TYPE, C, true, TYPE == kMX, TYPE == kMX>
            : lut          ? gate_up_xq_kernel<TYPE, C, true, TYPE == kMX>
                           : gate_up_xq_kernel<TYPE, C, true>;
  launch_pdl(gu, dim3(static_cast<unsigned>(n_ff / kGuRows), static_cast<unsigned>(m.k)),
             dim3(kGuRows * kWarp), 0, st, m.gate, m.up, m.gate_bias, m.up_bias, static_cast<const int8_t*>(s.xq),
             static_cast<const float*>(s.xd), static_cast<const int32_t*>(m.ids), s.act, s.act_q, s.act_d,
             counters + 1, m.alpha, m.limit);
  BRASS_CUDA_LAUNCHED();
  const dim3 gd(static_cast<unsigned>((n_embd + kWarps - 1) / kWarps));
  const auto* aq = static_cast<const int8_t*>(s.act_q);  // act_d follows (BlockScratch)
  float* out = a.accumulate ? a.y : m.out;
  if (TYPE == kMX && down_smem(n_ff, true) <= kStageMaxSmem && down_stage_on()) {
    constexpr bool kS = TYPE == kMX;
    // A row of a warp in flight at a time (the gpt-oss path's kernel; BRASS_CUDA_PACE_DOWN=0:
    // all four at once, measurement knob). H200, one build, three rounds (session 51): tg128
    // 916.8-922.6 -> 927.4-934.1 tok/s, @ d4096 856.0-857.2 -> 860.4-860.8; the late wait
    // for the last row +0.1-0.3% more. Two rows a warp, or a window of 512-byte pieces,
    // gained less; one piece at a time lost 4% (the rows came in too late).
    static const bool paced = env_count("BRASS_CUDA_PACE_DOWN", 1) > 0;
    auto down = lut && ef && paced ? moe_down_pre_kernel<TYPE, C, kS, kS, kS, kS>
                : lut && ef        ? moe_down_pre_kernel<TYPE, C, kS, kS, kS>
                : lut              ? moe_down_pre_kernel<TYPE, C, kS, kS>
                                   : moe_down_pre_kernel<TYPE, C, kS>;
    allow_staged_smem<moe_down_pre_kernel<TYPE, C, kS>>();
    allow_staged_smem<moe_down_pre_kernel<TYPE, C, kS, kS>>();
    allow_staged_smem<moe_down_pre_kernel<TYPE, C, kS, kS, kS>>();
    allow_staged_smem<moe_down_pre_kernel<TYPE, C, kS, kS, kS, kS>>();
    launch_pdl(down, gd, dim3(kThreads), down_smem(n_ff, true), st, m.down, m.down_bias,
               aq, m.ids, m.weights, out, a.accumulate);
  } else {
    launch_pdl(moe_down_pre_kernel<TYPE, C, false>, gd, dim3(kThreads), down_smem(n_ff, false), st, m.down,
               m.down_bias, aq, m.ids, m.weights, out, a.accumulate);
  }
  BRASS_CUDA_LAUNCHED();
}

template <int TYPE>
bool block_t(const MoeBlockP& a, const BlockScratch& s, unsigned* counters, cudaStream_t st) {
  const int c = frag_size(std::max(frag_chunks<TYPE>(a.moe.gate.n_in), frag_chunks<TYPE>(a.moe.down.n_in)));
  switch (c) {  // larger fragments (Q8_0 experts) would hold too many registers: the ops
    case 1: block_c<TYPE, 1>(a, s, counters, st); return true;
    case 3: block_c<TYPE, 3>(a, s, counters, st); return true;
    default: return false;
  }
}

// BRASS_CUDA_QKV_STAGE=0: q/k/v rows in registers (measurement knob; Q8_0 with n % 64 == 0
// stages them in shared memory otherwise).
bool qkv_stage_on() {
  static const bool on = knob_on("BRASS_CUDA_QKV_STAGE");
  return on;
}

template <int TYPE, int C, class KV, bool STAGE>
void qkv_pre_k(const QkvPreP& p, cudaStream_t st) {
  const int units = (p.n_head + 2 * p.n_head_kv) * (p.head_dim / 2);
  const dim3 grid(static_cast<unsigned>((units + kWarps - 1) / kWarps));
  const size_t sm = qkv_smem(p.wq.n_in, STAGE);
  if constexpr (STAGE) allow_staged_smem<qkv_pre_kernel<TYPE, C, KV, true>>();
  launch_pdl(qkv_pre_kernel<TYPE, C, KV, STAGE>, grid, dim3(kThreads), sm, st, p);
}

template <int TYPE, int C>
void qkv_pre_c(const QkvPreP& p, bool f16, cudaStream_t st) {
  const int64_t n = p.wq.n_in;
  const bool stage = TYPE == kQ8 && n % 64 == 0 && qkv_smem(n, true) <= kStageMaxSmem && qkv_stage_on();
  if (stage && f16) qkv_pre_k<TYPE, C, __half, TYPE == kQ8>(p, st);
  else if (stage) qkv_pre_k<TYPE, C, float, TYPE == kQ8>(p, st);
  else if (f16) qkv_pre_k<TYPE, C, __half, false>(p, st);
  else qkv_pre_k<TYPE, C, float, false>(p, st);
}
template <int TYPE>
bool qkv_pre_t(const QkvPreP& p, bool f16, cudaStream_t st) {
  switch (frag_size(frag_chunks<TYPE>(p.wq.n_in))) {
    case 1: qkv_pre_c<TYPE, 1>(p, f16, st); return true;
    case 3: qkv_pre_c<TYPE, 3>(p, f16, st); return true;
    case 6: qkv_pre_c<TYPE, 6>(p, f16, st); return true;
    default: return false;
  }
}

}  // namespace

bool launch_qkv_pre(const QkvPreP& p, DType kv_type, cudaStream_t st) {
  const int64_t n = p.wq.n_in;
  if (!pre_on() || p.wq.type != p.wk.type || p.wq.type != p.wv.type || p.wk.n_in != n || p.wv.n_in != n ||
      n % 32 != 0 || n > 4 * kNormVec * kThreads || p.head_dim % 2 != 0 || 5 * n + n / 8 > 40 * 1024 ||
      (kv_type != DType::F16 && kv_type != DType::F32))
    return false;
  bool done = false;
  if (p.wq.type == kQ8) done = qkv_pre_t<kQ8>(p, kv_type == DType::F16, st);
  else if (p.wq.type == kMX) done = qkv_pre_t<kMX>(p, kv_type == DType::F16, st);
  if (done) BRASS_CUDA_LAUNCHED();
  return done;
}

bool launch_matvec_pre(const MatmulP& a, cudaStream_t st) {
  if (!pre_on() || a.n_tok != 1 || a.w.n_in % 32 != 0 || xq_smem(a.w.n_in) > 40 * 1024) return false;
  const int64_t bytes = a.w.rows * (a.w.type == kQ8 ? a.w.n_in : a.w.n_in / 2);
  if (bytes > kPreMaxBytes) return false;
  bool done = false;
  if (a.w.type == kQ8) done = matvec_pre_t<kQ8>(a, st);
  else if (a.w.type == kMX) done = matvec_pre_t<kMX>(a, st);
  if (done) BRASS_CUDA_LAUNCHED();
  return done;
}

int64_t moe_block_scratch_bytes(const MoeBlockP& a) {
  return BlockScratch(nullptr, a.moe.gate.n_in, a.moe.gate.ne1).bytes;
}
int64_t moe_block_counters(const MoeBlockP& a) { return wo_router_acc_at(a) + 2 * wo_router_accs(); }

bool launch_moe_block(const MoeBlockP& a, void* scratch, unsigned* counters, cudaStream_t st) {
  const MoeP& m = a.moe;
  const int64_t n_embd = m.gate.n_in, n_ff = m.gate.ne1;
  if (!pre_on() || m.n_tok != 1 || m.k != 4 || a.router.type != kF32 || a.router.n_in != n_embd ||
      a.router.rows != a.n_expert || a.n_expert < m.k || a.n_expert > kMaxExperts || n_embd % 32 != 0 ||
      n_embd > 4 * kNormVec * kThreads || n_ff % 32 != 0 || m.down.n_in != n_ff || m.down.ne1 != n_embd ||
      m.up.type != m.gate.type || m.down.type != m.gate.type || 4 * n_ff + n_ff / 2 > 48 * 1024 ||
      (a.wo_x && !wo_router_fits(a)))  // (after the checks above, which it relies on)
    return false;
  const BlockScratch s(scratch, n_embd, n_ff);
  if (m.gate.type == kQ8) return block_t<kQ8>(a, s, counters, st);
  if (m.gate.type == kMX) return block_t<kMX>(a, s, counters, st);
  return false;
}

#ifdef BRASS_PROBE
// The marks of the last launch of each probed kernel as CSV: kernel,block,mark,ns.
void probe_dump(const char* path) { probe_write(path, true); }
#endif

}  // namespace brass::backend::cuda
