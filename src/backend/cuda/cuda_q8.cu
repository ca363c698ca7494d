// The int8-activation ("q8x") kernels for Q8_0 and MXFP4 weights: dense mat-vec and the
// two MoE kernels. Each block quantizes the activation rows it needs into shared memory
// (quantize_x_smem, bit-identical to quant::quantize_row(Q8_0)), then warps stream
// weight rows with 16-byte loads and dp4a. Why: the f32 path (cuda_matvec.cu) spends its
// time in the load/store pipe re-reading f32 activations (8 x 16-byte loads per 16 bytes
// of MXFP4 weights) and table lookups; here a 16-byte weight load meets 32 bytes of int8
// activations and 8 dp4a. The CPU twin is the reference op on dequantize(quantize(x)).
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/oai_swiglu.h"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;

// grid (ceil(rows / rpb), n_tok); each warp takes rows warp, warp + 8, ... of the block.
template <int TYPE>
__global__ void __launch_bounds__(kThreads) matmul_q8x_kernel(DevW w, const float* __restrict__ bias,
                                                              const float* __restrict__ x, float* __restrict__ y,
                                                              int rpb) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int n = static_cast<int>(w.n_in);
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + n);
  const int64_t t = blockIdx.y;
  const int64_t rb = TYPE == kQ8 ? n : n / 2;
  // This block's weight rows (static) into L2 while waiting, for matrices that fit in L2
  // with room to spare: for a big one (the 615 MB output matrix) most blocks start long
  // after the wait and the prefetch only competes with the loads (measured slower).
  if (threadIdx.x == 0 && t == 0 && w.rows * rb <= (int64_t(32) << 20)) {
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rpb, nr = min(static_cast<int64_t>(rpb), w.rows - r0);
    prefetch_l2(w.q + r0 * rb, nr * rb);
    prefetch_l2(w.s + r0 * (n / 32) * (TYPE == kQ8 ? 2 : 1), nr * (n / 32) * (TYPE == kQ8 ? 2 : 1));
  }
  pdl_wait();
  pdl_trigger();
  quantize_x_smem<TYPE == kMX>(x + t * n, n, xq, xd);
  __syncthreads();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rpb;
  for (int i = warp; i < rpb; i += 2 * kWarps) {  // rows i and i + 8 together
    const int64_t r = r0 + i, r2 = r + kWarps;
    if (r >= w.rows) break;
    const bool two = i + kWarps < rpb && r2 < w.rows;
    float a, b;
    row_dot2_q8x<TYPE>(w, r, w, two ? r2 : r, xq, xd, lane, a, b);
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) {
      y[t * w.rows + r] = a + (bias ? bias[r] : 0.f);
      if (two) y[t * w.rows + r2] = b + (bias ? bias[r2] : 0.f);
    }
  }
}

// grid (n_ff / 32, n_tok * k): a block computes 32 consecutive SwiGLU outputs (one Q8_0
// group) of one slot and writes them already quantized (act_q int8, act_d scales), so the
// down kernel reads int8 activations straight from global memory (no per-block requant).
template <int TYPE>
__global__ void __launch_bounds__(kThreads) moe_gate_up_q8x_kernel(DevW gate, DevW up, const float* __restrict__ gb,
                                                                   const float* __restrict__ ub,
                                                                   const float* __restrict__ x,
                                                                   const int32_t* __restrict__ ids, int8_t* act_q,
                                                                   float* act_d, int64_t k, float alpha, float limit) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ float grp[32];
  const int n = static_cast<int>(gate.n_in);
  const int64_t n_ff = gate.ne1;
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + n);
  const int64_t slot = blockIdx.y;
  pdl_wait();  // the expert ids come from the kernel just before: nothing to prefetch early
  pdl_trigger();
  quantize_x_smem<TYPE == kMX>(x + (slot / k) * n, n, xq, xd);
  __syncthreads();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t e = ids[slot];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int i = warp; i < 32; i += kWarps) {
    const int64_t r = r0 + i;
    float gp, up_;
    row_dot2_q8x<TYPE>(gate, e * n_ff + r, up, e * n_ff + r, xq, xd, lane, gp, up_);
    float gv = warp_sum(gp), uv = warp_sum(up_);
    if (lane == 0) {
      if (gb) gv += gb[e * n_ff + r];
      if (ub) uv += ub[e * n_ff + r];
      grp[i] = oai_swiglu(gv, uv, alpha, limit);
    }
  }
  __syncthreads();
  if (warp == 0)
    quantize_group_warp<TYPE == kMX>(grp[lane], lane, act_q + slot * n_ff + r0,
                                     act_d + slot * (n_ff / 32) + blockIdx.x);
}

// grid (ceil(n_embd / rpb), n_tok): each warp computes output rows for all k experts of
// the token from the int8 activations and writes the router-weighted sum.
template <int TYPE>
__global__ void __launch_bounds__(kThreads) moe_down_q8x_kernel(DevW down, const float* __restrict__ db,
                                                                const int8_t* __restrict__ act_q,
                                                                const float* __restrict__ act_d,
                                                                const int32_t* __restrict__ ids,
                                                                const float* __restrict__ wts, float* out, int64_t k,
                                                                int rpb) {
  const int n = static_cast<int>(down.n_in);  // n_ff
  const int64_t n_embd = down.ne1;
  const int64_t t = blockIdx.y;
  const int8_t* xq = act_q + t * k * n;
  const float* xd = act_d + t * k * (n / 32);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * rpb;
  // The ids were written two kernels back (complete: see cuda_common.cuh), so each warp
  // can prefetch its rows of the k experts before waiting for the activations.
  if (lane < k && warp < rpb && r0 + warp < n_embd) {
    const int64_t e = ids[t * k + lane], r = e * n_embd + r0 + warp;
    const int64_t rb = TYPE == kQ8 ? n : n / 2;
    prefetch_l2(down.q + r * rb, rb);
  }
  pdl_wait();
  pdl_trigger();
  for (int i = warp; i < rpb; i += kWarps) {
    const int64_t r = r0 + i;
    if (r >= n_embd) break;
    float sum = 0.f;
    if (k == 4) {  // gpt-oss: all four experts' row loads in flight together
      float part[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t e = ids[t * 4 + j];
        part[j] = row_dot_q8x<TYPE>(down, e * n_embd + r, xq + j * n, xd + j * (n / 32), lane);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t e = ids[t * 4 + j];
        sum += wts[t * 4 + j] * (warp_sum(part[j]) + (db ? db[e * n_embd + r] : 0.f));
      }
    } else {
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = ids[t * k + j];
        const float dv = warp_sum(row_dot_q8x<TYPE>(down, e * n_embd + r, xq + j * n, xd + j * (n / 32), lane)) +
                         (db ? db[e * n_embd + r] : 0.f);
        sum += wts[t * k + j] * dv;
      }
    }
    if (lane == 0) out[t * n_embd + r] = sum;
  }
}

// Rows per block: about 6 blocks per SM for big matrices, at least one row per warp.
int rows_per_block(int64_t rows) {
  const int64_t want = rows / (static_cast<int64_t>(sm_count()) * 6);
  return static_cast<int>(std::clamp<int64_t>((want + kWarps - 1) / kWarps * kWarps, kWarps, 64));
}

size_t q8x_smem(int64_t n) { return static_cast<size_t>(n + n / 32 * 4); }

}  // namespace

namespace {
bool g_pdl = true;
}
bool pdl_enabled() { return g_pdl; }
void set_pdl(bool on) { g_pdl = on; }

bool q8x_supported(const DevW& w) {
  return (w.type == kQ8 || w.type == kMX) && w.n_in % 32 == 0 && q8x_smem(w.n_in) <= 40 * 1024;
}

void launch_matmul_q8x(const MatmulP& a, cudaStream_t st) {
  if (a.n_tok <= 0) return;
  if (launch_matvec_pre(a, st)) return;  // one token, a matrix that fits: cuda_q8_pre.cu
  const int rpb = rows_per_block(a.w.rows);
  dim3 grid(static_cast<unsigned>((a.w.rows + rpb - 1) / rpb), static_cast<unsigned>(a.n_tok));
  const size_t sm = q8x_smem(a.w.n_in);
  if (a.w.type == kQ8)
    launch_pdl(matmul_q8x_kernel<kQ8>, grid, dim3(kThreads), sm, st, a.w, a.bias, a.x, a.y, rpb);
  else
    launch_pdl(matmul_q8x_kernel<kMX>, grid, dim3(kThreads), sm, st, a.w, a.bias, a.x, a.y, rpb);
  BRASS_CUDA_LAUNCHED();
}

bool moe_q8x_supported(const MoeP& a) {
  return q8x_supported(a.gate) && a.up.type == a.gate.type && a.down.type == a.gate.type && q8x_supported(a.down) &&
         a.gate.ne1 % 32 == 0;
}

void launch_moe_q8x(const MoeP& a, float* act, cudaStream_t st) {
  if (a.n_tok <= 0) return;
  const int64_t n_embd = a.gate.n_in, n_ff = a.gate.ne1, n_slots = a.n_tok * a.k;
  // The f32 act scratch (n_slots * n_ff floats) holds the int8 activations and their scales.
  int8_t* act_q = reinterpret_cast<int8_t*>(act);
  float* act_d = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(act) + (n_slots * n_ff + 15) / 16 * 16);
  dim3 g1(static_cast<unsigned>(n_ff / 32), static_cast<unsigned>(n_slots));
  const size_t s1 = q8x_smem(n_embd);
  if (a.gate.type == kQ8)
    launch_pdl(moe_gate_up_q8x_kernel<kQ8>, g1, dim3(kThreads), s1, st, a.gate, a.up, a.gate_bias, a.up_bias, a.x,
               a.ids, act_q, act_d, a.k, a.alpha, a.limit);
  else
    launch_pdl(moe_gate_up_q8x_kernel<kMX>, g1, dim3(kThreads), s1, st, a.gate, a.up, a.gate_bias, a.up_bias, a.x,
               a.ids, act_q, act_d, a.k, a.alpha, a.limit);
  BRASS_CUDA_LAUNCHED();
  constexpr int kRpbDown = 8;  // 360 blocks for n_embd 2880: enough warps in flight
  dim3 g2(static_cast<unsigned>((n_embd + kRpbDown - 1) / kRpbDown), static_cast<unsigned>(a.n_tok));
  if (a.gate.type == kQ8)
    launch_pdl(moe_down_q8x_kernel<kQ8>, g2, dim3(kThreads), 0, st, a.down, a.down_bias,
               static_cast<const int8_t*>(act_q), static_cast<const float*>(act_d), a.ids, a.weights, a.out, a.k,
               kRpbDown);
  else
    launch_pdl(moe_down_q8x_kernel<kMX>, g2, dim3(kThreads), 0, st, a.down, a.down_bias,
               static_cast<const int8_t*>(act_q), static_cast<const float*>(act_d), a.ids, a.weights, a.out, a.k,
               kRpbDown);
  BRASS_CUDA_LAUNCHED();
}

}  // namespace brass::backend::cuda
