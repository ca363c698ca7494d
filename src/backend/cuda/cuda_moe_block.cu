// The MoE block of one decode token (MoeBlockArgs) in three kernels instead of five
// (add_rms_norm, router matmul, router top-k, gate/up, down):
// 1. norm_router: grid (n_expert). Every block adds the residual and norms it (same
//    bits in every block), then computes its expert's router logit; the last block to
//    finish (ticket) writes the residual, xn and its int8 copy (Q8_0 per 32, MXFP4 order
//    for MXFP4 experts) and picks the top k with the router kernel's warp routine. The
//    residual is written only once every block has read it.
// 2. gate/up: a warp per (slot, ff row), 4 per block: both rows' fragments and the int8
//    x from global memory in flight together, no shared memory; writes the f32 SwiGLU
//    output.
// 3. down: the four experts' rows load before the PDL wait (ids come from kernel 1, two
//    back); after it the block quantizes the four slots' activations into shared memory
//    (Q8_0 per 32, bit-identical to quant::quantize_row) and each warp finishes a row.
// Numerics: the reference composition with x and the SwiGLU output on the Q8_0 round
// trip (the q8x MoE twin); router logits and the norm differ from it by summation order.
#include <algorithm>

#include "backend/cuda/cuda_rowfrag.cuh"
#include "backend/oai_swiglu.h"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxExperts = 128;  // router_topk_warp's register path

__device__ __forceinline__ float block_sum256(float v, float* sh) {
  v = warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) s += sh[i];
  __syncthreads();
  return s;
}

template <bool MXO>
__global__ void __launch_bounds__(kThreads) norm_router_kernel(MoeBlockP p, int8_t* xq, float* xd,
                                                               unsigned* counter) {
  extern __shared__ __align__(16) float sv[];  // [n] y + add, later xn
  __shared__ float red[kWarps];
  __shared__ float lg[kMaxExperts];
  __shared__ bool last;
  const int n = static_cast<int>(p.router.n_in);
  const int e = blockIdx.x;
  const float* wr = reinterpret_cast<const float*>(p.router.q) + static_cast<int64_t>(e) * n;
  if (threadIdx.x == 0) {  // static: this block's router row and the norm weights
    prefetch_l2(wr, n * 4);
    prefetch_l2(p.norm, n * 4);
  }
  pdl_wait();
  pdl_trigger();
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = p.y[i] + (p.add ? p.add[i] : 0.f);
    sv[i] = v;
    ss += v * v;
  }
  ss = block_sum256(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + p.eps);
  float dot = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) dot += sv[i] * inv * p.norm[i] * wr[i];
  dot = block_sum256(dot, red);
  if (threadIdx.x == 0) {
    p.logits[e] = dot + (p.router_bias ? p.router_bias[e] : 0.f);
    __threadfence();
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = sv[i], xv = v * inv * p.norm[i];
    if (p.add) p.y[i] = v;
    p.xn[i] = xv;
    sv[i] = xv;
  }
  for (int i = threadIdx.x; i < p.n_expert; i += kThreads) lg[i] = __ldcg(p.logits + i);
  __syncthreads();
  quantize_x_smem<MXO>(sv, n, xq, xd);
  if (threadIdx.x < kWarp)
    router_topk_warp(lg, p.n_expert, p.moe.k, const_cast<int32_t*>(p.moe.ids), const_cast<float*>(p.moe.weights),
                     static_cast<int>(threadIdx.x));
  if (threadIdx.x == 0) *counter = 0u;  // graph replays start from 0
}

// grid (n_ff / 4, k), 4 warps: warp w owns ff row 4 b + w of slot blockIdx.y.
template <int TYPE, int C>
__global__ void __launch_bounds__(4 * kWarp) gate_up_xq_kernel(DevW gate, DevW up, const float* __restrict__ gb,
                                                               const float* __restrict__ ub,
                                                               const int8_t* __restrict__ xq,
                                                               const float* __restrict__ xd,
                                                               const int32_t* __restrict__ ids, float* act,
                                                               float alpha, float limit) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n_ff = gate.ne1, slot = blockIdx.y;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 4 + warp;
  pdl_wait();  // the ids and x come from the kernel just before
  pdl_trigger();
  const int64_t row = static_cast<int64_t>(ids[slot]) * n_ff + r;
  RowFrag<C> g, u;
  frag_load<TYPE, C>(g, gate, row, lane);
  frag_load<TYPE, C>(u, up, row, lane);
  const float bg = gb ? gb[row] : 0.f, bu = ub ? ub[row] : 0.f;
  const int nc = frag_chunks<TYPE>(gate.n_in);
  const float gv = warp_sum(frag_dot<TYPE, C>(g, xq, xd, nc, lane));
  const float uv = warp_sum(frag_dot<TYPE, C>(u, xq, xd, nc, lane));
  if (lane == 0) act[slot * n_ff + r] = oai_swiglu(gv + bg, uv + bu, alpha, limit);
}

// grid (ceil(n_embd / 8)), k = 4: warp w of block b owns output row 8 b + w.
template <int TYPE, int C>
__global__ void __launch_bounds__(kThreads) down_q_kernel(DevW down, const float* __restrict__ db,
                                                          const float* __restrict__ act,
                                                          const int32_t* __restrict__ ids,
                                                          const float* __restrict__ wts, float* out) {
  constexpr int K = 4;
  extern __shared__ __align__(16) uint8_t smem[];
  const int n = static_cast<int>(down.n_in);  // n_ff
  const int64_t n_embd = down.ne1;
  int8_t* sq = reinterpret_cast<int8_t*>(smem);       // [K][n]
  float* sd = reinterpret_cast<float*>(smem + K * n);  // [K][n / 32]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool live = r < n_embd;
  RowFrag<C> f[K];
  float b[K];
  if (live) {
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int64_t row = static_cast<int64_t>(ids[j]) * n_embd + r;
      frag_load<TYPE, C>(f[j], down, row, lane);
      b[j] = db ? db[row] : 0.f;
    }
  }
  pdl_wait();
  pdl_trigger();
  quantize_x_smem<TYPE == kMX>(act, K * n, sq, sd);  // slots are whole groups: per slot as one call
  __syncthreads();
  if (!live) return;
  const int nc = frag_chunks<TYPE>(n);
  float part[K];
#pragma unroll
  for (int j = 0; j < K; ++j) part[j] = frag_dot<TYPE, C>(f[j], sq + j * n, sd + j * (n / 32), nc, lane);
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < K; ++j) sum += wts[j] * (warp_sum(part[j]) + b[j]);
  if (lane == 0) out[r] = sum;
}

template <int TYPE, int C>
void block_c(const MoeBlockP& a, int8_t* xq, float* xd, float* act, unsigned* counter, cudaStream_t st) {
  const MoeP& m = a.moe;
  const int64_t n_embd = m.gate.n_in, n_ff = m.gate.ne1;
  launch_pdl(norm_router_kernel<TYPE == kMX>, dim3(static_cast<unsigned>(a.n_expert)), dim3(kThreads),
             static_cast<size_t>(n_embd) * 4, st, a, xq, xd, counter);
  BRASS_CUDA_LAUNCHED();
  launch_pdl(gate_up_xq_kernel<TYPE, C>, dim3(static_cast<unsigned>(n_ff / 4), static_cast<unsigned>(m.k)),
             dim3(4 * kWarp), 0, st, m.gate, m.up, m.gate_bias, m.up_bias, static_cast<const int8_t*>(xq),
             static_cast<const float*>(xd), static_cast<const int32_t*>(m.ids), act, m.alpha, m.limit);
  BRASS_CUDA_LAUNCHED();
  const size_t s3 = static_cast<size_t>(4 * n_ff + 4 * (n_ff / 32) * 4);
  launch_pdl(down_q_kernel<TYPE, C>, dim3(static_cast<unsigned>((n_embd + kWarps - 1) / kWarps)), dim3(kThreads), s3,
             st, m.down, m.down_bias, static_cast<const float*>(act), m.ids, m.weights, m.out);
  BRASS_CUDA_LAUNCHED();
}

template <int TYPE>
bool block_t(const MoeBlockP& a, int8_t* xq, float* xd, float* act, unsigned* counter, cudaStream_t st) {
  const int c = frag_size(std::max(frag_chunks<TYPE>(a.moe.gate.n_in), frag_chunks<TYPE>(a.moe.down.n_in)));
  switch (c) {
    case 1: block_c<TYPE, 1>(a, xq, xd, act, counter, st); return true;
    case 3: block_c<TYPE, 3>(a, xq, xd, act, counter, st); return true;
    default: return false;
  }
}

}  // namespace

int64_t moe_block_scratch_bytes(const MoeBlockP& a) {
  const int64_t n = a.moe.gate.n_in;
  return (n + 15) / 16 * 16 + (n / 32) * 4 + 16 + a.moe.k * a.moe.gate.ne1 * 4;
}

bool launch_moe_block(const MoeBlockP& a, void* scratch, unsigned* counter, cudaStream_t st) {
  const MoeP& m = a.moe;
  const int64_t n_embd = m.gate.n_in, n_ff = m.gate.ne1;
  if (m.n_tok != 1 || m.k != 4 || a.router.type != kF32 || a.router.n_in != n_embd || a.router.rows != a.n_expert ||
      a.n_expert < m.k || a.n_expert > kMaxExperts || n_embd % 32 != 0 || n_ff % 32 != 0 || m.down.n_in != n_ff ||
      m.up.type != m.gate.type || m.down.type != m.gate.type || n_embd * 4 > 48 * 1024 ||
      4 * n_ff + n_ff / 2 > 48 * 1024)
    return false;
  uint8_t* s = static_cast<uint8_t*>(scratch);
  int8_t* xq = reinterpret_cast<int8_t*>(s);
  float* xd = reinterpret_cast<float*>(s + (n_embd + 15) / 16 * 16);
  float* act = reinterpret_cast<float*>(s + (n_embd + 15) / 16 * 16 + ((n_embd / 32) * 4 + 15) / 16 * 16);
  if (m.gate.type == kQ8) return block_t<kQ8>(a, xq, xd, act, counter, st);
  if (m.gate.type == kMX) return block_t<kMX>(a, xq, xd, act, counter, st);
  return false;
}

}  // namespace brass::backend::cuda
