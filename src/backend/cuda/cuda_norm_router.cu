// The MoE block's prefix for 2..kMaxTok tokens (batched decode) in one kernel instead of
// three (add_rms_norm, the router matmul, router top-k), on MoeBlockP:
//   y += add; xn = rmsnorm(y) * norm; logits = xn router^T + router_bias;
//   ids / weights = top-k of the logits and their softmax (pick_experts).
// Grid (tokens, expert groups of kEpb), 256 threads: a block holds one token's row in
// registers (every load of it in flight at once: one round trip), so the norm is one block
// reduction and the kEpb dot products another. Before the PDL wait the block copies its
// router rows and the norm weights (static) into shared memory (cp.async). The last block
// of a token (ticket per token) reads the token's logits through L2, picks its experts with
// pick_experts as router_kernel does (the same ids on the same logits), and writes y (only
// then: the other blocks read it until their ticket) and xn from its registers.
// With a MoePrep (the grouped MMA MoE follows), the token's last block also quantizes xn
// into the MoE's int8 input (quantize_group_mma's arithmetic, on the registers), and the
// last token to finish (a second ticket) groups every slot by expert (group_by_expert):
// the MoE's grouping and quantization launches are gone.
// Why: at 32-64 tokens a call the three kernels are latency-bound (~11 us a layer on the
// H200), one dependent launch each. (A first version, a warp per token walking its row
// twice, took ~23 us a layer: ~20 dependent loads a lane.)
// Numerics: the norm is rms_norm_kernel's formula ((v * inv) * w, inv = 1 / sqrtf(mean(v^2)
// + eps)); the sums (v^2 and the dots) are in another order than the composed kernels'.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kEpb = 8;             // experts per block
constexpr int kVec = 4;             // float4 of the row a thread holds
constexpr int kMaxEmbd = 4 * kVec * kThreads;  // 4096; shared memory (kEpb + 1) * n_embd floats (144 KB)
constexpr int kMaxK = 8;
// Above this many tokens the router rows are re-read by too many blocks (prefill): the
// composed ops (a tiled f32 matmul from 512 tokens) are the better shape there.
constexpr int64_t kMaxTok = 256;
constexpr size_t kMaxSmem = static_cast<size_t>(kEpb + 1) * kMaxEmbd * sizeof(float);

__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// The token's xn (v: float4 j = tid + i * kThreads of the row) quantized per 32 as
// quantize_group_mma does (MXFP4 order, the negated twin n_tok * n after): a group is 8
// neighbouring threads' float4s.
__device__ __forceinline__ void quantize_row_regs(const float4 (&v)[kVec], int n4, int64_t t, int64_t n_tok,
                                                  const MoePrep& prep) {
  const int tid = threadIdx.x;
  const int64_t n = 4 * static_cast<int64_t>(n4);
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int j = tid + i * kThreads;
    int8_t q[4];
    const float d = quantize_f4_group8(v[i], q);  // (v is zero past the row)
    if (j >= n4) continue;
    const int64_t gi = t * (n / 32) + j / 8;
    const int l0 = (j % 8) * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t at = gi * 32 + mx_pos(l0 + e);
      prep.xq[at] = q[e];
      prep.xq[n_tok * n + at] = static_cast<int8_t>(-q[e]);
    }
    if (j % 8 == 0) prep.xd[gi] = __half2float(__float2half_rn(d));
  }
}

// counters: one per token (blockIdx.x) and one for the launch, zero at rest; the token's
// last block resets its own, the launch's last block the launch's.
__global__ void __launch_bounds__(kThreads, 1) norm_router_rows_kernel(MoeBlockP p, unsigned* counters,
                                                                       MoePrep prep) {
  extern __shared__ __align__(16) float4 sm4[];  // [kEpb][n4] router rows | [n4] norm weights
  __shared__ float red[kWarps][kEpb];
  __shared__ float lg[kMaxExperts];  // last block: the token's logits
  __shared__ int32_t gsh[2 * kMaxExperts];  // the launch's last block: grouping counters
  __shared__ bool last;
  const int n4 = static_cast<int>(p.router.n_in / 4);
  const int n_expert = static_cast<int>(p.n_expert);
  const int64_t t = blockIdx.x;
  const int e0 = static_cast<int>(blockIdx.y) * kEpb;
  const int ne = min(kEpb, n_expert - e0);
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  float4* wsm = sm4;
  float4* nsm = sm4 + kEpb * n4;
  // static weights: before the wait
  const float4* wg = reinterpret_cast<const float4*>(p.router.q) + static_cast<int64_t>(e0) * n4;
  for (int i = tid; i < kEpb * n4; i += kThreads) {
    if (i < ne * n4) cp_async16(wsm + i, wg + i);
    else wsm[i] = make_float4(0.f, 0.f, 0.f, 0.f);  // rows past n_expert: computed, never written
  }
  for (int i = tid; i < n4; i += kThreads) cp_async16(nsm + i, reinterpret_cast<const float4*>(p.norm) + i);
  const float bias = p.router_bias && tid < ne ? __ldg(p.router_bias + e0 + tid) : 0.f;
  pdl_wait();
  // With prep the MoE's gate/up follows: it is released only as the blocks exit (its
  // blocks would wait out the grouping's tail on the SMs).
  if (!prep.xq) pdl_trigger();
  const int64_t n = 4 * static_cast<int64_t>(n4);
  const float4* y4 = reinterpret_cast<const float4*>(p.y + t * n);
  const float4* a4 = p.add ? reinterpret_cast<const float4*>(p.add + t * n) : nullptr;
  float4 v[kVec];
  const float inv = residual_inv_rms<kVec, kThreads>(y4, a4, n4, p.eps, v, &red[0][0]);
  cp_async_wait_all();
  __syncthreads();
  float acc[kEpb] = {};
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int j = tid + i * kThreads;
    if (j >= n4) continue;
    v[i] = f4_scale(v[i], inv, nsm[j]);  // v is xn from here (y is rebuilt by the last block)
#pragma unroll
    for (int e = 0; e < kEpb; ++e) acc[e] += dot4(v[i], wsm[e * n4 + j]);
  }
#pragma unroll
  for (int e = 0; e < kEpb; ++e) {
    const float s = warp_sum(acc[e]);
    if (lane == 0) red[warp][e] = s;
  }
  __syncthreads();
  if (tid < ne) {
    float s = 0.f;
    for (int w = 0; w < kWarps; ++w) s += red[w][tid];
    p.logits[t * n_expert + e0 + tid] = s + bias;
  }
  // Ticket: the barrier orders the logit writes before thread 0's release; its acquire (and
  // the barrier after it) orders the other blocks' logits before this block's reads.
  __syncthreads();
  if (tid == 0) last = ticket_acq_rel(&counters[t]) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  if (warp == 0) {  // the ids first: the MoE's loads wait on them
    for (int i = lane; i < n_expert; i += kWarp) lg[i] = __ldcg(p.logits + t * n_expert + i);
    __syncwarp();
    pick_experts(lg, n_expert, static_cast<int>(p.moe.k), const_cast<int32_t*>(p.moe.ids) + t * p.moe.k,
                 const_cast<float*>(p.moe.weights) + t * p.moe.k, lane);
  }
  float4* yw = reinterpret_cast<float4*>(p.y + t * n);
  float4* xw = reinterpret_cast<float4*>(p.xn + t * n);
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int j = tid + i * kThreads;
    if (j >= n4) continue;
    if (a4) {  // y + add again (v holds xn now): the same two loads, the same sum
      const float4 yv = y4[j], b = a4[j];
      yw[j] = make_float4(yv.x + b.x, yv.y + b.y, yv.z + b.z, yv.w + b.w);
    }
    xw[j] = v[i];
  }
  if (tid == 0) counters[t] = 0u;  // graph replays start from 0
  if (!prep.xq) return;
  quantize_row_regs(v, n4, t, gridDim.x, prep);
  // Second ticket, as the first: this token's ids (warp 0) before the release.
  __syncthreads();
  if (tid == 0) last = ticket_acq_rel(&counters[gridDim.x]) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  group_by_expert(p.moe.ids, static_cast<int64_t>(gridDim.x) * p.moe.k, n_expert, prep.grp, gsh);
  if (tid == 0) counters[gridDim.x] = 0u;
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

int64_t norm_router_rows_counters(const MoeBlockP& p) { return std::max<int64_t>(1, p.moe.n_tok) + 1; }

bool launch_norm_router_rows(const MoeBlockP& p, unsigned* counters, cudaStream_t st, const MoePrep* prep) {
  if (!counters || !applies(p) || (prep && p.router.n_in % 32 != 0)) return false;
  static const bool attr = [] {  // over 48 KB of dynamic shared memory from 1366 wide
    BRASS_CUDA_CHECK(
        cudaFuncSetAttribute(norm_router_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
    return true;
  }();
  (void)attr;
  const dim3 grid(static_cast<unsigned>(p.moe.n_tok), static_cast<unsigned>((p.n_expert + kEpb - 1) / kEpb));
  const size_t smem = static_cast<size_t>(kEpb + 1) * static_cast<size_t>(p.router.n_in) * sizeof(float);
  launch_pdl(norm_router_rows_kernel, grid, dim3(kThreads), smem, st, p, counters, prep ? *prep : MoePrep{});
  BRASS_CUDA_LAUNCHED();
  return true;
}

}  // namespace brass::backend::cuda
