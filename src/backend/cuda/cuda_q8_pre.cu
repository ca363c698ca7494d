// Single-token int8-activation kernels whose weight loads are all issued at once, and
// for static weights before the PDL wait (cuda_rowfrag.cuh): the dense mat-vec (wo and
// other matrices that fit in L2 many times over) and the two MoE kernels of one decode
// token. Why: the streaming q8x kernels (cuda_q8.cu) are latency-bound at one token:
// each first waits for the previous kernel, then quantizes x, then walks its rows a pair
// at a time (one DRAM round trip each). Measured on the H200 (ncu, gpt-oss-20b, one
// token): wo 12.7 us for 12.6 MB, MoE gate/up 25 us for 35 MB, down 13.5 us for 18 MB.
// Here a warp's rows are in flight together: for wo and the MoE down rows (experts known
// two kernels back) while the previous kernel runs; for gate/up right after the expert
// ids arrive, with the activation quantization overlapping the loads.
// Same numerics as cuda_q8.cu (each lane sums its chunks in the same order), so the
// CPU twins and tests of the q8x ops apply unchanged.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_rowfrag.cuh"
#include "backend/oai_swiglu.h"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;

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
  pdl_wait();
  pdl_trigger();
  quantize_x_smem<TYPE == kMX>(x, n, xq, xd);
  __syncthreads();
  if (!live) return;
  const float a = warp_sum(frag_dot<TYPE, C>(f, xq, xd, frag_chunks<TYPE>(n), lane));
  if (lane == 0) y[r] = a + b;
}

// grid (n_ff / 32, n_slots), 32 / RW warps: a block computes 32 consecutive SwiGLU outputs
// (one Q8_0 group) of one slot, warp w rows w, w + 32 / RW, ...; writes them quantized
// (act_q in MXFP4 order for MXFP4, act_d) exactly as moe_gate_up_q8x_kernel does.
template <int TYPE, int C, int RW>
__global__ void __launch_bounds__(32 / RW * kWarp) moe_gate_up_pre_kernel(DevW gate, DevW up,
                                                                          const float* __restrict__ gb,
                                                                          const float* __restrict__ ub,
                                                                          const float* __restrict__ x,
                                                                          const int32_t* __restrict__ ids, int8_t* act_q,
                                                                          float* act_d, int64_t k, float alpha,
                                                                          float limit) {
  constexpr int NW = 32 / RW;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float grp[32];
  const int n = static_cast<int>(gate.n_in);
  const int64_t n_ff = gate.ne1;
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + n);
  const int64_t slot = blockIdx.y;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * 32;
  pdl_wait();  // the expert ids come from the kernel just before
  pdl_trigger();
  const int64_t e = ids[slot];
  RowFrag<C> g[RW], u[RW];
  float bg[RW], bu[RW];
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const int64_t row = e * n_ff + r0 + warp + i * NW;
    frag_load<TYPE, C>(g[i], gate, row, lane);
    frag_load<TYPE, C>(u[i], up, row, lane);
    bg[i] = gb ? gb[row] : 0.f;
    bu[i] = ub ? ub[row] : 0.f;
  }
  quantize_x_smem<TYPE == kMX>(x + (slot / k) * n, n, xq, xd);  // while the rows arrive
  __syncthreads();
  const int nc = frag_chunks<TYPE>(n);
#pragma unroll
  for (int i = 0; i < RW; ++i) {
    const float gv = warp_sum(frag_dot<TYPE, C>(g[i], xq, xd, nc, lane));
    const float uv = warp_sum(frag_dot<TYPE, C>(u[i], xq, xd, nc, lane));
    if (lane == 0) grp[warp + i * NW] = oai_swiglu(gv + bg[i], uv + bu[i], alpha, limit);
  }
  __syncthreads();
  if (warp == 0) {  // quantize the group exactly as quantize_x_smem / quant::quantize_row(Q8_0)
    const float v = grp[lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    act_q[slot * n_ff + r0 + (TYPE == kMX ? mx_pos(lane) : lane)] = static_cast<int8_t>(roundf(v * id));
    if (lane == 0) act_d[slot * (n_ff / 32) + blockIdx.x] = __half2float(__float2half_rn(d));
  }
}

// grid (ceil(n_embd / 8)), one token, k = 4: warp w of block b owns output row 8 b + w for
// all four experts. The ids were written two kernels back (complete once this kernel's
// pre-wait code runs: cuda_common.cuh), so the four rows load before the wait; after it
// the block copies the four slots' int8 activations to shared memory (one round trip).
template <int TYPE, int C>
__global__ void __launch_bounds__(kThreads) moe_down_pre_kernel(DevW down, const float* __restrict__ db,
                                                                const int8_t* __restrict__ act_q,
                                                                const float* __restrict__ act_d,
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
  for (int i = threadIdx.x; i < K * n / 16; i += kThreads)
    reinterpret_cast<int4*>(sq)[i] = reinterpret_cast<const int4*>(act_q)[i];
  for (int i = threadIdx.x; i < K * (n / 32); i += kThreads) sd[i] = act_d[i];
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

// BRASS_CUDA_PRE=0 turns these kernels off (A/B measurement knob); BRASS_CUDA_PRE_RW picks
// the gate/up rows per warp (2: 512-thread blocks, default; 1: 1024).
bool pre_on() {
  static const bool on = [] {
    const char* v = std::getenv("BRASS_CUDA_PRE");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}
int pre_rw() {
  static const int rw = [] {
    const char* v = std::getenv("BRASS_CUDA_PRE_RW");
    return v && std::atoi(v) == 1 ? 1 : 2;
  }();
  return rw;
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

template <int TYPE, int C>
void moe_pre_c(const MoeP& a, int8_t* act_q, float* act_d, cudaStream_t st) {
  const int64_t n_embd = a.gate.n_in, n_ff = a.gate.ne1;
  const dim3 g1(static_cast<unsigned>(n_ff / 32), static_cast<unsigned>(a.k));
  if (pre_rw() == 1)
    launch_pdl(moe_gate_up_pre_kernel<TYPE, C, 1>, g1, dim3(32 * kWarp), xq_smem(n_embd), st, a.gate, a.up,
               a.gate_bias, a.up_bias, a.x, a.ids, act_q, act_d, a.k, a.alpha, a.limit);
  else
    launch_pdl(moe_gate_up_pre_kernel<TYPE, C, 2>, g1, dim3(16 * kWarp), xq_smem(n_embd), st, a.gate, a.up,
               a.gate_bias, a.up_bias, a.x, a.ids, act_q, act_d, a.k, a.alpha, a.limit);
  BRASS_CUDA_LAUNCHED();
  const dim3 g2(static_cast<unsigned>((n_embd + kWarps - 1) / kWarps));
  const size_t s2 = static_cast<size_t>(4 * n_ff + 4 * (n_ff / 32) * 4);
  launch_pdl(moe_down_pre_kernel<TYPE, C>, g2, dim3(kThreads), s2, st, a.down, a.down_bias,
             static_cast<const int8_t*>(act_q), static_cast<const float*>(act_d), a.ids, a.weights, a.out);
  BRASS_CUDA_LAUNCHED();
}
template <int TYPE>
bool moe_pre_t(const MoeP& a, int8_t* act_q, float* act_d, cudaStream_t st) {
  // One fragment size for gate/up (rows of n_embd) and down (rows of n_ff); the bigger
  // ones (Q8_0 experts) would spill at 512 threads: streaming kernels.
  const int c = frag_size(std::max(frag_chunks<TYPE>(a.gate.n_in), frag_chunks<TYPE>(a.down.n_in)));
  switch (c) {
    case 1: moe_pre_c<TYPE, 1>(a, act_q, act_d, st); return true;
    case 3: moe_pre_c<TYPE, 3>(a, act_q, act_d, st); return true;
    default: return false;
  }
}

}  // namespace

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

bool launch_moe_pre(const MoeP& a, int8_t* act_q, float* act_d, cudaStream_t st) {
  if (!pre_on() || a.n_tok != 1 || a.k != 4 || a.gate.ne1 % 32 != 0 || a.gate.n_in % 32 != 0 ||
      xq_smem(a.gate.n_in) > 40 * 1024 || 4 * a.down.n_in + a.down.n_in / 2 > 40 * 1024)
    return false;
  if (a.gate.type == kQ8) return moe_pre_t<kQ8>(a, act_q, act_d, st);
  if (a.gate.type == kMX) return moe_pre_t<kMX>(a, act_q, act_d, st);
  return false;
}

}  // namespace brass::backend::cuda
