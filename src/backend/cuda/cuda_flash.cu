// Prefill attention on tensor cores (flash attention, mma.sync m16n8k16 f16 -> f32) for
// the f16 KV cache and head_dim 64 (gpt-oss). grid (n_head_kv, ceil(n_tok / 16)); one
// warp per query head of the kv group (n_head / n_head_kv warps, at most 16), each warp
// owning the block's 16 tokens for its head, so every K/V tile in shared memory serves
// the whole group. Per tile of 64 keys: S = Q K^T (32 mma), mask (causal, window, tile
// past the chunk), online softmax in the exp2 domain (scale * log2 e folded into Q),
// P (f16, straight from the S accumulators) times V (32 mma). The sink logit joins the
// final max and denominator only. Q and P are rounded to f16 (the only numerical
// difference from the reference: relative ~2^-11 per element). V is stored transposed
// in shared memory so that both mma B operands are plain 32-bit loads; rows padded by
// 8 halves so the quad/group access pattern hits 32 distinct banks.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_common.cuh"

namespace brass::backend::cuda {
namespace {

constexpr int kD = 64, kTok = 16, kKeys = 64, kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;

struct FlashParams {
  const float* q;      // seq's first token row: (n_tok, n_head, 64)
  float* out;          // (n_tok, n_head * 64)
  const __half* k;     // cache rows of (n_head_kv, 64)
  const __half* v;
  const float* sinks;  // (n_head) or null
  KvAddr kv;           // position -> cache row (paged / ring / linear)
  int32_t n_tok, pos0, window, n_head, n_head_kv, rep;
  float scale;
};

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(512) flash_prefill_kernel(FlashParams p) {
  __shared__ __align__(16) __half ks[kKeys][kD + kPad];  // K tile [key][dim]
  __shared__ __align__(16) __half vt[kD][kKeys + kPad];  // V tile transposed [dim][key]
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = blockIdx.x, h = g * p.rep + warp;
  const int t0 = blockIdx.y * kTok;
  const int gid = lane >> 2, tig = lane & 3;
  const int ta = t0 + gid, tb = ta + 8;  // this lane's two query rows
  const bool va = ta < p.n_tok, vb = tb < p.n_tok;
  const int pa = p.pos0 + ta, pb = p.pos0 + tb;

  // Q fragments (A operand, rows ta / tb, 4 chunks of 16 dims), pre-scaled for exp2.
  uint32_t qf[4][4];
  {
    const float s = p.scale * kLog2e;
    const float* qa = p.q + (static_cast<int64_t>(va ? ta : 0) * p.n_head + h) * kD;
    const float* qb = p.q + (static_cast<int64_t>(vb ? tb : 0) * p.n_head + h) * kD;
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      const int d = kc * 16 + tig * 2;
      const float2 a0 = va ? *reinterpret_cast<const float2*>(qa + d) : make_float2(0.f, 0.f);
      const float2 b0 = vb ? *reinterpret_cast<const float2*>(qb + d) : make_float2(0.f, 0.f);
      const float2 a1 = va ? *reinterpret_cast<const float2*>(qa + d + 8) : make_float2(0.f, 0.f);
      const float2 b1 = vb ? *reinterpret_cast<const float2*>(qb + d + 8) : make_float2(0.f, 0.f);
      qf[kc][0] = pack_half2(a0.x * s, a0.y * s);
      qf[kc][1] = pack_half2(b0.x * s, b0.y * s);
      qf[kc][2] = pack_half2(a1.x * s, a1.y * s);
      qf[kc][3] = pack_half2(b1.x * s, b1.y * s);
    }
  }
  float o[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;  // l: this lane's partial sums

  const int last = min(t0 + kTok, p.n_tok) - 1;
  const int hi = p.pos0 + last;  // keys [lo, hi] cover every query of the block
  const int lo = p.window > 0 ? max(0, p.pos0 + t0 - p.window + 1) : 0;
  for (int kp0 = lo; kp0 <= hi; kp0 += kKeys) {
    __syncthreads();  // the previous tile is consumed
    for (int i = threadIdx.x; i < kKeys * (kD / 8); i += blockDim.x) {
      const int r = i / (kD / 8), c = i % (kD / 8);
      const int kp = kp0 + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);  // past hi: zeros (never NaN)
      if (kp <= hi) {
        const int64_t slot = p.kv.row(kp);
        const int64_t off = (slot * p.n_head_kv + g) * kD + c * 8;
        kv = *reinterpret_cast<const uint4*>(p.k + off);
        vv = *reinterpret_cast<const uint4*>(p.v + off);
      }
      *reinterpret_cast<uint4*>(&ks[r][c * 8]) = kv;
      const __half* vh = reinterpret_cast<const __half*>(&vv);
#pragma unroll
      for (int j = 0; j < 8; ++j) vt[c * 8 + j][r] = vh[j];
    }
    __syncthreads();

    float s[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&ks[nt * 8 + gid][kc * 16 + tig * 2]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&ks[nt * 8 + gid][kc * 16 + 8 + tig * 2]);
        mma16816(s[nt], qf[kc], b0, b1);
      }
    }
    float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = kp0 + nt * 8 + tig * 2 + e;
        const bool oka = va && key <= pa && (p.window <= 0 || key > pa - p.window);
        const bool okb = vb && key <= pb && (p.window <= 0 || key > pb - p.window);
        s[nt][e] = oka ? s[nt][e] : -INFINITY;
        s[nt][2 + e] = okb ? s[nt][2 + e] : -INFINITY;
        mxa = fmaxf(mxa, s[nt][e]);
        mxb = fmaxf(mxb, s[nt][2 + e]);
      }
    }
#pragma unroll
    for (int o_ = 1; o_ <= 2; o_ <<= 1) {
      mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, o_));
      mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, o_));
    }
    const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb);
    // A row with no visible key yet keeps max -inf: factor 1, probabilities 0.
    const float fa = na == -INFINITY ? 1.f : exp2f(ma - na), fb = nb == -INFINITY ? 1.f : exp2f(mb - nb);
    ma = na;
    mb = nb;
    la *= fa;
    lb *= fb;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      o[nt][0] *= fa;
      o[nt][1] *= fa;
      o[nt][2] *= fb;
      o[nt][3] *= fb;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = na == -INFINITY ? 0.f : exp2f(s[nt][e] - na);
        s[nt][2 + e] = nb == -INFINITY ? 0.f : exp2f(s[nt][2 + e] - nb);
        la += s[nt][e];
        lb += s[nt][2 + e];
      }
    }
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {  // 16 keys per chunk: S n-tiles 2kc and 2kc + 1
      const uint32_t a[4] = {pack_half2(s[2 * kc][0], s[2 * kc][1]), pack_half2(s[2 * kc][2], s[2 * kc][3]),
                             pack_half2(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                             pack_half2(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&vt[nt * 8 + gid][kc * 16 + tig * 2]);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&vt[nt * 8 + gid][kc * 16 + 8 + tig * 2]);
        mma16816(o[nt], a, b0, b1);
      }
    }
  }
#pragma unroll
  for (int o_ = 1; o_ <= 2; o_ <<= 1) {
    la += __shfl_xor_sync(0xffffffffu, la, o_);
    lb += __shfl_xor_sync(0xffffffffu, lb, o_);
  }
  // The sink joins the max and the denominator (no value row).
  float ra, rb;
  if (p.sinks) {
    const float sk = p.sinks[h] * kLog2e;
    const float fa = fmaxf(ma, sk), fb = fmaxf(mb, sk);
    const float ea = exp2f(ma - fa), eb = exp2f(mb - fb);
    ra = ea / (la * ea + exp2f(sk - fa));
    rb = eb / (lb * eb + exp2f(sk - fb));
  } else {
    ra = 1.f / la;
    rb = 1.f / lb;
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int d = nt * 8 + tig * 2;
    if (va)
      *reinterpret_cast<float2*>(p.out + (static_cast<int64_t>(ta) * p.n_head + h) * kD + d) =
          make_float2(o[nt][0] * ra, o[nt][1] * ra);
    if (vb)
      *reinterpret_cast<float2*>(p.out + (static_cast<int64_t>(tb) * p.n_head + h) * kD + d) =
          make_float2(o[nt][2] * rb, o[nt][3] * rb);
  }
}

}  // namespace

bool flash_prefill_supported(const AttentionP& a, const SeqP& s) {
  const int64_t rep = a.n_head_kv > 0 ? a.n_head / a.n_head_kv : 0;
  return a.kv_type == DType::F16 && a.head_dim == kD && a.n_head % a.n_head_kv == 0 && rep >= 1 && rep <= 16 &&
         s.n_tok >= kTok;
}

void launch_flash_prefill(const AttentionP& a, const SeqP& s, cudaStream_t st) {
  FlashParams p;
  p.q = a.q + s.tok0 * a.n_head * kD;
  p.out = a.out + s.tok0 * a.n_head * kD;
  p.k = static_cast<const __half*>(s.k);
  p.v = static_cast<const __half*>(s.v);
  p.sinks = a.sinks;
  p.n_tok = static_cast<int32_t>(s.n_tok);
  p.pos0 = s.pos0;
  p.kv = kv_addr(s);
  p.window = a.window;
  p.n_head = static_cast<int32_t>(a.n_head);
  p.n_head_kv = static_cast<int32_t>(a.n_head_kv);
  p.rep = static_cast<int32_t>(a.n_head / a.n_head_kv);
  p.scale = a.scale;
  dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>((s.n_tok + kTok - 1) / kTok));
  flash_prefill_kernel<<<grid, p.rep * kWarp, 0, st>>>(p);
  BRASS_CUDA_LAUNCHED();
}

}  // namespace brass::backend::cuda
