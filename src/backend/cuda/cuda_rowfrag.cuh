// A lane's share of one Q8_0 / MXFP4 weight row (split layouts, cuda_common.cuh) held in
// registers, so a single-token kernel can issue every weight load of its rows at once,
// and for static weights before it waits for the previous kernel (PDL): the loads then
// overlap that kernel's tail instead of following it. Chunk c (16 quant bytes: 16 Q8_0
// elements or 32 MXFP4 codes) belongs to lane c % 32, slot c / 32; a row has
// frag_chunks(n_in) chunks and a fragment holds up to C per lane. The dot product sums a
// lane's chunks in the order row_dot_q8x does, so warp_sum gives its bits.
#pragma once

#include "backend/cuda/cuda_common.cuh"

namespace brass::backend::cuda {

template <int TYPE>
__host__ __device__ __forceinline__ int frag_chunks(int64_t n_in) {
  return static_cast<int>(TYPE == kQ8 ? n_in / 16 : n_in / 32);
}

template <int C>
struct RowFrag {
  uint4 q[C];
  uint32_t s[C];  // raw scale bits: Q8_0 f16 (per 2 chunks), MXFP4 E8M0
};

// Only the scales of frag_load (for rows whose quants are staged elsewhere).
// EF: the loads ask the L2 to give their lines up first (l2_policy_evict_first).
template <int C, bool EF = false>
__device__ __forceinline__ void frag_load_mx_scales(RowFrag<C>& f, const DevW& w, int64_t r, int lane) {
  const int nc = frag_chunks<kMX>(w.n_in);
  const uint64_t pol = EF ? l2_policy_evict_first() : 0;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane + i * kWarp;
    const uint8_t* a = w.s + r * (w.n_in / 32) + c;
    f.s[i] = c < nc ? (EF ? ldg_u8_hint(a, pol) : __ldg(a)) : 0u;
  }
}

template <int TYPE, int C, bool EF = false>
__device__ __forceinline__ void frag_load(RowFrag<C>& f, const DevW& w, int64_t r, int lane) {
  const int64_t n = w.n_in;
  const int nc = frag_chunks<TYPE>(n);
  const uint8_t* qr = w.q + r * (TYPE == kQ8 ? n : n / 2);
  const uint64_t pol = EF ? l2_policy_evict_first() : 0;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane + i * kWarp;
    if (c < nc) {
      const auto* qa = reinterpret_cast<const uint4*>(qr + c * 16);
      f.q[i] = EF ? ldg_u4_hint(qa, pol) : __ldg(qa);
      if constexpr (TYPE == kQ8) {
        const auto* sa = reinterpret_cast<const unsigned short*>(w.s) + r * (n / 32) + (c >> 1);
        f.s[i] = EF ? ldg_u16_hint(sa, pol) : __ldg(sa);
      } else {
        f.s[i] = EF ? ldg_u8_hint(w.s + r * (n / 32) + c, pol) : __ldg(w.s + r * (n / 32) + c);
      }
    } else {
      f.q[i] = make_uint4(0, 0, 0, 0);
      f.s[i] = 0;
    }
  }
}

// Q8_0 chunk (16 quants q, f16 scale bits s) times its 16 int8 activations a (scale xs):
// dp4a over the 16 bytes, then scaled by the weight's and the activations' scales.
__device__ __forceinline__ float q8_term(uint4 q, uint32_t s, int4 a, float xs) {
  int d = __dp4a(static_cast<int>(q.x), a.x, 0);
  d = __dp4a(static_cast<int>(q.y), a.y, d);
  d = __dp4a(static_cast<int>(q.z), a.z, d);
  d = __dp4a(static_cast<int>(q.w), a.w, d);
  return static_cast<float>(d) * (__half2float(__ushort_as_half(static_cast<unsigned short>(s))) * xs);
}
__device__ __forceinline__ int4 q8_chunk_x(const int8_t* xq, int c) { return *reinterpret_cast<const int4*>(xq + c * 16); }
__device__ __forceinline__ float q8_chunk_term(uint4 q, uint32_t s, const int8_t* xq, const float* xd, int c) {
  return q8_term(q, s, q8_chunk_x(xq, c), xd[c >> 1]);
}

// MXFP4 chunk (32 codes q, E8M0 scale s) times its 32 int8 activations in MXFP4 order (xw,
// scale xs).
struct MxX {
  int w[8];
};
__device__ __forceinline__ MxX mx_chunk_x(const int8_t* xq, int c) {
  const int4 a = *reinterpret_cast<const int4*>(xq + c * 32);
  const int4 b = *reinterpret_cast<const int4*>(xq + c * 32 + 16);
  return MxX{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}};
}
__device__ __forceinline__ float mx_term(uint4 q, uint32_t s, const MxX& x, float xs, MxLut lut = {}) {
  return static_cast<float>(mx_dot(q, x.w, lut)) * (e8m0_half_mad(s & 0xffu) * xs);
}
__device__ __forceinline__ float mx_chunk_term(uint4 q, uint32_t s, const int8_t* xq, const float* xd, int c,
                                               MxLut lut = {}) {
  return mx_term(q, s, mx_chunk_x(xq, c), xd[c], lut);
}

// MxLut as a copy a lane in shared memory (slut: 2 * kWarp words), so that ptxas holds the
// tables in registers (cuda_common.cuh, mx_dot): threads 0..31 store, and after a barrier
// each lane reads its own copy.
__device__ __forceinline__ void mx_lut_store(uint32_t* slut, int t) {
  if (t < kWarp) {
    slut[t] = kMxP0;
    slut[kWarp + t] = kMxN0;
  }
}
__device__ __forceinline__ MxLut mx_lut_load(const uint32_t* slut, int lane) { return {slut[lane], slut[kWarp + lane]}; }

// frag_dot<kMX, C> over a row whose codes are staged in shared memory (q: n_in / 2 bytes)
// and whose scales a fragment holds (f.s; f.q unused): the same terms in the same order.
template <int C>
__device__ __forceinline__ float staged_dot_mx(const uint8_t* q, const RowFrag<C>& f, const int8_t* xq,
                                               const float* xd, int nc, int lane, MxLut lut = {}) {
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane + i * kWarp;
    if (c < nc) acc += mx_chunk_term(reinterpret_cast<const uint4*>(q)[c], f.s[i], xq, xd, c, lut);
  }
  return acc;
}

// The lane's partial of row . x for quantized activations xq / xd (natural order for
// Q8_0, MXFP4 order for MXFP4; shared or global memory, 16-byte aligned).
template <int TYPE, int C>
__device__ __forceinline__ float frag_dot(const RowFrag<C>& f, const int8_t* xq, const float* xd, int nc, int lane) {
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane + i * kWarp;
    if (c < nc) {
      if constexpr (TYPE == kQ8) {
        acc += q8_chunk_term(f.q[i], f.s[i], xq, xd, c);
      } else {
        acc += mx_chunk_term(f.q[i], f.s[i], xq, xd, c);
      }
    }
  }
  return acc;
}

// frag_dot of two rows at once (gate and up; a q/k/v pair), each chunk's activations read
// once for both: per row the same terms in the same order as frag_dot.
template <int TYPE, int C>
__device__ __forceinline__ float2 frag_dot2(const RowFrag<C>& f0, const RowFrag<C>& f1, const int8_t* xq,
                                            const float* xd, int nc, int lane, MxLut lut = {}) {
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane + i * kWarp;
    if (c < nc) {
      if constexpr (TYPE == kQ8) {
        const int4 x = q8_chunk_x(xq, c);
        const float xs = xd[c >> 1];
        a0 += q8_term(f0.q[i], f0.s[i], x, xs);
        a1 += q8_term(f1.q[i], f1.s[i], x, xs);
      } else {
        const MxX x = mx_chunk_x(xq, c);
        const float xs = xd[c];
        a0 += mx_term(f0.q[i], f0.s[i], x, xs, lut);
        a1 += mx_term(f1.q[i], f1.s[i], x, xs, lut);
      }
    }
  }
  return make_float2(a0, a1);
}

// frag_dot<kQ8, C> of two rows staged in shared memory (q0 / q1: n_in bytes each; s0 / s1:
// n_in / 32 f16 scales) instead of registers, each chunk's activations read once for both:
// per row the terms of frag_dot<kQ8> in the same order.
template <int C>
__device__ __forceinline__ float2 staged_dot2_q8(const uint8_t* q0, const unsigned short* s0, const uint8_t* q1,
                                                 const unsigned short* s1, const int8_t* xq, const float* xd, int nc,
                                                 int lane) {
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int c = lane + i * kWarp;
    if (c < nc) {
      const int4 x = q8_chunk_x(xq, c);
      const float xs = xd[c >> 1];
      a0 += q8_term(reinterpret_cast<const uint4*>(q0)[c], s0[c >> 1], x, xs);
      a1 += q8_term(reinterpret_cast<const uint4*>(q1)[c], s1[c >> 1], x, xs);
    }
  }
  return make_float2(a0, a1);
}

// Fragment sizes the single-token kernels are built for: the smallest one that holds
// `chunks` per lane, or 0 (the caller falls back to the streaming kernels). 1 serves the
// tiny test models; 3 / 6 / 8 gpt-oss (MXFP4 2880: 90 chunks; Q8_0 2880: 180; Q8_0
// 4096: 256).
inline int frag_size(int chunks) {
  for (int c : {1, 3, 6, 8})
    if (chunks <= c * kWarp) return c;
  return 0;
}

}  // namespace brass::backend::cuda
