// CUDA mixture-of-experts (MoeArgs): two kernels.
// 1. gate+up: grid (n_ff / 8, n_tok * k slots); a warp computes one ff row of the slot's
//    expert for both gate and up (same x), adds the biases, applies OAI SwiGLU
//    (g = min(g, limit), u = clamp(u, -limit, limit), g * sigmoid(alpha g) * (u + 1)) and
//    writes act[slot, row].
// 2. down: grid (n_embd / 8, n_tok); a warp computes one output row for all k experts of
//    the token (down row . act + bias) and writes the router-weighted sum, in j order.
// Only the selected experts' rows are read: for decode that is k/n_expert of the tensor.
#include "backend/cuda/cuda_common.cuh"
#include "backend/oai_swiglu.h"

namespace brass::backend::cuda {
namespace {

constexpr int kRowsPerBlock = 8;

template <int TYPE>
__global__ void __launch_bounds__(256) moe_gate_up_kernel(DevW gate, DevW up, const float* __restrict__ gb,
                                                          const float* __restrict__ ub, const float* __restrict__ x,
                                                          const int32_t* __restrict__ ids, float* act, int64_t n_ff,
                                                          int64_t k, float alpha, float limit) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  __shared__ float lut[16];
  if constexpr (TYPE == kMX) {
    load_mx_lut(lut);
    __syncthreads();
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  const int64_t slot = blockIdx.y;
  if (r >= n_ff) return;
  const int64_t e = ids[slot];
  const float* xt = x + (slot / k) * gate.n_in;
  float g[1] = {0.f}, u[1] = {0.f};
  row_dot<TYPE, 1>(gate, e * n_ff + r, xt, 1, g, lane, kWarp, lut);
  row_dot<TYPE, 1>(up, e * n_ff + r, xt, 1, u, lane, kWarp, lut);
  float gv = warp_sum(g[0]), uv = warp_sum(u[0]);
  if (lane != 0) return;
  if (gb) gv += gb[e * n_ff + r];
  if (ub) uv += ub[e * n_ff + r];
  act[slot * n_ff + r] = oai_swiglu(gv, uv, alpha, limit);
}

template <int TYPE>
__global__ void __launch_bounds__(256) moe_down_kernel(DevW down, const float* __restrict__ db,
                                                       const float* __restrict__ act, const int32_t* __restrict__ ids,
                                                       const float* __restrict__ wts, float* out, int64_t n_embd,
                                                       int64_t k) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  __shared__ float lut[16];
  if constexpr (TYPE == kMX) {
    load_mx_lut(lut);
    __syncthreads();
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  const int64_t t = blockIdx.y;
  if (r >= n_embd) return;
  const int64_t n_ff = down.n_in;
  float sum = 0.f;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t slot = t * k + j;
    const int64_t e = ids[slot];
    float d[1] = {0.f};
    row_dot<TYPE, 1>(down, e * n_embd + r, act + slot * n_ff, 1, d, lane, kWarp, lut);
    const float dv = warp_sum(d[0]) + (db ? db[e * n_embd + r] : 0.f);
    sum += wts[slot] * dv;
  }
  if (lane == 0) out[t * n_embd + r] = sum;
}

template <int TYPE>
void moe_typed(const MoeP& a, const DevW& g, const DevW& u, const DevW& d, float* act, cudaStream_t st) {
  const int64_t n_embd = a.gate.n_in, n_ff = a.gate.ne1;
  dim3 g1(static_cast<unsigned>((n_ff + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(a.n_tok * a.k));
  moe_gate_up_kernel<TYPE><<<g1, 256, 0, st>>>(g, u, a.gate_bias, a.up_bias, a.x, a.ids, act, n_ff, a.k, a.alpha,
                                               a.limit);
  BRASS_CUDA_LAUNCHED();
  dim3 g2(static_cast<unsigned>((n_embd + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(a.n_tok));
  moe_down_kernel<TYPE><<<g2, 256, 0, st>>>(d, a.down_bias, act, a.ids, a.weights, a.out, n_embd, a.k);
  BRASS_CUDA_LAUNCHED();
}

}  // namespace

void launch_moe(const MoeP& a, float* act, cudaStream_t st) {
  if (a.n_tok <= 0) return;
  const DevW &g = a.gate, &u = a.up, &d = a.down;
  if (g.type != u.type || g.type != d.type) {
    std::fprintf(stderr, "cuda moe: gate/up/down must share one type\n");
    std::abort();
  }
  switch (g.type) {
    case kF32: moe_typed<kF32>(a, g, u, d, act, st); break;
    case kF16: moe_typed<kF16>(a, g, u, d, act, st); break;
    case kBF16: moe_typed<kBF16>(a, g, u, d, act, st); break;
    case kQ8: moe_typed<kQ8>(a, g, u, d, act, st); break;
    default: moe_typed<kMX>(a, g, u, d, act, st); break;
  }
}

}  // namespace brass::backend::cuda
