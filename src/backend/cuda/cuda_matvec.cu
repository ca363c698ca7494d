// CUDA kernels for the dense ops: mat-vec / small-batch matmul of every supported
// weight type (16-byte weight loads; one warp per row, or a whole block per row when
// there are too few rows to fill the GPU), RMSNorm (+ fused residual add), add, embed,
// RoPE, gather_rows, router top-k + softmax, argmax (one pass, last-block reduction)
// and the Q8_0 / MXFP4 repack into the split layouts of cuda_common.cuh.
//
// Numerics: f32 accumulation everywhere; reduction order differs from the CPU
// reference (tree reductions), so parity is to rounding, not bit-exact. RoPE uses
// full-precision sincosf (angles reach ~1e5 rad at long context; the fast intrinsics
// would lose the phase).
#include <algorithm>
#include <cfloat>

#include "backend/cuda/cuda_common.cuh"
#include "quant/blocks.h"

namespace brass::backend::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTok = 4;  // activation vectors per weight-row pass

// y[t, r] = W[r] . x[t] + bias[r]; WPR warps per row.
template <int TYPE, int WPR>
__global__ void __launch_bounds__(kThreads) matmul_kernel(DevW w, const float* __restrict__ bias,
                                                          const float* __restrict__ x, float* __restrict__ y,
                                                          int64_t n_tok) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  __shared__ float lut[16];
  __shared__ float red[kThreads / kWarp][kMaxTok];
  if constexpr (TYPE == kMX) {
    load_mx_lut(lut);
    __syncthreads();
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  constexpr int kRowsPerBlock = kThreads / kWarp / WPR;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp / WPR;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kMaxTok;
  const int nt = static_cast<int>(min(static_cast<int64_t>(kMaxTok), n_tok - t0));
  float acc[kMaxTok] = {0.f, 0.f, 0.f, 0.f};
  if (r < w.rows) {
    row_dot<TYPE, kMaxTok>(w, r, x + t0 * w.n_in, nt, acc, (warp % WPR) * kWarp + lane, WPR * kWarp, lut);
  }
#pragma unroll
  for (int t = 0; t < kMaxTok; ++t) acc[t] = warp_sum(acc[t]);
  if constexpr (WPR > 1) {
    if (lane == 0)
      for (int t = 0; t < kMaxTok; ++t) red[warp][t] = acc[t];
    __syncthreads();
    if (warp % WPR != 0) return;
    for (int k = 1; k < WPR; ++k)
      for (int t = 0; t < kMaxTok; ++t) acc[t] += red[warp + k][t];
  }
  if (lane == 0 && r < w.rows) {
    const float b = bias ? bias[r] : 0.f;
    for (int t = 0; t < nt; ++t) y[(t0 + t) * w.rows + r] = acc[t] + b;
  }
}

// F32 weights with few rows and many tokens (the router at prefill: 32 rows of 2880):
// block (token tile of kTT, row tile of kTR) stages K chunks of both operands in shared
// memory (the next chunk's loads in flight in registers while this one is summed), so the
// tokens are read once per row tile; thread (row tx, tokens 2 ty, 2 ty + 1) sums over K in
// order. (The mat-vec kernel above re-reads every token's row for each weight row: 71 us
// per layer of pp2048 on the H200.)
constexpr int kTT = 16, kTR = 32, kTK = 128;
__global__ void __launch_bounds__(256) matmul_f32_tiled_kernel(DevW w, const float* __restrict__ bias,
                                                               const float* __restrict__ x, float* __restrict__ y,
                                                               int64_t n_tok) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  __shared__ float xs[kTT][kTK + 1];
  __shared__ float ws[kTR][kTK + 1];
  constexpr int kXL = kTT * kTK / 256, kWL = kTR * kTK / 256;  // loads per thread and chunk
  const int tx = threadIdx.x % kWarp, ty = threadIdx.x / kWarp;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTT, r0 = static_cast<int64_t>(blockIdx.y) * kTR;
  const float* W = reinterpret_cast<const float*>(w.q);
  const int64_t n = w.n_in;
  float xr[kXL], wr[kWL];
  auto gload = [&](int64_t k0) {
#pragma unroll
    for (int i = 0; i < kXL; ++i) {
      const int idx = threadIdx.x + 256 * i, kk = idx % kTK;
      const int64_t t = t0 + idx / kTK, k = k0 + kk;
      xr[i] = t < n_tok && k < n ? x[t * n + k] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < kWL; ++i) {
      const int idx = threadIdx.x + 256 * i, kk = idx % kTK;
      const int64_t r = r0 + idx / kTK, k = k0 + kk;
      wr[i] = r < w.rows && k < n ? W[r * n + k] : 0.f;
    }
  };
  float acc[2] = {0.f, 0.f};
  gload(0);
  for (int64_t k0 = 0; k0 < n; k0 += kTK) {
    __syncthreads();  // the previous chunk is summed
#pragma unroll
    for (int i = 0; i < kXL; ++i) xs[(threadIdx.x + 256 * i) / kTK][(threadIdx.x + 256 * i) % kTK] = xr[i];
#pragma unroll
    for (int i = 0; i < kWL; ++i) ws[(threadIdx.x + 256 * i) / kTK][(threadIdx.x + 256 * i) % kTK] = wr[i];
    __syncthreads();
    if (k0 + kTK < n) gload(k0 + kTK);
#pragma unroll 16
    for (int kk = 0; kk < kTK; ++kk) {
      const float wv = ws[tx][kk];
      acc[0] += wv * xs[2 * ty][kk];
      acc[1] += wv * xs[2 * ty + 1][kk];
    }
  }
  const int64_t r = r0 + tx;
  if (r >= w.rows) return;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int64_t t = t0 + 2 * ty + j;
    if (t < n_tok) y[t * w.rows + r] = acc[j] + (bias ? bias[r] : 0.f);
  }
}

template <int TYPE>
void matmul_typed(const DevW& w, const MatmulP& a, cudaStream_t st, int n_sm) {
  const unsigned gy = static_cast<unsigned>((a.n_tok + kMaxTok - 1) / kMaxTok);
  if (w.rows >= 4 * n_sm * (kThreads / kWarp)) {
    dim3 grid(static_cast<unsigned>((w.rows + 7) / 8), gy);
    matmul_kernel<TYPE, 1><<<grid, kThreads, 0, st>>>(w, a.bias, a.x, a.y, a.n_tok);
  } else if (w.rows >= 2 * n_sm) {
    dim3 grid(static_cast<unsigned>((w.rows + 3) / 4), gy);
    matmul_kernel<TYPE, 2><<<grid, kThreads, 0, st>>>(w, a.bias, a.x, a.y, a.n_tok);
  } else {
    dim3 grid(static_cast<unsigned>(w.rows), gy);
    matmul_kernel<TYPE, 8><<<grid, kThreads, 0, st>>>(w, a.bias, a.x, a.y, a.n_tok);
  }
  BRASS_CUDA_LAUNCHED();
}

// One block per row. add: y += x first (fused residual add), then out = norm(y) * w.
// With n % 4 == 0 each thread owns float4s (1024 threads: one or two per thread for
// gpt-oss), so the kernel is one round of loads deep instead of a serial loop.
template <bool ADD>
__global__ void __launch_bounds__(1024) rms_norm_kernel(float* y, const float* __restrict__ x,
                                                        const float* __restrict__ w, float* out, int64_t n,
                                                        float eps) {
  pdl_wait();
  pdl_trigger();
  __shared__ float sh[32];
  const int64_t row = blockIdx.x;
  float* yr = y + row * n;
  float* o = out + row * n;
  float ss = 0.f;
  if (n % 4 == 0) {
    float4* y4 = reinterpret_cast<float4*>(yr);
    const float4* x4 = ADD ? reinterpret_cast<const float4*>(x + row * n) : nullptr;
    for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
      float4 v = y4[i];
      if constexpr (ADD) {
        const float4 a = x4[i];
        v.x += a.x; v.y += a.y; v.z += a.z; v.w += a.w;
        y4[i] = v;
      }
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float v = yr[i];
      if constexpr (ADD) {
        v += x[row * n + i];
        yr[i] = v;
      }
      ss += v * v;
    }
  }
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = yr[i] * inv * w[i];
}

__global__ void add_kernel(float* y, const float* __restrict__ x, int64_t n) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

// grid (n_tok, ceil(n / 256)): one element per thread, so a row costs one round trip for
// the token id and one for its bytes (a block per token walking the row took ~8 us per
// decode token on the H200: each step of its loop waited for the previous one's load).
__global__ void embed_kernel(DevW w, const int32_t* __restrict__ tokens, float* __restrict__ out) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  const int64_t t = blockIdx.x;
  const int64_t r = tokens[t];
  const int64_t n = w.n_in;
  if (const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; i < n) {
    float v;
    switch (w.type) {
      case kF32: v = reinterpret_cast<const float*>(w.q)[r * n + i]; break;
      case kF16: v = f16_bits_to_f32(reinterpret_cast<const uint16_t*>(w.q)[r * n + i]); break;
      case kBF16: v = bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(w.q)[r * n + i]); break;
      case kQ8:
        v = __half2float(reinterpret_cast<const __half*>(w.s)[r * (n / 32) + i / 32]) *
            reinterpret_cast<const int8_t*>(w.q)[r * n + i];
        break;
      default: {  // MXFP4
        const uint8_t b = w.q[r * (n / 2) + (i / 32) * 16 + (i % 16)];
        const int nib = (i % 32) < 16 ? (b & 15) : (b >> 4);
        v = static_cast<float>(quant::mxfp4_value(nib)) * e8m0_half(w.s[r * (n / 32) + i / 32]);
      }
    }
    out[t * n + i] = v;
  }
}

// grid (n_tok, head groups of hpb heads): the token's cos / sin pairs (one sincosf per
// frequency, in shared memory: dynamic, 2 * head_dim / 2 floats) serve the group's heads;
// then the block walks the group's (head, pair) items. (A block per (token, head)
// recomputed them for every head: 4.4 ms of a pp2048 forward on the H200; a block per
// token left batched decode with a few blocks of long loops.)
__global__ void rope_kernel(float* x, const int32_t* __restrict__ pos, const float* __restrict__ inv_freq,
                            float mscale, int64_t n_heads, int64_t head_dim, int64_t hpb) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  extern __shared__ float cs[];  // [half] cos * mscale, [half] sin * mscale
  const int64_t t = blockIdx.x, half = head_dim / 2;
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) rope_cs(pos[t], inv_freq[j], mscale, cs[j], cs[half + j]);
  __syncthreads();
  const int64_t h0 = blockIdx.y * hpb, nh = min(hpb, n_heads - h0);
  float* xt = x + (t * n_heads + h0) * head_dim;
  for (int64_t i = threadIdx.x; i < nh * half; i += blockDim.x) {
    const int64_t j = i % half;
    float* xr = xt + (i / half) * head_dim;
    float x0 = xr[j], x1 = xr[j + half];
    rope_pair(x0, x1, cs[j], cs[half + j]);
    xr[j] = x0;
    xr[j + half] = x1;
  }
}

__global__ void gather_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, float* out, int64_t n) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  const int64_t i = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[i]) * n;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) out[i * n + e] = src[e];
}

// One warp per token: the top k (ties: lower index), then the softmax over the k picked
// logits (pick_experts: the picks of the MoE kernels that route themselves).
__global__ void router_kernel(const float* __restrict__ logits, int32_t* ids, float* wts, int64_t n_tok,
                              int64_t n_expert, int64_t k) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  const int64_t t = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (t >= n_tok) return;
  pick_experts(logits + t * n_expert, static_cast<int>(n_expert), static_cast<int>(k), ids + t * k, wts + t * k, lane);
}

// grid (argmax_parts(n_rows), n_rows); block x takes a range of its row (a multiple of 4
// long); the last block of a row to finish reduces the partials and resets the row's
// counter (so a captured graph can replay it). Rows of a multiple of 4 (16-byte aligned:
// the vocabulary's logits) are read as float4, four of a thread's in flight at once.
// (arg_better's order does not matter: the larger value, on ties the lower index.)
constexpr int kArgmaxU = 4;
__global__ void argmax_kernel(ArgmaxP a, ArgBest* partial, unsigned* counter) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.y;
  const float* x = a.x + row * a.n;
  ArgBest b{-INFINITY, -1};
  const int64_t per = ((a.n + gridDim.x - 1) / gridDim.x + 3) / 4 * 4;
  const int64_t i0 = blockIdx.x * per, i1 = min(a.n, i0 + per);
  if (a.n % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t j1 = i1 / 4, bd = blockDim.x;
    for (int64_t j = i0 / 4 + threadIdx.x; j < j1; j += kArgmaxU * bd) {
      float4 v[kArgmaxU];
#pragma unroll
      for (int u = 0; u < kArgmaxU; ++u) v[u] = x4[min(j + u * bd, j1 - 1)];  // (clamped: all loads in flight)
#pragma unroll
      for (int u = 0; u < kArgmaxU; ++u) {
        const int64_t jj = j + u * bd;
        if (jj >= j1) break;
        const int i = static_cast<int>(4 * jj);
        b = arg_better(b, ArgBest{v[u].x, i});
        b = arg_better(b, ArgBest{v[u].y, i + 1});
        b = arg_better(b, ArgBest{v[u].z, i + 2});
        b = arg_better(b, ArgBest{v[u].w, i + 3});
      }
    }
  } else {
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) b = arg_better(b, ArgBest{x[i], static_cast<int>(i)});
  }
  __shared__ ArgBest sh[32];
  argmax_finish(b, partial + row * gridDim.x, gridDim.x, blockIdx.x, &counter[row], a.out + row,
                a.pos ? a.pos + row : nullptr, a.history, sh);
}

// One thread per block of 32 elements.
__global__ void repack_q8_kernel(const uint8_t* __restrict__ src, int8_t* qs, __half* d, int64_t n_blocks) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= n_blocks) return;
  const uint8_t* blk = src + b * 34;
  d[b] = __ushort_as_half(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
  for (int j = 0; j < 32; ++j) qs[b * 32 + j] = static_cast<int8_t>(blk[2 + j]);
}
__global__ void repack_mx_kernel(const uint8_t* __restrict__ src, uint8_t* qs, uint8_t* e, int64_t n_blocks) {
  const int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (b >= n_blocks) return;
  const uint8_t* blk = src + b * 17;
  e[b] = blk[0];
  for (int j = 0; j < 16; ++j) qs[b * 16 + j] = blk[1 + j];
}

// One block a tile (DevW::tiles): threads 0..255 copy a 4-byte code word each, threads
// 256..287 one row's 2-byte E8M0 pair each.
__global__ void mx_tiles_kernel(const uint8_t* __restrict__ q, const uint8_t* __restrict__ s, uint8_t* dst,
                                int64_t n_in, int64_t steps) {
  const int64_t tile = blockIdx.x, rb = tile / steps, u = tile % steps;
  const int w = threadIdx.x;
  uint8_t* out = dst + tile * kMxTileBytes;
  if (w < 256) {  // lane l = (w / 4) % 32, half h = w / 128, word j = w % 4 of the 16 bytes
    const int l = (w / 4) % 32, h = w / 128, j = w % 4, g = l / 4, t = l % 4;
    const int64_t row = rb * 32 + g + 8 * (2 * h + j / 2);
    const int word = (j & 1) ? t + 4 : t;
    const uint8_t* src = q + row * (n_in / 2) + u * 32 + 4 * word;
    for (int b = 0; b < 4; ++b) out[16 * (w / 4) + 4 * j + b] = src[b];
  } else if (w < 256 + 32) {  // rows g + 8 i: the pair of E8M0 bytes of blocks 2u, 2u + 1
    const int r = w - 256, g = r / 4, i = r % 4;
    const uint8_t* src = s + (rb * 32 + g + 8 * i) * (n_in / 32) + 2 * u;
    out[1024 + 8 * g + 2 * i] = src[0];
    out[1024 + 8 * g + 2 * i + 1] = src[1];
  }
}

}  // namespace

void launch_mx_tiles(const uint8_t* q, const uint8_t* s, uint8_t* dst, int64_t n_in, int64_t rows, cudaStream_t st) {
  const int64_t steps = n_in / 64, tiles = rows / 32 * steps;
  mx_tiles_kernel<<<static_cast<unsigned>(tiles), 288, 0, st>>>(q, s, dst, n_in, steps);
  BRASS_CUDA_LAUNCHED();
}

int sm_count() {
  static int n = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    return v > 0 ? v : 100;
  }();
  return n;
}

void launch_matmul(const MatmulP& a, cudaStream_t st) {
  if (a.n_tok <= 0) return;
  const DevW& w = a.w;
  const int n_sm = sm_count();
  if (w.type == kF32 && w.rows <= 64 && a.n_tok >= 512) {  // few rows, many tokens: the router at prefill
    const dim3 grid(static_cast<unsigned>((a.n_tok + kTT - 1) / kTT), static_cast<unsigned>((w.rows + kTR - 1) / kTR));
    matmul_f32_tiled_kernel<<<grid, 256, 0, st>>>(w, a.bias, a.x, a.y, a.n_tok);
    BRASS_CUDA_LAUNCHED();
    return;
  }
  switch (w.type) {
    case kF32: matmul_typed<kF32>(w, a, st, n_sm); break;
    case kF16: matmul_typed<kF16>(w, a, st, n_sm); break;
    case kBF16: matmul_typed<kBF16>(w, a, st, n_sm); break;
    case kQ8: matmul_typed<kQ8>(w, a, st, n_sm); break;
    default: matmul_typed<kMX>(w, a, st, n_sm); break;
  }
}

void launch_rms_norm(const RmsP& a, bool add, cudaStream_t st) {
  if (a.n_rows <= 0) return;
  // Without add, out may alias y: each thread re-reads only elements it owns.
  if (add)
    launch_pdl(rms_norm_kernel<true>, dim3(static_cast<unsigned>(a.n_rows)), dim3(1024), 0, st, a.y, a.x, a.weight,
               a.out, a.n, a.eps);
  else
    launch_pdl(rms_norm_kernel<false>, dim3(static_cast<unsigned>(a.n_rows)), dim3(1024), 0, st, a.y,
               static_cast<const float*>(nullptr), a.weight, a.out, a.n, a.eps);
  BRASS_CUDA_LAUNCHED();
}

void launch_add(const AddP& a, cudaStream_t st) {
  if (a.n <= 0) return;
  const int64_t blocks = std::min<int64_t>((a.n + 255) / 256, 4096);
  add_kernel<<<static_cast<unsigned>(blocks), 256, 0, st>>>(a.y, a.x, a.n);
  BRASS_CUDA_LAUNCHED();
}

void launch_embed(const EmbedP& a, cudaStream_t st) {
  if (a.n_tok <= 0) return;
  const dim3 grid(static_cast<unsigned>(a.n_tok), static_cast<unsigned>((a.table.n_in + 255) / 256));
  embed_kernel<<<grid, 256, 0, st>>>(a.table, a.tokens, a.out);
  BRASS_CUDA_LAUNCHED();
}

void launch_rope(const RopeP& a, cudaStream_t st) {
  if (a.n_tok <= 0) return;
  const int64_t half = std::max<int64_t>(a.head_dim / 2, 1), hpb = std::max<int64_t>(1, 256 / half);
  const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, std::min(hpb, a.n_heads) * half)));
  const dim3 grid(static_cast<unsigned>(a.n_tok), static_cast<unsigned>((a.n_heads + hpb - 1) / hpb));
  rope_kernel<<<grid, threads, a.head_dim * sizeof(float), st>>>(a.x, a.pos, a.inv_freq, a.mscale, a.n_heads,
                                                                  a.head_dim, hpb);
  BRASS_CUDA_LAUNCHED();
}

void launch_gather_rows(const GatherP& a, cudaStream_t st) {
  if (a.n_rows <= 0) return;
  gather_kernel<<<static_cast<unsigned>(a.n_rows), 256, 0, st>>>(a.x, a.rows, a.out, a.n);
  BRASS_CUDA_LAUNCHED();
}

void launch_router(const RouterP& a, cudaStream_t st) {
  if (a.n_tok <= 0) return;
  const unsigned blocks = static_cast<unsigned>((a.n_tok + 3) / 4);
  router_kernel<<<blocks, 128, 0, st>>>(a.logits, a.ids, a.weights, a.n_tok, a.n_expert, a.k);
  BRASS_CUDA_LAUNCHED();
}

void launch_argmax(const ArgmaxP& a, void* partial, unsigned* counter, cudaStream_t st) {
  if (a.n_rows <= 0) return;
  dim3 grid(static_cast<unsigned>(argmax_parts(a.n_rows)), static_cast<unsigned>(a.n_rows));
  launch_pdl(argmax_kernel, grid, dim3(256), 0, st, a, static_cast<ArgBest*>(partial), counter);
  BRASS_CUDA_LAUNCHED();
}

void launch_repack(DType type, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t rows, cudaStream_t st) {
  const int64_t n_blocks = rows * (n_in / 32);
  const unsigned grid = static_cast<unsigned>((n_blocks + 255) / 256);
  if (type == DType::Q8_0) {
    repack_q8_kernel<<<grid, 256, 0, st>>>(src, reinterpret_cast<int8_t*>(dst),
                                           reinterpret_cast<__half*>(dst + split_scale_offset(rows * n_in)), n_blocks);
  } else {
    repack_mx_kernel<<<grid, 256, 0, st>>>(src, dst, dst + split_scale_offset(rows * n_in / 2), n_blocks);
  }
  BRASS_CUDA_LAUNCHED();
}

}  // namespace brass::backend::cuda
