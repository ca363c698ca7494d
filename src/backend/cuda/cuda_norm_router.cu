// The MoE block's prefix for 2..kMaxTok tokens (batched decode) in one kernel instead of
// three (add_rms_norm, the router matmul, router top-k), on MoeBlockP:
//   y += add; xn = rmsnorm(y) * norm; logits = xn router^T + router_bias;
//   ids / weights = top-k of the logits and their softmax (pick_experts).
// Grid (token groups of T, expert groups of kEpb), 256 threads: a block holds its T tokens'
// rows in registers (every load in flight at once: one round trip), so the norms are one
// block reduction and the T x kEpb dot products another. Before the PDL wait the block
// copies its router rows and the norm weights (static) into shared memory (cp.async). The
// last block of a token group (a ticket per group) reads the group's logits through L2,
// picks each token's experts with pick_experts as router_kernel does (the same ids on the
// same logits) and writes y (only then: the other blocks read it until their ticket); xn
// is written by one block a token after its ticket (by the last block where xn aliases y).
// With a MoePrep (the grouped MMA MoE follows), xn's writer also quantizes it into the
// MoE's int8 input (quantize_group_mma's arithmetic, on the registers), and the slots are
// grouped by expert: as lists (MoePrep::cap), each group's last block places its tokens'
// slots with atomics on the experts' counts (zero at rest: the MoE's combine zeroes
// them); packed, the last group to finish (a second ticket) groups every slot
// (group_by_expert). The MoE's grouping and quantization launches are gone.
// Why: at 32-64 tokens a call the three kernels are latency-bound (~11 us a layer on the
// H200), one dependent launch each. (A first version, a warp per token walking its row
// twice, took ~23 us a layer: ~20 dependent loads a lane.)
// Numerics: the norm is rms_norm_kernel's formula ((v * inv) * w, inv = 1 / sqrtf(mean(v^2)
// + eps)); the sums (v^2 and the dots) are in another order than the composed kernels'.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_probe.cuh"

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
    if (j % 8 == 0) prep.xd[gi] = q8_stored_scale(d);
  }
}

// Per thread, the sums of N values over the block, each in block_sum's order (warp_sum,
// then warps 0..kWarps-1): the same bits as N block_sum calls, with two barriers in all.
template <int N>
__device__ __forceinline__ void block_sums(float (&v)[N], float (*sh)[N]) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float s = warp_sum(v[i]);
    if (lane == 0) sh[warp][i] = s;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float s = 0.f;
    for (int w = 0; w < kWarps; ++w) s += sh[w][i];
    v[i] = s;
  }
  __syncthreads();
}

// Grid (ceil(n_tok / T), expert groups of kEpb): block (x, g) takes tokens [T x, T x + T)
// against experts [kEpb g, kEpb g + kEpb), so its router rows (copied to shared memory)
// serve T tokens. At T = 1 and 64 tokens every SM copied ~208 KB of router rows from L2
// (2 blocks of 104 KB; ~27 MB a launch), the blocks ~4 us after their wait (probe marks,
// H100); T = 2 halves that: x32 / x64 +1.4 / +0.3% (T = 4: 64 blocks, the group's last
// block then writes 4 tokens' y, a 7.7 us tail: x32 -1%).
// counters: one per token group (blockIdx.x) and one for the launch (counters[gridDim.x],
// the packed grouping's second ticket), zero at rest; a group's last block resets its own,
// the launch's last block the launch's.
// xn_early: xn aliases neither y nor add, so block g writes xn (and its quantized copy) of
// the group's tokens g, g + gridDim.y, ... once it has drawn its ticket (a block that is
// not the last has nothing else to do); otherwise the group's last block writes every
// token's xn once no block reads y any more.
// Every sum is in the same order for every T: the outputs are the same bits.
template <int T>
__global__ void __launch_bounds__(kThreads, 1) norm_router_rows_kernel(MoeBlockP p, unsigned* counters,
                                                                       MoePrep prep, bool xn_early) {
  extern __shared__ __align__(16) float4 sm4[];  // [kEpb][n4] router rows | [n4] norm weights
  __shared__ float red[kWarps][T * kEpb];
  __shared__ float lg[T][kMaxExperts];      // last block: the group's logits
  __shared__ int32_t gsh[2 * kMaxExperts];  // the launch's last block: grouping counters
  __shared__ bool last;
  const int n4 = static_cast<int>(p.router.n_in / 4);
  const int n_expert = static_cast<int>(p.n_expert);
  const int64_t n_tok = p.moe.n_tok, t0 = static_cast<int64_t>(blockIdx.x) * T;
  const int nt = static_cast<int>(n_tok - t0 < T ? n_tok - t0 : T);  // the group's tokens
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
  BRASS_PROBE_MARK(7, 0);
  pdl_wait();
  BRASS_PROBE_MARK(7, 1);
  // With prep the MoE's gate/up follows: it is released only as the blocks exit (its
  // blocks would wait out the grouping's tail on the SMs).
  if (!prep.xq) pdl_trigger();
  const int64_t n = 4 * static_cast<int64_t>(n4);
  // The group's rows y (+ add), every load in flight at once (residual_inv_rms's
  // arithmetic, T rows at a time; a token past n_tok reads token t0's row, never written).
  float4 v[T][kVec];
  float inv[T];
#pragma unroll
  for (int tt = 0; tt < T; ++tt) {
    const int64_t t = t0 + (tt < nt ? tt : 0);
    load_row_f4<kVec, kThreads>(reinterpret_cast<const float4*>(p.y + t * n), n4, v[tt]);
  }
  if (p.add) {
    float4 a[T][kVec];
#pragma unroll
    for (int tt = 0; tt < T; ++tt) {
      const int64_t t = t0 + (tt < nt ? tt : 0);
      load_row_f4<kVec, kThreads>(reinterpret_cast<const float4*>(p.add + t * n), n4, a[tt]);
    }
#pragma unroll
    for (int tt = 0; tt < T; ++tt)
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[tt][i] = make_float4(v[tt][i].x + a[tt][i].x, v[tt][i].y + a[tt][i].y,
                                                          v[tt][i].z + a[tt][i].z, v[tt][i].w + a[tt][i].w);
  }
#pragma unroll
  for (int tt = 0; tt < T; ++tt) {
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      ss += v[tt][i].x * v[tt][i].x + v[tt][i].y * v[tt][i].y + v[tt][i].z * v[tt][i].z + v[tt][i].w * v[tt][i].w;
    inv[tt] = ss;
  }
  block_sums<T>(inv, reinterpret_cast<float(*)[T]>(&red[0][0]));
#pragma unroll
  for (int tt = 0; tt < T; ++tt) inv[tt] = 1.0f / sqrtf(inv[tt] / static_cast<float>(n) + p.eps);
  cp_async_wait_all();
  __syncthreads();
  BRASS_PROBE_MARK(7, 2);
  float acc[T][kEpb] = {};
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int j = tid + i * kThreads;
    if (j >= n4) continue;
    const float4 nw = nsm[j];
#pragma unroll
    for (int tt = 0; tt < T; ++tt) v[tt][i] = f4_scale(v[tt][i], inv[tt], nw);  // v is xn from here
#pragma unroll
    for (int e = 0; e < kEpb; ++e) {
      const float4 w = wsm[e * n4 + j];
#pragma unroll
      for (int tt = 0; tt < T; ++tt) acc[tt][e] += dot4(v[tt][i], w);
    }
  }
  block_sums<T * kEpb>(reinterpret_cast<float(&)[T * kEpb]>(acc), red);
  if (tid < ne)
#pragma unroll
    for (int tt = 0; tt < T; ++tt) {
      float l = 0.f;  // acc[tt][tid], picked without a dynamic index (that puts acc in local memory)
#pragma unroll
      for (int e = 0; e < kEpb; ++e) l = e == tid ? acc[tt][e] : l;
      if (tt < nt) p.logits[(t0 + tt) * n_expert + e0 + tid] = l + bias;
    }
  // Token tt's xn (not read here) and its quantized copy.
  auto write_xn = [&](int tt) {
    const int64_t t = t0 + tt;
    float4* xw = reinterpret_cast<float4*>(p.xn + t * n);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int j = tid + i * kThreads;
      if (j < n4) xw[j] = v[tt][i];
    }
    if (prep.xq) quantize_row_regs(v[tt], n4, t, n_tok, prep);
  };
  auto write_mine = [&] {  // (after the ticket: the group's last block is not kept waiting)
#pragma unroll
    for (int tt = 0; tt < T; ++tt)
      if (tt < nt && tt % static_cast<int>(gridDim.y) == static_cast<int>(blockIdx.y)) write_xn(tt);
  };
  if (prep.cap && blockIdx.x == 0 && blockIdx.y == 0)  // the lists' starts (the same every launch)
    for (int e = tid; e <= n_expert; e += kThreads) prep.grp.offsets[e] = static_cast<int32_t>(e * prep.cap);
  // Ticket: the barrier orders the logit writes before thread 0's release; its acquire (and
  // the barrier after it) orders the other blocks' logits before this block's reads.
  __syncthreads();
  if (tid == 0) last = ticket_acq_rel(&counters[blockIdx.x]) == gridDim.y - 1;
  __syncthreads();
  BRASS_PROBE_MARK(7, 3);
  if (!last) {
    if (xn_early) write_mine();
    return;
  }
  if (warp < nt) {  // the ids first (warp tt: token tt): the MoE's loads wait on them
    const int64_t t = t0 + warp;
    for (int i = lane; i < n_expert; i += kWarp) lg[warp][i] = __ldcg(p.logits + t * n_expert + i);
    __syncwarp();
    const int k = static_cast<int>(p.moe.k);
    int32_t* ids = const_cast<int32_t*>(p.moe.ids) + t * k;
    pick_experts(lg[warp], n_expert, k, ids, const_cast<float*>(p.moe.weights) + t * k, lane);
    if (prep.cap) __syncwarp();  // (the ids' writer may be another lane)
    if (prep.cap && lane < k) {    // slot j of the token at the end of its expert's list
      const int e = ids[lane];
      const int32_t at = static_cast<int32_t>(e * prep.cap) + atomicAdd(prep.grp.counts + e, 1);
      const int32_t s = static_cast<int32_t>(t * k + lane);
      prep.grp.perm[at] = s;
      prep.grp.inv[s] = at;
    }
  }
#pragma unroll
  for (int tt = 0; tt < T; ++tt) {
    if (tt >= nt) continue;
    if (p.add) {  // y + add again (v holds xn now): the same two loads, the same sum
      const float4* y4 = reinterpret_cast<const float4*>(p.y + (t0 + tt) * n);
      const float4* a4 = reinterpret_cast<const float4*>(p.add + (t0 + tt) * n);
      float4* yw = reinterpret_cast<float4*>(p.y + (t0 + tt) * n);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int j = tid + i * kThreads;
        if (j >= n4) continue;
        const float4 yv = y4[j], b = a4[j];
        yw[j] = make_float4(yv.x + b.x, yv.y + b.y, yv.z + b.z, yv.w + b.w);
      }
    }
    if (!xn_early) write_xn(tt);
  }
  if (xn_early) write_mine();
  if (tid == 0) counters[blockIdx.x] = 0u;  // graph replays start from 0
  BRASS_PROBE_MARK(7, 4);
  if (!prep.xq || prep.cap) return;
  // Second ticket, as the first: this group's ids (warps 0..nt-1) before the release.
  __syncthreads();
  if (tid == 0) last = ticket_acq_rel(&counters[gridDim.x]) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  group_by_expert(p.moe.ids, n_tok * p.moe.k, n_expert, prep.grp, gsh);
  if (tid == 0) counters[gridDim.x] = 0u;
  BRASS_PROBE_MARK(7, 5);
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

#ifdef BRASS_PROBE
// norm_router_rows' marks (kernel 7), appended to the CSV of probe_dump.
void probe_dump_rows(const char* path) { probe_write(path, false); }
#endif

int64_t norm_router_rows_counters(const MoeBlockP& p) { return std::max<int64_t>(1, p.moe.n_tok) + 1; }

namespace {

// BRASS_CUDA_NR_TOK=1|2|4 sets the tokens a block (measurement knob); by default 2 from
// 24 tokens, else 1.
int rows_tokens_per_block(int64_t n_tok) {
  static const int knob = env_int("BRASS_CUDA_NR_TOK", 0);
  if (knob == 1 || knob == 2 || knob == 4) return knob;
  return n_tok >= 24 ? 2 : 1;
}

template <int T>
void launch_rows_t(const MoeBlockP& p, unsigned* counters, cudaStream_t st, const MoePrep& prep) {
  static const bool attr = [] {  // over 48 KB of dynamic shared memory from 1366 wide
    BRASS_CUDA_CHECK(
        cudaFuncSetAttribute(norm_router_rows_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
    return true;
  }();
  (void)attr;
  const dim3 grid(static_cast<unsigned>((p.moe.n_tok + T - 1) / T),
                  static_cast<unsigned>((p.n_expert + kEpb - 1) / kEpb));
  const size_t smem = static_cast<size_t>(kEpb + 1) * static_cast<size_t>(p.router.n_in) * sizeof(float);
  const bool xn_early = p.xn != p.y && p.xn != p.add;
  launch_pdl(norm_router_rows_kernel<T>, grid, dim3(kThreads), smem, st, p, counters, prep, xn_early);
}

}  // namespace

bool launch_norm_router_rows(const MoeBlockP& p, unsigned* counters, cudaStream_t st, const MoePrep* prep,
                             int tokens_per_block) {
  if (!counters || !applies(p) || (prep && p.router.n_in % 32 != 0)) return false;
  const int tpb = tokens_per_block ? tokens_per_block : rows_tokens_per_block(p.moe.n_tok);
  const MoePrep pr = prep ? *prep : MoePrep{};
  if (tpb == 4) launch_rows_t<4>(p, counters, st, pr);
  else if (tpb == 2) launch_rows_t<2>(p, counters, st, pr);
  else launch_rows_t<1>(p, counters, st, pr);
  BRASS_CUDA_LAUNCHED();
  return true;
}

}  // namespace brass::backend::cuda
