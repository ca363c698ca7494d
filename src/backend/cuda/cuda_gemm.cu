// Device kernels of the tensor-core (cuBLAS) paths for many-token batches (prefill):
// weight dequantization into 16-bit GEMM operands, activation conversion, the grouping
// of MoE slots by expert, the SwiGLU between the expert GEMMs and the router-weighted
// combine. The host side (cuda_tc.cpp) owns cuBLAS and the scratch.
//
// Operand types, chosen for exactness where it is free:
// - MXFP4 -> bf16: a doubled E2M1 code (at most 4 significant bits) times a power of two
//   is exact in bf16 (8-bit significand, f32's exponent range).
// - Q8_0 -> f16: d (f16) * q (int8) needs up to 18 significant bits: rounded to f16
//   (11 bits, relative error <= 2^-12). bf16 would lose 3 more bits.
// - Activations are rounded to the weight's 16-bit type; the products accumulate in f32.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/oai_swiglu.h"

namespace brass::backend::cuda {
namespace {

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// One thread per 32-element block, over the matrices (experts) [e0, e1). Source row `row`
// goes to destination row (row / ne1 - e0) * dst_stride + dst_off + row % ne1; experts with
// mask[e] == 0 (no tokens) are skipped.
template <int TYPE, class T>
__global__ void dequant_kernel(DevW w, T* __restrict__ dst, int64_t dst_stride, int64_t dst_off,
                               const int32_t* __restrict__ mask, int64_t e0, int64_t e1) {
  const int64_t nb = w.n_in / 32;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= (e1 - e0) * w.ne1 * nb) return;
  const int64_t row = e0 * w.ne1 + b / nb, c = b % nb;
  const int64_t e = row / w.ne1;
  if (mask && mask[e] == 0) return;
  T* out = dst + (((e - e0) * dst_stride + dst_off + row % w.ne1) * w.n_in + c * 32);
  T v[32];
  if constexpr (TYPE == kQ8) {
    const int8_t* q = reinterpret_cast<const int8_t*>(w.q) + row * w.n_in + c * 32;
    const float d = __half2float(reinterpret_cast<const __half*>(w.s)[row * nb + c]);
    const int4 a = *reinterpret_cast<const int4*>(q), bb = *reinterpret_cast<const int4*>(q + 16);
    const int words[8] = {a.x, a.y, a.z, a.w, bb.x, bb.y, bb.z, bb.w};
#pragma unroll
    for (int i = 0; i < 32; ++i) v[i] = from_f32<T>(d * static_cast<float>(static_cast<int8_t>(words[i / 4] >> (8 * (i % 4)))));
  } else {  // kMX: byte j holds element j (low nibble) and j + 16 (high nibble)
    constexpr float kLut[16] = {0, 1, 2, 3, 4, 6, 8, 12, -0.f, -1, -2, -3, -4, -6, -8, -12};
    const uint4 q = *reinterpret_cast<const uint4*>(w.q + row * (w.n_in / 2) + c * 16);
    const float d = e8m0_half(w.s[row * nb + c]);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const uint32_t byte = (words[j / 4] >> (8 * (j % 4))) & 0xFF;
      v[j] = from_f32<T>(kLut[byte & 15] * d);
      v[j + 16] = from_f32<T>(kLut[byte >> 4] * d);
    }
  }
  uint4* o = reinterpret_cast<uint4*>(out);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = reinterpret_cast<const uint4*>(v)[i];
}

// dst[i] = T(x[src_row(i)]) for rows i < n_rows of n floats; src_row = rows ? rows[i] / div : i.
template <class T>
__global__ void to_half_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int div, T* dst,
                               int64_t n_rows, int64_t n) {
  for (int64_t i = blockIdx.y; i < n_rows; i += gridDim.y) {  // grid.y is capped at 65535
  const int64_t src = rows ? rows[i] / div : i;
  for (int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; c < n;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x * 4) {
    if (c + 4 <= n) {
      const float4 v = *reinterpret_cast<const float4*>(x + src * n + c);
      dst[i * n + c] = from_f32<T>(v.x);
      dst[i * n + c + 1] = from_f32<T>(v.y);
      dst[i * n + c + 2] = from_f32<T>(v.z);
      dst[i * n + c + 3] = from_f32<T>(v.w);
    } else {
      for (int64_t j = c; j < n; ++j) dst[i * n + j] = from_f32<T>(x[src * n + j]);
    }
  }
  }
}

__global__ void bias_add_kernel(float* y, const float* __restrict__ bias, int64_t n_rows, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n_rows * n) y[i] += bias[i % n];
}

// One block: slots (t, j) grouped by expert. counts/offsets (n_expert + 1) out; perm:
// sorted position -> slot; inv: slot -> sorted position; eid: sorted position -> expert.
// The order inside an expert's group is arbitrary: every GEMM row is independent, and the
// combine sums a token's experts in j order.
__global__ void __launch_bounds__(1024) moe_group_kernel(const int32_t* __restrict__ ids, int64_t n_slots,
                                                         int n_expert, int32_t* counts, int32_t* offsets,
                                                         int32_t* perm, int32_t* inv, int32_t* eid) {
  extern __shared__ int32_t sh[];  // cnt[n_expert], cur[n_expert]
  int32_t* cnt = sh;
  int32_t* cur = sh + n_expert;
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int64_t s = threadIdx.x; s < n_slots; s += blockDim.x) atomicAdd(&cnt[ids[s]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t acc = 0;
    for (int e = 0; e < n_expert; ++e) {
      offsets[e] = acc;
      cur[e] = acc;
      counts[e] = cnt[e];
      acc += cnt[e];
    }
    offsets[n_expert] = acc;
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < n_slots; s += blockDim.x) {
    const int e = ids[s];
    const int32_t p = atomicAdd(&cur[e], 1);
    perm[p] = static_cast<int32_t>(s);
    inv[s] = p;
    eid[p] = e;
  }
}

// act[i, r] = T(swiglu(h[i, r] + gb[e, r], h[i, n_ff + r] + ub[e, r])), e = eid[i].
template <class T>
__global__ void moe_swiglu_kernel(const float* __restrict__ h, const int32_t* __restrict__ eid,
                                  const float* __restrict__ gb, const float* __restrict__ ub, T* act, int64_t n_rows,
                                  int64_t n_ff, float alpha, float limit) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * n_ff) return;
  const int64_t row = i / n_ff, r = i % n_ff;
  const int64_t e = eid[row];
  float g = h[row * 2 * n_ff + r], u = h[row * 2 * n_ff + n_ff + r];
  if (gb) g += gb[e * n_ff + r];
  if (ub) u += ub[e * n_ff + r];
  act[i] = from_f32<T>(oai_swiglu(g, u, alpha, limit));
}

// out[t, c] = sum_j w[t, j] * (o[inv[t k + j], c] + db[e, c]), in j order.
__global__ void moe_combine_kernel(const float* __restrict__ o, const int32_t* __restrict__ inv,
                                   const int32_t* __restrict__ ids, const float* __restrict__ wts,
                                   const float* __restrict__ db, float* out, int64_t n_tok, int64_t k,
                                   int64_t n_embd) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_tok * n_embd) return;
  const int64_t t = i / n_embd, c = i % n_embd;
  float sum = 0.f;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t s = t * k + j;
    sum += wts[s] * (o[static_cast<int64_t>(inv[s]) * n_embd + c] + (db ? db[ids[s] * n_embd + c] : 0.f));
  }
  out[i] = sum;
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

void launch_dequant_half(const DevW& w, void* dst, int64_t dst_stride, int64_t dst_off, const int32_t* mask,
                         int64_t e0, int64_t e1, cudaStream_t st) {
  const unsigned g = blocks_for((e1 - e0) * w.ne1 * (w.n_in / 32), 256);
  if (w.type == kQ8)
    dequant_kernel<kQ8, __half><<<g, 256, 0, st>>>(w, static_cast<__half*>(dst), dst_stride, dst_off, mask, e0, e1);
  else
    dequant_kernel<kMX, __nv_bfloat16><<<g, 256, 0, st>>>(w, static_cast<__nv_bfloat16*>(dst), dst_stride, dst_off,
                                                          mask, e0, e1);
  BRASS_CUDA_LAUNCHED();
}

void launch_to_half(const float* x, const int32_t* rows, int div, void* dst, bool bf16, int64_t n_rows, int64_t n,
                    cudaStream_t st) {
  if (n_rows <= 0) return;
  dim3 g(static_cast<unsigned>(std::min<int64_t>((n / 4 + 255) / 256 + 1, 16)),
         static_cast<unsigned>(std::min<int64_t>(n_rows, 65535)));
  if (bf16)
    to_half_kernel<__nv_bfloat16><<<g, 256, 0, st>>>(x, rows, div, static_cast<__nv_bfloat16*>(dst), n_rows, n);
  else
    to_half_kernel<__half><<<g, 256, 0, st>>>(x, rows, div, static_cast<__half*>(dst), n_rows, n);
  BRASS_CUDA_LAUNCHED();
}

void launch_bias_add(float* y, const float* bias, int64_t n_rows, int64_t n, cudaStream_t st) {
  bias_add_kernel<<<blocks_for(n_rows * n, 256), 256, 0, st>>>(y, bias, n_rows, n);
  BRASS_CUDA_LAUNCHED();
}

void launch_moe_group(const int32_t* ids, int64_t n_slots, int n_expert, MoeGroupBufs b, cudaStream_t st) {
  moe_group_kernel<<<1, 1024, 2 * n_expert * sizeof(int32_t), st>>>(ids, n_slots, n_expert, b.counts, b.offsets,
                                                                    b.perm, b.inv, b.eid);
  BRASS_CUDA_LAUNCHED();
}

void launch_moe_swiglu(const float* h, const int32_t* eid, const float* gb, const float* ub, void* act, bool bf16,
                       int64_t n_rows, int64_t n_ff, float alpha, float limit, cudaStream_t st) {
  if (n_rows <= 0) return;
  if (bf16)
    moe_swiglu_kernel<__nv_bfloat16><<<blocks_for(n_rows * n_ff, 256), 256, 0, st>>>(
        h, eid, gb, ub, static_cast<__nv_bfloat16*>(act), n_rows, n_ff, alpha, limit);
  else
    moe_swiglu_kernel<__half><<<blocks_for(n_rows * n_ff, 256), 256, 0, st>>>(h, eid, gb, ub, static_cast<__half*>(act),
                                                                              n_rows, n_ff, alpha, limit);
  BRASS_CUDA_LAUNCHED();
}

void launch_moe_combine(const float* o, const int32_t* inv, const int32_t* ids, const float* wts, const float* db,
                        float* out, int64_t n_tok, int64_t k, int64_t n_embd, cudaStream_t st) {
  moe_combine_kernel<<<blocks_for(n_tok * n_embd, 256), 256, 0, st>>>(o, inv, ids, wts, db, out, n_tok, k, n_embd);
  BRASS_CUDA_LAUNCHED();
}

}  // namespace brass::backend::cuda
