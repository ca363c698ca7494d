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

// Weights -> 16-bit GEMM operand, over the matrices (experts) [e0, e1). Source row `row`
// goes to destination row (row / ne1 - e0) * dst_stride + dst_off + row % ne1; experts with
// mask[e] == 0 (no tokens) are skipped. One thread per 4-byte word of a row's quants, so a
// warp reads and writes contiguous runs (a thread per 32-element block wrote 64 bytes at a
// 64-byte stride and looked its MXFP4 codes up in a local-memory table: 336 GB/s on the
// H200, 1.3 ms per layer of pp2048 for the 32 experts).
// - Q8_0: 8 words per block; word t = elements 4t..4t+3 -> 4 halves f16(d q).
// - MXFP4: 4 words per block; byte j holds element j (low nibble) and j + 16 (high), so
//   word t gives elements 4t..4t+3 and 16+4t..16+4t+3 (two 8-byte runs of bf16).
template <int TYPE, class T>
__global__ void dequant_kernel(DevW w, T* __restrict__ dst, int64_t dst_stride, int64_t dst_off,
                               const int32_t* __restrict__ mask, int64_t e0, int64_t e1) {
  constexpr int kWords = TYPE == kQ8 ? 8 : 4;  // 4-byte words of quants per 32-element block
  __shared__ float lut[16];                    // MXFP4: doubled E2M1 values (e8m0_half halves the scale)
  if (TYPE == kMX && threadIdx.x < 16) {
    constexpr float kLut[16] = {0, 1, 2, 3, 4, 6, 8, 12, -0.f, -1, -2, -3, -4, -6, -8, -12};
    lut[threadIdx.x] = kLut[threadIdx.x];
  }
  if (TYPE == kMX) __syncthreads();
  const int64_t nb = w.n_in / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= (e1 - e0) * w.ne1 * nb * kWords) return;
  const int64_t b = i / kWords;
  const int t = static_cast<int>(i % kWords);
  const int64_t row = e0 * w.ne1 + b / nb, c = b % nb;
  const int64_t e = row / w.ne1;
  if (mask && mask[e] == 0) return;
  T* out = dst + (((e - e0) * dst_stride + dst_off + row % w.ne1) * w.n_in + c * 32);
  if constexpr (TYPE == kQ8) {
    const uint32_t q = reinterpret_cast<const uint32_t*>(w.q + row * w.n_in + c * 32)[t];
    const float d = __half2float(reinterpret_cast<const __half*>(w.s)[row * nb + c]);
    auto v = [&](int k) { return d * static_cast<float>(static_cast<int8_t>(q >> (8 * k))); };
    const __half2 h[2] = {__floats2half2_rn(v(0), v(1)), __floats2half2_rn(v(2), v(3))};
    *reinterpret_cast<uint2*>(out + 4 * t) = *reinterpret_cast<const uint2*>(h);
  } else {
    const uint32_t q = reinterpret_cast<const uint32_t*>(w.q + row * (w.n_in / 2) + c * 16)[t];
    const float d = e8m0_half(w.s[row * nb + c]);
    auto v = [&](int k, int hi) { return lut[(q >> (8 * k + 4 * hi)) & 15] * d; };
    const __nv_bfloat162 lo[2] = {__floats2bfloat162_rn(v(0, 0), v(1, 0)), __floats2bfloat162_rn(v(2, 0), v(3, 0))};
    const __nv_bfloat162 hi[2] = {__floats2bfloat162_rn(v(0, 1), v(1, 1)), __floats2bfloat162_rn(v(2, 1), v(3, 1))};
    *reinterpret_cast<uint2*>(out + 4 * t) = *reinterpret_cast<const uint2*>(lo);
    *reinterpret_cast<uint2*>(out + 16 + 4 * t) = *reinterpret_cast<const uint2*>(hi);
  }
}

// dst[i] = T(x[src_row(i)]) for rows i < n_rows of n floats; src_row = rows ? rows[i] / div : i.
// A PDL launch that releases its dependent at once: the dense MMA kernel after it (batched
// decode's q/k/v, wo and head) issues its static weight loads while this runs, and this
// one's launch overlaps the tail of the kernel before it (a plain launch waited for that
// kernel's end and held the next one back until its own).
template <class T>
__global__ void to_half_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int div, T* dst,
                               int64_t n_rows, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.y; i < n_rows; i += gridDim.y) {  // grid.y is capped at 65535
  const int64_t src = rows ? rows[i] / div : i;
  for (int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; c < n;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x * 4) {
    if (c + 4 <= n) {
      const float4 v = *reinterpret_cast<const float4*>(x + src * n + c);  // (callers: n % 32 == 0)
      const T h[4] = {from_f32<T>(v.x), from_f32<T>(v.y), from_f32<T>(v.z), from_f32<T>(v.w)};
      *reinterpret_cast<uint2*>(dst + i * n + c) = *reinterpret_cast<const uint2*>(h);
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

// y (n_tok, cols) -> three row-major outputs side by side in the columns, each + its bias
// (the fused q / k / v GEMM's result, cuda_tc.cpp). Four columns per thread (every part's
// width is a multiple of 4: checked by the launcher).
__global__ void split_cols3_kernel(const float* __restrict__ y, int64_t n_tok, SplitCols3P p) {
  const int64_t cols = p.width[0] + p.width[1] + p.width[2];
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= n_tok * cols) return;
  const int64_t t = i / cols;
  int64_t c = i % cols;
  int part = 0;
  while (c >= p.width[part]) c -= p.width[part++];
  float4 v = *reinterpret_cast<const float4*>(y + i);
  if (const float* b = p.bias[part]) {
    v.x += b[c];
    v.y += b[c + 1];
    v.z += b[c + 2];
    v.w += b[c + 3];
  }
  *reinterpret_cast<float4*>(p.out[part] + t * p.width[part] + c) = v;
}

// One block: slots grouped by expert (group_by_expert).
__global__ void __launch_bounds__(1024) moe_group_kernel(const int32_t* __restrict__ ids, int64_t n_slots,
                                                         int n_expert, MoeGroupBufs b) {
  extern __shared__ int32_t sh[];  // cnt[n_expert], cur[n_expert]
  group_by_expert(ids, n_slots, n_expert, b, sh);
}

// V consecutive floats at p (V = 4: one 16-byte access; the caller keeps p 16-byte aligned).
template <int V>
struct Vec {
  float v[V];
  __device__ __forceinline__ void load(const float* p) {
    if constexpr (V == 4) {
      const float4 f = *reinterpret_cast<const float4*>(p);
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = p[i];
    }
  }
};

// act[i, r] = T(swiglu(h[i, r] + gb[e, r], h[i, n_ff + r] + ub[e, r])), e = eid[i]; V
// consecutive r per thread (V = 4 when n_ff % 4 == 0: 16-byte loads, 8-byte stores).
template <class T, int V>
__global__ void moe_swiglu_kernel(const float* __restrict__ h, const int32_t* __restrict__ eid,
                                  const float* __restrict__ gb, const float* __restrict__ ub, T* act, int64_t n_rows,
                                  int64_t n_ff, float alpha, float limit) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i >= n_rows * n_ff) return;
  const int64_t row = i / n_ff, r = i % n_ff;
  const int64_t e = eid[row];
  Vec<V> g, u, bg, bu;
  g.load(h + row * 2 * n_ff + r);
  u.load(h + row * 2 * n_ff + n_ff + r);
  if (gb) bg.load(gb + e * n_ff + r);
  if (ub) bu.load(ub + e * n_ff + r);
  T out[V];
#pragma unroll
  for (int j = 0; j < V; ++j)
    out[j] = from_f32<T>(oai_swiglu(g.v[j] + (gb ? bg.v[j] : 0.f), u.v[j] + (ub ? bu.v[j] : 0.f), alpha, limit));
  if constexpr (V == 4)
    *reinterpret_cast<uint2*>(act + i) = *reinterpret_cast<const uint2*>(out);
  else
    act[i] = out[0];
}

// sum[v] = sum_j w[t, j] * (o[inv[t k + j], c + v] + db[e, c + v]), in j order.
template <int V>
__device__ __forceinline__ void combine_terms(const float* __restrict__ o, const int32_t* __restrict__ inv,
                                              const int32_t* __restrict__ ids, const float* __restrict__ wts,
                                              const float* __restrict__ db, int64_t t, int64_t c, int64_t k,
                                              int64_t n_embd, float (&sum)[V]) {
#pragma unroll
  for (int v = 0; v < V; ++v) sum[v] = 0.f;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t s = t * k + j;
    Vec<V> ov, dv;
    ov.load(o + static_cast<int64_t>(inv[s]) * n_embd + c);
    if (db) dv.load(db + ids[s] * n_embd + c);
#pragma unroll
    for (int v = 0; v < V; ++v) sum[v] += wts[s] * (ov.v[v] + (db ? dv.v[v] : 0.f));
  }
}

// Block 0 zeroes reset[0, n) (the combine runs after every reader of the MoE's counts).
__device__ __forceinline__ void reset_ints(int32_t* reset, int n) {
  if (reset && blockIdx.x == 0)
    for (int i = threadIdx.x; i < n; i += blockDim.x) reset[i] = 0;
}

// out[t, c] = sum_j w[t, j] * (o[inv[t k + j], c] + db[e, c]), in j order; V consecutive c
// per thread (V = 4 when n_embd % 4 == 0).
template <int V>
__global__ void moe_combine_kernel(const float* __restrict__ o, const int32_t* __restrict__ inv,
                                   const int32_t* __restrict__ ids, const float* __restrict__ wts,
                                   const float* __restrict__ db, float* out, int64_t n_tok, int64_t k,
                                   int64_t n_embd, int32_t* reset, int n_reset) {
  reset_ints(reset, n_reset);
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i >= n_tok * n_embd) return;
  const int64_t t = i / n_embd, c = i % n_embd;
  float sum[V];
  combine_terms<V>(o, inv, ids, wts, db, t, c, k, n_embd, sum);
  if constexpr (V == 4)
    *reinterpret_cast<float4*>(out + i) = make_float4(sum[0], sum[1], sum[2], sum[3]);
  else
    out[i] = sum[0];
}

// The combine fused with the residual add and, with NORM, the next layer's RMSNorm: a
// block (1024 threads) per token t; y[t] += combine(t); xn[t] = rmsnorm(y[t]) * w. The
// arithmetic of moe_combine_kernel<4> then rms_norm_kernel<true> (the same thread
// layout: the same sums), without the combine's output round trip or a launch between.
// xh (NORM, or null): xn in f16 too, rounded as to_half_kernel rounds (the next layer's
// q / k / v call reads it instead of launching to_half).
template <bool NORM>
__global__ void __launch_bounds__(1024) moe_combine_residual_kernel(
    const float* __restrict__ o, const int32_t* __restrict__ inv, const int32_t* __restrict__ ids,
    const float* __restrict__ wts, const float* __restrict__ db, int64_t k, int64_t n, float* y,
    const float* __restrict__ w, float* xn, float eps, __half* xh, int32_t* reset, int n_reset) {
  pdl_trigger();  // dependents may start prefetching
  pdl_wait();     // (a PDL launch: its launch overlaps down's tail)
  reset_ints(reset, n_reset);
  __shared__ float sh[32];
  const int64_t t = blockIdx.x;
  float* yr = y + t * n;
  float4* y4 = reinterpret_cast<float4*>(yr);
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
    float a[4];
    combine_terms<4>(o, inv, ids, wts, db, t, 4 * i, k, n, a);
    float4 v = y4[i];
    v.x += a[0]; v.y += a[1]; v.z += a[2]; v.w += a[3];
    y4[i] = v;
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  if constexpr (NORM) {
    ss = block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    float* out = xn + t * n;
    if (xh) {
      __half* oh = xh + t * n;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = yr[i] * r * w[i];
        out[i] = v;
        oh[i] = __float2half_rn(v);
      }
    } else {
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = yr[i] * r * w[i];
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

void launch_dequant_half(const DevW& w, void* dst, int64_t dst_stride, int64_t dst_off, const int32_t* mask,
                         int64_t e0, int64_t e1, cudaStream_t st) {
  const unsigned g = blocks_for((e1 - e0) * w.ne1 * (w.n_in / 32) * (w.type == kQ8 ? 8 : 4), 256);
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
    launch_pdl(to_half_kernel<__nv_bfloat16>, g, dim3(256), 0, st, x, rows, div, static_cast<__nv_bfloat16*>(dst),
               n_rows, n);
  else
    launch_pdl(to_half_kernel<__half>, g, dim3(256), 0, st, x, rows, div, static_cast<__half*>(dst), n_rows, n);
  BRASS_CUDA_LAUNCHED();
}

void launch_bias_add(float* y, const float* bias, int64_t n_rows, int64_t n, cudaStream_t st) {
  bias_add_kernel<<<blocks_for(n_rows * n, 256), 256, 0, st>>>(y, bias, n_rows, n);
  BRASS_CUDA_LAUNCHED();
}

bool launch_split_cols3(const float* y, int64_t n_tok, const SplitCols3P& p, cudaStream_t st) {
  for (int64_t w : p.width)
    if (w <= 0 || w % 4) return false;
  const int64_t n4 = n_tok * (p.width[0] + p.width[1] + p.width[2]) / 4;
  if (n4 > 0) split_cols3_kernel<<<blocks_for(n4, 256), 256, 0, st>>>(y, n_tok, p);
  BRASS_CUDA_LAUNCHED();
  return true;
}

void launch_moe_group(const int32_t* ids, int64_t n_slots, int n_expert, MoeGroupBufs b, cudaStream_t st) {
  moe_group_kernel<<<1, 1024, 2 * n_expert * sizeof(int32_t), st>>>(ids, n_slots, n_expert, b);
  BRASS_CUDA_LAUNCHED();
}

void launch_moe_swiglu(const float* h, const int32_t* eid, const float* gb, const float* ub, void* act, bool bf16,
                       int64_t n_rows, int64_t n_ff, float alpha, float limit, cudaStream_t st) {
  if (n_rows <= 0) return;
  auto go = [&](auto kernel, int v, auto* dst) {
    kernel<<<blocks_for(n_rows * n_ff / v, 256), 256, 0, st>>>(h, eid, gb, ub, dst, n_rows, n_ff, alpha, limit);
  };
  const bool v4 = n_ff % 4 == 0 && aligned16(h) && aligned16(gb) && aligned16(ub) && aligned16(act);
  if (bf16) {
    auto* dst = static_cast<__nv_bfloat16*>(act);
    v4 ? go(moe_swiglu_kernel<__nv_bfloat16, 4>, 4, dst) : go(moe_swiglu_kernel<__nv_bfloat16, 1>, 1, dst);
  } else {
    auto* dst = static_cast<__half*>(act);
    v4 ? go(moe_swiglu_kernel<__half, 4>, 4, dst) : go(moe_swiglu_kernel<__half, 1>, 1, dst);
  }
  BRASS_CUDA_LAUNCHED();
}

bool launch_moe_combine_residual(const float* o, const int32_t* inv, const int32_t* ids, const float* wts,
                                 const float* db, int64_t n_tok, int64_t k, int64_t n_embd, const MoeTail& tail,
                                 cudaStream_t st, int32_t* reset, int n_reset) {
  if (n_tok <= 0 || n_embd % 4 != 0 || !aligned16(o) || !aligned16(db) || !aligned16(tail.y) ||
      (tail.norm && tail.xn == tail.y))
    return false;
  if (tail.norm)
    launch_pdl(moe_combine_residual_kernel<true>, dim3(static_cast<unsigned>(n_tok)), dim3(1024), 0, st, o, inv, ids,
               wts, db, k, n_embd, tail.y, tail.norm, tail.xn, tail.eps, tail.xh, reset, n_reset);
  else
    launch_pdl(moe_combine_residual_kernel<false>, dim3(static_cast<unsigned>(n_tok)), dim3(1024), 0, st, o, inv, ids,
               wts, db, k, n_embd, tail.y, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 0.f,
               static_cast<__half*>(nullptr), reset, n_reset);
  BRASS_CUDA_LAUNCHED();
  return true;
}

void launch_moe_combine(const float* o, const int32_t* inv, const int32_t* ids, const float* wts, const float* db,
                        float* out, int64_t n_tok, int64_t k, int64_t n_embd, cudaStream_t st, int32_t* reset,
                        int n_reset) {
  if (n_embd % 4 == 0 && aligned16(o) && aligned16(db) && aligned16(out))
    moe_combine_kernel<4><<<blocks_for(n_tok * n_embd / 4, 256), 256, 0, st>>>(o, inv, ids, wts, db, out, n_tok, k,
                                                                              n_embd, reset, n_reset);
  else
    moe_combine_kernel<1><<<blocks_for(n_tok * n_embd, 256), 256, 0, st>>>(o, inv, ids, wts, db, out, n_tok, k, n_embd,
                                                                          reset, n_reset);
  BRASS_CUDA_LAUNCHED();
}

}  // namespace brass::backend::cuda
