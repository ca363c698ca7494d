// The MoE block's prefix for 2..kMaxTok tokens (batched decode) in one kernel instead of
// three (add_rms_norm, the router matmul, router top-k), on MoeBlockP:
//   y += add; xn = rmsnorm(y) * norm; logits = xn router^T + router_bias;
//   ids / weights = top-k of the logits and their softmax (pick_experts).
// Grid (expert groups of kEpb, token groups of kTpb), 8 warps a block, a warp per token.
// Before the PDL wait a block copies its kEpb router rows and the norm weights (static)
// into shared memory (cp.async). After it each warp reads its token's y (+ add) twice
// from global memory (L1 / L2): once for the sum of squares, once to form xn and its
// kEpb dot products; lane e then writes logit e of the group. The last block of a token
// group (ticket per group) writes y (only then: the other blocks read it until their
// ticket) and xn, and picks each token's experts from the group's logits (read through
// L2) with pick_experts, as router_kernel does: the same ids on the same logits.
// Why: at 32-64 tokens a call the three kernels are latency-bound (~11 us a layer on the
// H200), one dependent launch each; this is one launch whose weights load before the wait.
// Numerics: the norm is rms_norm_kernel's formula ((v * inv) * w, inv = 1 / sqrtf(mean(v^2)
// + eps)); the sums (v^2 and the dots) are in another order than the composed kernels'.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kEpb = 4;             // experts per block
constexpr int kTpb = kWarps;        // tokens per block (a warp each)
constexpr int kMaxExperts = 128;    // lg's row; router_topk_warp's register path
constexpr int kMaxEmbd = 4096;      // shared memory: (kEpb + 1) * n_embd floats (80 KB)
constexpr int kMaxK = 8;
// Above this many tokens the router rows are re-read by too many token groups (prefill):
// the composed ops (a tiled f32 matmul from 512 tokens) are the better shape there.
constexpr int64_t kMaxTok = 256;
constexpr size_t kMaxSmem = static_cast<size_t>(kEpb + 1) * kMaxEmbd * sizeof(float);

__device__ __forceinline__ float4 load_row4(const float4* y, const float4* a, int j) {
  float4 v = y[j];
  if (a) {
    const float4 b = a[j];
    v = make_float4(v.x + b.x, v.y + b.y, v.z + b.z, v.w + b.w);
  }
  return v;
}
__device__ __forceinline__ float4 scale4(float4 v, float s, float4 w) {  // (v * s) * w, as rms_norm_kernel
  return make_float4(v.x * s * w.x, v.y * s * w.y, v.z * s * w.z, v.w * s * w.w);
}

// counters: one per token group (blockIdx.y), zero at rest; the group's last block resets it.
__global__ void __launch_bounds__(kThreads) norm_router_rows_kernel(MoeBlockP p, unsigned* counters) {
  extern __shared__ __align__(16) float4 sm4[];  // [kEpb][n4] router rows | [n4] norm weights
  __shared__ float lg[kTpb][kMaxExperts];         // last block: the group's logits
  __shared__ bool last;
  const int n4 = static_cast<int>(p.router.n_in / 4);
  const int n_expert = static_cast<int>(p.n_expert);
  const int e0 = static_cast<int>(blockIdx.x) * kEpb;
  const int ne = min(kEpb, n_expert - e0);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.y) * kTpb + warp;
  const bool live = t < p.moe.n_tok;  // warp-uniform
  float4* wsm = sm4;
  float4* nsm = sm4 + kEpb * n4;
  // static weights: before the wait
  const float4* wg = reinterpret_cast<const float4*>(p.router.q) + static_cast<int64_t>(e0) * n4;
  for (int i = static_cast<int>(threadIdx.x); i < kEpb * n4; i += kThreads) {
    if (i < ne * n4) cp_async16(wsm + i, wg + i);
    else wsm[i] = make_float4(0.f, 0.f, 0.f, 0.f);  // rows past n_expert: computed, never written
  }
  for (int i = static_cast<int>(threadIdx.x); i < n4; i += kThreads)
    cp_async16(nsm + i, reinterpret_cast<const float4*>(p.norm) + i);
  const float bias = p.router_bias && lane < ne ? __ldg(p.router_bias + e0 + lane) : 0.f;
  pdl_wait();
  pdl_trigger();
  const int64_t n = 4 * static_cast<int64_t>(n4);
  const float4* y4 = reinterpret_cast<const float4*>(p.y + t * n);
  const float4* a4 = p.add ? reinterpret_cast<const float4*>(p.add + t * n) : nullptr;
  float inv = 0.f;
  if (live) {  // pass 1 (while the copies land): the sum of squares
    float ss = 0.f;
#pragma unroll 4
    for (int j = lane; j < n4; j += kWarp) {
      const float4 v = load_row4(y4, a4, j);
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = warp_sum(ss);
    inv = 1.0f / sqrtf(ss / static_cast<float>(n) + p.eps);
  }
  cp_async_wait_all();
  __syncthreads();
  if (live) {  // pass 2: xn and its kEpb dot products
    float acc[kEpb] = {};
#pragma unroll 2
    for (int j = lane; j < n4; j += kWarp) {
      const float4 xv = scale4(load_row4(y4, a4, j), inv, nsm[j]);
#pragma unroll
      for (int e = 0; e < kEpb; ++e) {
        const float4 w = wsm[e * n4 + j];
        acc[e] += xv.x * w.x + xv.y * w.y + xv.z * w.z + xv.w * w.w;
      }
    }
    float mine = 0.f;
#pragma unroll
    for (int e = 0; e < kEpb; ++e) {
      const float s = warp_sum(acc[e]);
      if (lane == e) mine = s;
    }
    if (lane < ne) {
      p.logits[t * n_expert + e0 + lane] = mine + bias;
      __threadfence();  // (the ticket's release covers it too; cheap insurance for the last block's __ldcg)
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) last = ticket_acq_rel(&counters[blockIdx.y]) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  if (live) {
    for (int i = lane; i < n_expert; i += kWarp) lg[warp][i] = __ldcg(p.logits + t * n_expert + i);
    __syncwarp();
    // the ids first: the MoE's loads wait on them
    pick_experts(lg[warp], n_expert, static_cast<int>(p.moe.k), const_cast<int32_t*>(p.moe.ids) + t * p.moe.k,
                 const_cast<float*>(p.moe.weights) + t * p.moe.k, lane);
    float4* yw = reinterpret_cast<float4*>(p.y + t * n);
    float4* xw = reinterpret_cast<float4*>(p.xn + t * n);
#pragma unroll 4
    for (int j = lane; j < n4; j += kWarp) {
      const float4 v = load_row4(y4, a4, j);
      if (a4) yw[j] = v;
      xw[j] = scale4(v, inv, nsm[j]);
    }
  }
  if (threadIdx.x == 0) counters[blockIdx.y] = 0u;  // graph replays start from 0
}

bool al16(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; }

bool applies(const MoeBlockP& p) {
  const int64_t n = p.router.n_in, n_tok = p.moe.n_tok, k = p.moe.k;
  return p.router.type == kF32 && p.router.vec && p.router.rows == p.n_expert && p.n_expert >= 1 &&
         p.n_expert <= kMaxExperts && k >= 1 && k <= p.n_expert && k <= kMaxK && n > 0 && n % 4 == 0 &&
         n <= kMaxEmbd && n_tok >= 2 && n_tok <= kMaxTok && p.y && p.norm && p.xn && p.logits && p.moe.ids &&
         p.moe.weights && al16(p.router.q) && al16(p.y) && al16(p.norm) && al16(p.xn) && (!p.add || al16(p.add)) &&
         !(p.add && p.xn == p.y);  // the y write and the xn write would collide
}

}  // namespace

int64_t norm_router_rows_counters(const MoeBlockP& p) { return std::max<int64_t>(1, (p.moe.n_tok + kTpb - 1) / kTpb); }

bool launch_norm_router_rows(const MoeBlockP& p, unsigned* counters, cudaStream_t st) {
  if (!counters || !applies(p)) return false;
  static const bool attr = [] {  // over 48 KB of dynamic shared memory from 2400 wide
    BRASS_CUDA_CHECK(
        cudaFuncSetAttribute(norm_router_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
    return true;
  }();
  (void)attr;
  const dim3 grid(static_cast<unsigned>((p.n_expert + kEpb - 1) / kEpb),
                  static_cast<unsigned>((p.moe.n_tok + kTpb - 1) / kTpb));
  const size_t smem = static_cast<size_t>(kEpb + 1) * static_cast<size_t>(p.router.n_in) * sizeof(float);
  launch_pdl(norm_router_rows_kernel, grid, dim3(kThreads), smem, st, p, counters);
  BRASS_CUDA_LAUNCHED();
  return true;
}

}  // namespace brass::backend::cuda
