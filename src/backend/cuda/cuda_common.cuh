// Device-side pieces shared by the CUDA backend's kernels: warp reductions, the weight
// row dot products of every supported type (16-byte loads), the MXFP4 table.
//
// Device weight layouts (made by prepare_weight, read by every kernel):
// - F32 / F16 / BF16: the ggml layout unchanged (rows of ne[0] elements).
// - Q8_0 "split": int8 quants [rows][n_in], then (at a 256-byte aligned offset)
//   f16 scales [rows][n_in / 32]. Rows of quants are 16-byte aligned (n_in % 32 == 0),
//   so a thread reads 16 quants with one 16-byte load.
// - MXFP4 "split": packed nibbles [rows][n_in / 2] (a block's 16 bytes, low nibble =
//   element j, high = j + 16, as in ggml), then E8M0 exponents [rows][n_in / 32].
// rows = ne[1] * ne[2] * ne[3] (experts stacked).
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_kernels.h"

namespace brass::backend::cuda {

inline constexpr int kWarp = 32;

// ---- programmatic dependent launch (PDL) ----
// The weight-streaming kernels are launched with programmatic stream serialization: their
// blocks may start while the previous kernel still runs, prefetch their (static) weight
// bytes into L2, and only then wait (pdl_wait) for the previous kernel's results. Every
// kernel calls pdl_trigger once it no longer needs to hold back its dependents: at its
// start, or right after its own pdl_wait. Because triggers come after waits, when a
// kernel's pre-wait code runs, every kernel before its predecessor has completed (so
// e.g. the MoE down kernel may read the router's expert ids before its wait).
// Both instructions are no-ops for kernels launched without the attribute.
// A read-only load (__ldg, ld.global.nc) written before pdl_wait is not bound to stay
// there: ptxas may sink it below the wait (griddepcontrol.wait, ACQBULK in SASS) towards
// its first use, even when the PTX has it above. Seen in the SASS (session 22): all of
// norm_router_kernel's router-row / norm-weight loads and the output head's first batch
// went out after the wait; wo's, q/k/v's and down's pre-wait loads and copies stay above.
// norm_router now waits with pdl_wait_fenced (below), which keeps its loads above the wait
// (H200: norm_router 5.74 -> 5.33 us a layer, tg128 +1%); the head's first batch kept
// above it the same way measured no gain (session 23).
// cp.async copies (cp_async16) and bulk prefetches are issued where they are written. Check
// a new kernel's SASS (bench/cuda_device_run.sh sass) rather than trusting the source.
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// pdl_wait for a kernel whose read-only loads written before it ptxas would otherwise sink
// below it (above): an untaken branch ends the basic block after those loads, and ptxas
// issues them there, before the wait (SASS: bench/cuda_device_run.sh sass). The kernel
// must be launched with gridDim.z == 1 (the branch traps otherwise).
__device__ __forceinline__ void pdl_wait_fenced() {
  if (gridDim.z != 1u) __trap();
  pdl_wait();
}
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Asynchronous global -> shared copies (LDGSTS): no registers held while in flight;
// cp_async_wait_all waits for this thread's copies (a barrier then shows them to others).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Groups: cp_async_commit closes this thread's copies issued since the last commit into a
// group; cp_async_wait_group<N> waits until at most its N newest groups are still pending
// (a ring of stages: wait for the oldest, keep the next ones in flight).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Copies n elements global -> shared with up to U loads of a thread in flight at once. A
// plain copy loop waits one L2 round trip per step: each store needs its load's value, and
// the compiler does not move the next load above a store that may alias it. (Unconditional
// loads with a clamped index, as in load_row_f4, measured the same in down's copy on the
// H200 and took 8 more registers.) CG: the loads go through L2 only (__ldcg).
template <int U, class T, bool CG = false>
__device__ __forceinline__ void copy_to_smem(T* dst, const T* src, int n) {
  for (int base = 0; base < n; base += U * static_cast<int>(blockDim.x)) {
    T v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
      if (i < n) v[u] = CG ? __ldcg(src + i) : src[i];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
      if (i < n) dst[i] = v[u];
    }
  }
}

// The float4s threadIdx.x + i T (i < V) of a row of n4 (>= 1) float4s, zero past it. Every
// load is unconditional (the index clamped into the row, the value dropped after), so all
// are in flight at once: written as a load under `if (j < n4)` each, the PTX puts every
// load in its own branch and ptxas kept them in order (norm_router's SASS on sm_90a had a
// branch between each: one L2 round trip apiece after the PDL wait).
template <int V, int T>
__device__ __forceinline__ void load_row_f4(const float4* row, int n4, float4 (&v)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = row[min(static_cast<int>(threadIdx.x) + i * T, n4 - 1)];
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (static_cast<int>(threadIdx.x) + i * T >= n4) v[i] = make_float4(0, 0, 0, 0);
}

// Bulk L2 prefetch of [p, p + bytes), widened to 16-byte alignment.
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(15);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes + 15) & ~uintptr_t(15);
  if (e > a)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(static_cast<uint32_t>(e - a)) : "memory");
}

// L2 eviction priority evict_first (sm_80+) for loads and copies with .L2::cache_hint:
// weights streamed once give their L2 lines up before others.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint4 ldg_u4_hint(const void* a, uint64_t pol) {
  uint4 v;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(a), "l"(pol));
  return v;
}
__device__ __forceinline__ uint32_t ldg_u8_hint(const void* a, uint64_t pol) {
  uint32_t v;
  asm volatile("ld.global.nc.L2::cache_hint.u8 %0, [%1], %2;" : "=r"(v) : "l"(a), "l"(pol));
  return v;
}
__device__ __forceinline__ uint32_t ldg_u16_hint(const void* a, uint64_t pol) {
  uint32_t v;
  asm volatile("ld.global.nc.L2::cache_hint.u16 %0, [%1], %2;" : "=r"(v) : "l"(a), "l"(pol));
  return v;
}
__device__ __forceinline__ void cp_async16_hint(void* dst, const void* src, uint64_t pol) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "l"(pol) : "memory");
}

// Ticket for "the last one to finish does the rest" (an atomic add of 1, old value back):
// the release makes this thread's earlier writes visible to whoever draws the last
// ticket, the acquire makes everyone's visible to it (its block's other threads see them
// after a barrier).
__device__ __forceinline__ unsigned ticket_acq_rel(unsigned* c) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
  return old;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Half the E8M0 scale 2^(e - 127) as f32 bits (subnormal for e < 2).
__host__ __device__ constexpr uint32_t e8m0_half_bits(uint32_t e) {
  return e < 2u ? (0x00200000u << e) : (e - 1u) << 23;
}
__device__ __forceinline__ float e8m0_half(uint8_t e) { return __uint_as_float(e8m0_half_bits(e)); }
// The same bits as multiply-adds: 0x200000 (e + 1) for e < 2, 0x800000 (e - 1) above; the
// one-token MXFP4 terms (mx_term) issue 4 instructions for it instead of 7. With the MoE's
// loads evict_first (cuda_q8_pre.cu), H200, one build, three rounds (session 41): tg128
// 899.2-902.9 -> 897.3-901.4 tok/s, @ d4096 838.4-839.5 -> 847.9-849.2 (alone: tg128 -0.6%,
// @ d4096 +0.8%; session 40 measured the same signs).
__host__ __device__ constexpr uint32_t e8m0_half_bits_mad(uint32_t e) {
  return e < 2u ? e * 0x200000u + 0x200000u : e * 0x800000u - 0x800000u;
}
constexpr bool e8m0_mad_exact() {
  for (uint32_t e = 0; e < 256u; ++e)
    if (e8m0_half_bits_mad(e) != e8m0_half_bits(e)) return false;
  return true;
}
static_assert(e8m0_mad_exact(), "e8m0_half_bits_mad must give e8m0_half_bits for every E8M0 byte");
__device__ __forceinline__ float e8m0_half_mad(uint32_t e) { return __uint_as_float(e8m0_half_bits_mad(e)); }

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ float f16_bits_to_f32(uint16_t b) { return __half2float(__ushort_as_half(b)); }

// Dot product of weight row r with NT activation vectors x[t] (stride n_in floats),
// accumulated into acc[t] for t < nt. The row is cut into chunks (16 elements for Q8_0,
// 32 for MXFP4, 4 for F32, 8 for F16/BF16 on the vector path, 1 otherwise); this
// thread takes chunks part, part + P, ... `lut` is the MXFP4 table (doubled E2M1
// values) in shared memory. The caller reduces acc over the P threads.
template <int TYPE, int NT>
__device__ __forceinline__ void row_dot(const DevW& w, int64_t r, const float* __restrict__ x, int nt,
                                        float (&acc)[NT], int part, int P, const float* lut) {
  const int64_t n = w.n_in;
  if constexpr (TYPE == kQ8) {
    const int8_t* qr = reinterpret_cast<const int8_t*>(w.q) + r * n;
    const __half* sr = reinterpret_cast<const __half*>(w.s) + r * (n / 32);
    const int64_t nc = n / 16;
#pragma unroll 2
    for (int64_t c = part; c < nc; c += P) {
      const int4 qv = __ldg(reinterpret_cast<const int4*>(qr + c * 16));
      const float d = __half2float(sr[c >> 1]);
      const uint32_t wd[4] = {static_cast<uint32_t>(qv.x), static_cast<uint32_t>(qv.y), static_cast<uint32_t>(qv.z),
                              static_cast<uint32_t>(qv.w)};
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < nt) {
          const float4* xv = reinterpret_cast<const float4*>(x + t * n + c * 16);
          float s = 0.f;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float4 xx = __ldg(xv + i);
            s += static_cast<float>(static_cast<int8_t>(wd[i])) * xx.x +
                 static_cast<float>(static_cast<int8_t>(wd[i] >> 8)) * xx.y +
                 static_cast<float>(static_cast<int8_t>(wd[i] >> 16)) * xx.z +
                 static_cast<float>(static_cast<int8_t>(wd[i] >> 24)) * xx.w;
          }
          acc[t] += d * s;
        }
      }
    }
  } else if constexpr (TYPE == kMX) {
    const uint8_t* qr = w.q + r * (n / 2);
    const uint8_t* er = w.s + r * (n / 32);
    const int64_t nc = n / 32;
#pragma unroll 2
    for (int64_t c = part; c < nc; c += P) {
      const uint4 qv = __ldg(reinterpret_cast<const uint4*>(qr + c * 16));
      const float d = e8m0_half(er[c]);
      const uint32_t wd[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < nt) {
          const float4* xv = reinterpret_cast<const float4*>(x + t * n + c * 32);
          float s = 0.f;
#pragma unroll
          for (int i = 0; i < 4; ++i) {  // word i: elements 4i..4i+3 (low nibbles), 16+4i.. (high)
            const float4 a = __ldg(xv + i), b = __ldg(xv + 4 + i);
            const uint32_t w = wd[i];
            s += lut[w & 15] * a.x + lut[(w >> 8) & 15] * a.y + lut[(w >> 16) & 15] * a.z + lut[(w >> 24) & 15] * a.w;
            s += lut[(w >> 4) & 15] * b.x + lut[(w >> 12) & 15] * b.y + lut[(w >> 20) & 15] * b.z +
                 lut[(w >> 28) & 15] * b.w;
          }
          acc[t] += d * s;
        }
      }
    }
  } else if constexpr (TYPE == kF32) {
    const float* wr = reinterpret_cast<const float*>(w.q) + r * n;
    if (w.vec) {
      for (int64_t c = part; c < n / 4; c += P) {
        const float4 wv = __ldg(reinterpret_cast<const float4*>(wr) + c);
#pragma unroll
        for (int t = 0; t < NT; ++t)
          if (t < nt) {
            const float4 xx = __ldg(reinterpret_cast<const float4*>(x + t * n) + c);
            acc[t] += wv.x * xx.x + wv.y * xx.y + wv.z * xx.z + wv.w * xx.w;
          }
      }
    } else {
      for (int64_t i = part; i < n; i += P) {
        const float wv = wr[i];
#pragma unroll
        for (int t = 0; t < NT; ++t)
          if (t < nt) acc[t] += wv * x[t * n + i];
      }
    }
  } else {  // F16 / BF16
    const uint16_t* wr = reinterpret_cast<const uint16_t*>(w.q) + r * n;
    auto cvt = [](uint16_t b) { return TYPE == kF16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b); };
    if (w.vec) {
      for (int64_t c = part; c < n / 8; c += P) {
        const uint4 wv = __ldg(reinterpret_cast<const uint4*>(wr) + c);
        const uint16_t* h = reinterpret_cast<const uint16_t*>(&wv);
        float wf[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) wf[j] = cvt(h[j]);
#pragma unroll
        for (int t = 0; t < NT; ++t)
          if (t < nt) {
            const float4 a = __ldg(reinterpret_cast<const float4*>(x + t * n + c * 8));
            const float4 b = __ldg(reinterpret_cast<const float4*>(x + t * n + c * 8) + 1);
            acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
                      wf[6] * b.z + wf[7] * b.w;
          }
      }
    } else {
      for (int64_t i = part; i < n; i += P) {
        const float wv = cvt(wr[i]);
#pragma unroll
        for (int t = 0; t < NT; ++t)
          if (t < nt) acc[t] += wv * x[t * n + i];
      }
    }
  }
}

// Argmax candidates: (value, index), index < 0 for none. The order of argmax_row
// (sampling.h): NaN never wins (an all-NaN row leaves none: the callers write 0), ties go
// to the lower index, so any reduction tree gives the same pick.
struct ArgBest { float v; int i; };
__device__ __forceinline__ ArgBest arg_better(ArgBest a, ArgBest b) {
  if (b.i < 0 || b.v != b.v) return a;
  if (a.i < 0 || a.v != a.v) return b;
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}
// The best of a warp's candidates, in every lane.
__device__ __forceinline__ ArgBest warp_best(ArgBest b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    b = arg_better(b, ArgBest{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)});
  return b;
}

// The end of one block's share of a row's argmax (every thread of the block calls it
// with its candidate b): the block's best goes to parts[slot]; the block that takes the
// last of n_parts tickets reduces the parts and writes the pick (0 for an all-NaN row,
// like argmax_row) to *out, and with pos set also history[*pos + 1] = pick (when
// history is set) and *pos += 1 (greedy feedback: the next step's token and position);
// then resets the ticket (a captured graph replays from 0). sh: 32 entries of shared memory.
__device__ __forceinline__ void argmax_finish(ArgBest b, ArgBest* parts, unsigned n_parts, unsigned slot,
                                              unsigned* ticket, int32_t* out, int32_t* pos, int32_t* history,
                                              ArgBest* sh) {
  __shared__ bool last;
  const int warp = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
  b = warp_best(b);
  if (threadIdx.x % kWarp == 0) sh[warp] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < nw; ++w) b = arg_better(b, sh[w]);
    parts[slot] = b;
    last = ticket_acq_rel(ticket) == n_parts - 1;
  }
  __syncthreads();
  if (!last) return;
  ArgBest best{-INFINITY, -1};
  for (unsigned k = threadIdx.x; k < n_parts; k += blockDim.x)
    best = arg_better(best, ArgBest{__ldcg(&parts[k].v), __ldcg(&parts[k].i)});
  best = warp_best(best);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) sh[warp] = best;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < nw; ++w) best = arg_better(best, sh[w]);
  const int r = best.i < 0 ? 0 : best.i;
  *out = r;
  if (pos) {
    if (history) history[*pos + 1] = r;
    *pos += 1;
  }
  *ticket = 0;
}

// The softmax over the k picked logits w[0..k) (w[0] the largest), in place, by lane 0.
__device__ __forceinline__ void topk_softmax_warp(float* w, int64_t k, int lane) {
  __syncwarp();
  if (lane == 0) {
    const float m = w[0];
    float sum = 0.f;
    for (int64_t j = 0; j < k; ++j) { w[j] = expf(w[j] - m); sum += w[j]; }
    for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
  __syncwarp();
}

// Router top-k + softmax for one token, by one warp (lane = its lane): k rounds of a warp
// argmax (ties: lower index; within a lane the first of equal values; lane 0's result
// is the round's pick) over the experts not yet taken, then the softmax over the k
// picked logits (lane 0). id / w: k entries, in global or shared memory. pick_experts
// (the router kernel and the fused MoE block, so both pick the same experts) takes it
// for more than 32 experts. Up to 128 experts the logits are read once into registers (4 per lane) and
// the taken set is a per-lane bit mask: no memory round trip per round (this runs on
// the MoE kernels' critical path when the router is fused).
constexpr int kMaxExperts = 4 * kWarp;  // router_topk_warp's register path (a shared logits row of the fused routers)
__device__ __forceinline__ void router_topk_warp(const float* __restrict__ l, int64_t n_expert, int64_t k, int32_t* id,
                                                 float* w, int lane) {
  if (n_expert <= 4 * kWarp) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = lane + i * kWarp < n_expert ? l[lane + i * kWarp] : 0.f;
    unsigned taken = 0;
    for (int64_t j = 0; j < k; ++j) {
      float bv = -INFINITY;
      int bi = INT32_MAX;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int e = lane + i * kWarp;
        if (e >= n_expert || (taken >> i & 1u)) continue;
        if (bi == INT32_MAX || v[i] > bv) { bv = v[i]; bi = e; }
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != INT32_MAX && (bi == INT32_MAX || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
      }
      bi = __shfl_sync(0xffffffffu, bi, 0);  // lane 0's pick (NaNs can make lanes disagree)
      if (bi != INT32_MAX && bi % kWarp == lane) taken |= 1u << (bi / kWarp);
      if (lane == 0) { id[j] = bi; w[j] = bv; }
    }
  } else {
    for (int64_t j = 0; j < k; ++j) {
      float bv = -INFINITY;
      int bi = INT32_MAX;
      for (int64_t e = lane; e < n_expert; e += kWarp) {
        bool taken = false;
        for (int64_t q = 0; q < j; ++q) taken = taken || id[q] == e;
        if (taken) continue;
        const float v = l[e];
        if (bi == INT32_MAX || v > bv) { bv = v; bi = static_cast<int>(e); }
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != INT32_MAX && (bi == INT32_MAX || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
      }
      if (lane == 0) { id[j] = bi; w[j] = bv; }
      __syncwarp();
    }
  }
  topk_softmax_warp(w, k, lane);
}

// A logit as an unsigned key in the float order (NaN as -inf, -0 as +0, so that equal
// floats have equal keys and the index breaks the tie); 0 lies below every key.
__device__ __forceinline__ unsigned topk_key(float v) {
  const unsigned u = __float_as_uint(v != v ? -INFINITY : v + 0.0f);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

// router_topk_warp's picks for n_expert <= 32 without a memory round trip: lane e holds
// expert e's key, and each of the k rounds takes the warp's largest key by one
// `redux.sync` max (ties: the lowest lane, by ballot), then clears it. The softmax follows
// in registers with topk_softmax_warp's arithmetic (the first pick's logit as the max, the
// exps summed in pick order, then divided); lane r stores entry r. NaN ranks as -inf, so
// every one of the k entries is written (router_topk_warp's NaN picks may differ).
// Why: the rank form before it (each lane compared its logit with all 32, read from
// memory, then lane 0's softmax through memory) took ~2,600 cycles (probe, H200): ptxas
// issued the 32 loads one compare at a time, and the last block of norm_router, which
// picks, ended ~1.4 us after the others. lg: the logits, id / w: k entries (shared or
// global memory).
__device__ __forceinline__ void router_topk_redux(const float* lg, int n_expert, int k, int32_t* id, float* w,
                                                 int lane) {
  const float raw = lane < n_expert ? lg[lane] : 0.f;
  unsigned key = lane < n_expert ? topk_key(raw) : 0u;
  const int kk = min(k, n_expert);
  float m = 0.f, sum = 0.f, mine = 0.f;
  int src_r = 0;
  for (int r = 0; r < kk; ++r) {
    const unsigned top = __reduce_max_sync(0xffffffffu, key);
    const int src = __ffs(__ballot_sync(0xffffffffu, key == top)) - 1;
    const float v = __shfl_sync(0xffffffffu, raw, src);
    if (lane == src) key = 0u;
    if (r == 0) m = v;
    const float e = expf(v - m);
    sum += e;
    if (lane == r) {
      mine = e;
      src_r = src;
    }
  }
  if (lane < kk) {
    id[lane] = src_r;
    w[lane] = mine / sum;
  }
  __syncwarp();
}

// The top k of one token's router logits and their softmax, by one warp (lane = its lane).
__device__ __forceinline__ void pick_experts(const float* lg, int n_expert, int k, int32_t* id, float* w, int lane) {
  if (n_expert <= kWarp) router_topk_redux(lg, n_expert, k, id, w, lane);
  else router_topk_warp(lg, n_expert, k, id, w, lane);
}

__device__ __forceinline__ void load_mx_lut(float* lut) {
  if (threadIdx.x < 16) {
    constexpr float kV[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    lut[threadIdx.x] = kV[threadIdx.x];
  }
}

}  // namespace brass::backend::cuda

// ---- int8-activation ("q8x") path ----
// Activations are quantized per 32 elements exactly as quant::quantize_row(Q8_0) does
// (d = amax / 127, q = round(x / d), d kept as f16), into shared memory, so that weights
// meet them in integer dot products (dp4a): 4 multiply-adds per instruction and no
// per-element float conversion or table load. The CPU twin of every q8x op is the
// reference op applied to dequantize(quantize_q8_0(x)).
namespace brass::backend::cuda {

// Position of element e (0..31) of a 32-group in the "MXFP4 order" of the int8
// activations: the order in which mx_dot's byte permutes emit a block's nibbles (per
// 4-byte word i of the block: elements 4i, 16+4i, 4i+1, 16+4i+1, then 4i+2, 16+4i+2,
// 4i+3, 16+4i+3).
__device__ __forceinline__ int mx_pos(int e) {
  const int h = e >> 4, m = e & 15, i = m >> 2, r = m & 3;
  return 8 * i + 4 * (r >> 1) + 2 * (r & 1) + h;
}

// Q8_0 of a 32-group, as quant::quantize_row(Q8_0) computes it from the group's scale
// d = |max| / 127: the reciprocal the codes use (0 for an all-zero group), an element's
// code, and the scale as stored (f16-rounded). Every activation quantizer of this backend
// uses them (the CPU twins: quant::quantize_row).
__device__ __forceinline__ float q8_inv(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }
__device__ __forceinline__ int8_t q8_code(float v, float id) { return static_cast<int8_t>(roundf(v * id)); }
__device__ __forceinline__ float q8_stored_scale(float d) { return __half2float(__float2half_rn(d)); }

// Warp-wide: one 32-element group (lane holds element `lane`) quantized exactly as
// quant::quantize_row(Q8_0) does: q[lane] (MXO: q[mx_pos(lane)]) and, from lane 0, the
// f16-rounded scale in *d.
template <bool MXO>
__device__ __forceinline__ void quantize_group_warp(float v, int lane, int8_t* q, float* d) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float dv = amax / 127.0f;
  q[MXO ? mx_pos(lane) : lane] = q8_code(v, q8_inv(dv));
  if (lane == 0) *d = q8_stored_scale(dv);
}

// One element v (index e) of a Q8_0 32-group whose |max| the caller has: the bits of
// quantize_group_warp (and quantize_x_smem): q [e], and d [e / 32] from the group's first.
__device__ __forceinline__ void q8_store(float v, float amax, int64_t e, int8_t* q, float* d) {
  const float dv = amax / 127.0f;
  q[e] = q8_code(v, q8_inv(dv));
  if (e % 32 == 0) d[e / 32] = q8_stored_scale(dv);
}

// A 32-group held as 8 neighbouring threads' float4s (threads 8k .. 8k + 7 of a warp, all
// lanes calling) quantized as quantize_group_warp does: returns the group's scale (amax /
// 127, in every thread of the group) and this thread's 4 codes round(x_e / scale).
__device__ __forceinline__ float quantize_f4_group8(float4 x, int8_t (&q)[4]) {
  float amax = fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w)));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f, id = q8_inv(d);
  const float xs[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) q[e] = q8_code(xs[e], id);
  return d;
}

// A token's normed row (float4 j of it as xv; 8 neighbouring threads a 32-group, every
// lane of the warp calling) written out where `mine`: xn (when set) and its int8 copy xq /
// xd as quantize_f4_group8 makes it (Q8_0 order, or MXFP4 order with MXO).
template <bool MXO>
__device__ __forceinline__ void store_xn_q8(float4 xv, int j, bool mine, float* xn, int8_t* xq, float* xd) {
  int8_t q[4];
  const float d = quantize_f4_group8(xv, q);
  if (!mine) return;
  const int g = j / 8;
  if (xn) reinterpret_cast<float4*>(xn)[j] = xv;
  uint32_t word = 0;  // the 4 codes at once (Q8_0 order), or one byte each (MXFP4 order)
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if constexpr (MXO) xq[g * 32 + mx_pos((j % 8) * 4 + e)] = q[e];
    else word |= (static_cast<uint32_t>(q[e]) & 0xffu) << (8 * e);
  }
  if constexpr (!MXO) reinterpret_cast<uint32_t*>(xq)[j] = word;
  if (j % 8 == 0) xd[g] = q8_stored_scale(d);
}

// Sum of v over the block (any multiple of 32 threads); sh: blockDim.x / 32 floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
  v = warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  const int nw = blockDim.x / kWarp;
  float s = 0.f;
  for (int i = 0; i < nw; ++i) s += sh[i];
  __syncthreads();
  return s;
}

// A row's residual y (+ a, when a4 is given) as this thread's V float4s (load_row_f4's
// layout, every load in flight at once) and its RMSNorm factor 1 / sqrt(mean(v^2) + eps)
// (block_sum's order; sh: a float per warp of the block). The one-token and the batched
// MoE routers (cuda_q8_pre.cu, cuda_norm_router.cu) norm their rows with it.
template <int V, int T>
__device__ __forceinline__ float residual_inv_rms(const float4* y4, const float4* a4, int n4, float eps,
                                                  float4 (&v)[V], float* sh) {
  float4 a[V];
  load_row_f4<V, T>(y4, n4, v);
  if (a4) load_row_f4<V, T>(a4, n4, a);
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (a4) v[i] = make_float4(v[i].x + a[i].x, v[i].y + a[i].y, v[i].z + a[i].z, v[i].w + a[i].w);
    ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
  }
  ss = block_sum(ss, sh);
  return 1.0f / sqrtf(ss / static_cast<float>(4 * n4) + eps);
}

// (v * s) * w per element: the RMSNorm's scaling as rms_norm_kernel orders it.
__device__ __forceinline__ float4 f4_scale(float4 v, float s, float4 w) {
  return make_float4(v.x * s * w.x, v.y * s * w.y, v.z * s * w.z, v.w * s * w.w);
}

// Where one token's K / V rows go (the batched tables: cuda_attention.cu, and the fused
// RoPE of the f16 q / k / v call, cuda_wide.cuh): its sequence's caches and its position
// (read from pos[0] on the device when set, else pos0).
struct KvDestDev {
  void* kc;
  void* vc;
  const int32_t* pos;  // or null: pos0
  KvAddr kv;
  int32_t pos0;
  __device__ int32_t position() const { return pos ? pos[0] : pos0; }
};
// Batched decode's RoPE + KV store table: a row per token (every sequence has one), its
// q / k / v rows and its cache (put_rope_rows).
struct RopeRowDev {
  float* q;
  float* k;
  const float* v;
  KvDestDev dst;
};

// K / V cache element stores (f32 or f16 caches).
// RoPE (NeoX half split) of one pair (j, j + half) of a head row xr, with the position's
// cos / sin of frequency j already scaled by mscale: the one arithmetic every rope path
// (rope_kernel, rope_store_multi_kernel) does, so their results agree bit for bit.
__device__ __forceinline__ void rope_cs(int32_t pos, float inv_freq, float mscale, float& c, float& s) {
  sincosf(static_cast<float>(pos) * inv_freq, &s, &c);
  c *= mscale;
  s *= mscale;
}
__device__ __forceinline__ void rope_pair(float& x0, float& x1, float c, float s) {
  const float a = x0, b = x1;
  x0 = a * c - b * s;
  x1 = b * c + a * s;
}

// The block's threads group slots (t, j) by expert: counts / offsets (n_expert + 1) out;
// perm: sorted position -> slot; inv: slot -> sorted position; eid: sorted position ->
// expert. The order inside an expert's group is arbitrary: every GEMM row is independent,
// and the combine sums a token's experts in j order. sh: 2 * n_expert ints of shared
// memory. (ids read through L2: other blocks of the same launch may have written them.)
__device__ __forceinline__ void group_by_expert(const int32_t* ids, int64_t n_slots, int n_expert,
                                                const MoeGroupBufs& b, int32_t* sh) {
  int32_t* cnt = sh;
  int32_t* cur = sh + n_expert;
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int64_t s = threadIdx.x; s < n_slots; s += blockDim.x) atomicAdd(&cnt[__ldcg(ids + s)], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t acc = 0;
    for (int e = 0; e < n_expert; ++e) {
      b.offsets[e] = acc;
      cur[e] = acc;
      b.counts[e] = cnt[e];
      acc += cnt[e];
    }
    b.offsets[n_expert] = acc;
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < n_slots; s += blockDim.x) {
    const int e = __ldcg(ids + s);
    const int32_t p = atomicAdd(&cur[e], 1);
    b.perm[p] = static_cast<int32_t>(s);
    b.inv[s] = p;
    b.eid[p] = e;
  }
}

__device__ __forceinline__ void store_kv(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_kv(__half* p, float v) { *p = __float2half_rn(v); }

// Block-wide: x (n floats, n % 32 == 0) -> xq (n int8) + xd (n / 32 scales), exactly as
// quantize_group_warp (quant::quantize_row(Q8_0)). A lane pair owns a group, 16 elements
// each: one round trip for the loads, one shuffle for the group's amax, one 16-byte store
// per lane. (A warp per group took 4 us for n = 4096 on the H200: 16 groups a warp, each
// a 5-shuffle reduction.) MXO: each group in MXFP4 order (mx_pos), whose bytes interleave
// the two halves: the pair swaps two words and each lane assembles its 16 bytes by prmt.
// Any block size that is a multiple of 32; xq 16-byte aligned.
template <bool MXO = false>
__device__ __forceinline__ void quantize_x_smem(const float* __restrict__ x, int n, int8_t* xq, float* xd) {
  const int halves = n / 16;
  const int rounds = (halves + blockDim.x - 1) / blockDim.x;
  for (int it = 0; it < rounds; ++it) {  // whole warps take part in the shuffles
    const int u = it * blockDim.x + threadIdx.x, h = u & 1;
    const bool live = u < halves;  // halves is even: both lanes of a pair are live or neither
    float4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = live ? reinterpret_cast<const float4*>(x + u * 16)[j] : make_float4(0, 0, 0, 0);
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      amax = fmaxf(fmaxf(fmaxf(amax, fabsf(v[j].x)), fmaxf(fabsf(v[j].y), fabsf(v[j].z))), fabsf(v[j].w));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    const float dv = amax / 127.0f, id = q8_inv(dv);
    uint32_t w[4];  // byte b of w[j]: element 4 j + b of this half
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float e[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
      uint32_t word = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        word |= (static_cast<uint32_t>(q8_code(e[b], id)) & 0xffu) << (8 * b);
      w[j] = word;
    }
    uint4 out = make_uint4(w[0], w[1], w[2], w[3]);
    if constexpr (MXO) {
      // Output bytes [16 h, 16 h + 16) hold elements 4 i + r (i = 2 h, 2 h + 1) of both halves:
      // word (i, a) = [h0 byte 2a, h1 byte 2a, h0 byte 2a+1, h1 byte 2a+1] of the halves' word i.
      const uint32_t r0 = __shfl_xor_sync(0xffffffffu, h ? w[0] : w[2], 1);
      const uint32_t r1 = __shfl_xor_sync(0xffffffffu, h ? w[1] : w[3], 1);
      const uint32_t o0 = h ? w[2] : w[0], o1 = h ? w[3] : w[1];  // own words i = 2 h, 2 h + 1
      const uint32_t a0 = h ? r0 : o0, b0 = h ? o0 : r0;          // half 0 / half 1, i = 2 h
      const uint32_t a1 = h ? r1 : o1, b1 = h ? o1 : r1;          // i = 2 h + 1
      uint32_t q0, q1, q2, q3;
      asm("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(q0) : "r"(a0), "r"(b0));
      asm("prmt.b32 %0, %1, %2, 0x7362;" : "=r"(q1) : "r"(a0), "r"(b0));
      asm("prmt.b32 %0, %1, %2, 0x5140;" : "=r"(q2) : "r"(a1), "r"(b1));
      asm("prmt.b32 %0, %1, %2, 0x7362;" : "=r"(q3) : "r"(a1), "r"(b1));
      out = make_uint4(q0, q1, q2, q3);
    }
    if (!live) continue;
    reinterpret_cast<uint4*>(xq)[u] = out;
    if (h == 0) xd[u >> 1] = q8_stored_scale(dv);
  }
}

// prmt.b32 in its default mode: per selector nibble, bits 0-2 pick a byte of {b, a}; with
// bit 3 set the result byte is the selected byte's sign bit replicated instead.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Integer dot of one 16-byte MXFP4 block (32 codes) with 32 int8 activations in MXFP4
// order (w[0..7]). A 4-bit code is sign (bit 3) + magnitude index (bits 0-2) into the
// doubled E2M1 magnitudes {0,1,2,3,4,6,8,12}. The code nibbles are used directly as
// byte-permute selectors: with the magnitude table (all bytes < 0x80), a negative code
// (bit 3 set) reads as 0, so P holds the positive elements; with the complemented code
// and the reversed table, the positive codes read as 0 and N holds the magnitudes of the
// negative elements. Sum = dp4a(P, x) - dp4a(N, x): 4 permutes + 4 dp4a per 8 codes.
// lut: the tables' low words (kMxP0, kMxN0; their high words go into the permutes as
// immediates). A permute takes the low word from a register: given constants (or one
// warp-uniform value), ptxas keeps them in uniform registers and moves them into a
// register again before every permute (an IMAD each: 16 a 32-code block in gate/up's
// SASS). The one-token MoE kernels read them from shared memory, a copy a lane, so they
// stay in registers: instructions gate/up 8.37 -> 7.49 M, down 4.39 -> 3.87 M a layer,
// tg128 860-863 -> 867-870 tok/s on the H200 (session 36, one build, two rounds).
inline constexpr uint32_t kMxP0 = 0x03020100u, kMxN0 = 0x0406080Cu;
struct MxLut {  // default: the constants
  uint32_t p0 = kMxP0, n0 = kMxN0;
};
__device__ __forceinline__ int mx_dot(uint4 q, const int* w, MxLut lut = {}) {
  constexpr uint32_t kP1 = 0x0C080604u;  // m[0..7]: m[0..3] in lut.p0
  constexpr uint32_t kN1 = 0x00010203u;  // m[7 - k]: the first four in lut.n0
  int sp = 0, sn = 0;
  const uint32_t qs[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = qs[i], nv = ~v;
    sp = __dp4a(static_cast<int>(prmt(lut.p0, kP1, v)), w[2 * i], sp);
    sn = __dp4a(static_cast<int>(prmt(lut.n0, kN1, nv)), w[2 * i], sn);
    sp = __dp4a(static_cast<int>(prmt(lut.p0, kP1, v >> 16)), w[2 * i + 1], sp);
    sn = __dp4a(static_cast<int>(prmt(lut.n0, kN1, nv >> 16)), w[2 * i + 1], sn);
  }
  return sp - sn;
}

// Weight row r . quantized activation (xq, xd in smem; natural order for Q8_0, MXFP4
// order for MXFP4), one warp, returns the lane's partial (reduce with warp_sum). Q8_0
// split: 16 quants per lane step; MXFP4: 32.
template <int TYPE>
__device__ __forceinline__ float row_dot_q8x(const DevW& w, int64_t r, const int8_t* xq, const float* xd, int lane) {
  const int64_t n = w.n_in;
  float acc = 0.f;
  if constexpr (TYPE == kQ8) {
    const int8_t* qr = reinterpret_cast<const int8_t*>(w.q) + r * n;
    const __half* sr = reinterpret_cast<const __half*>(w.s) + r * (n / 32);
    const int nc = static_cast<int>(n / 16);
#pragma unroll 4
    for (int c = lane; c < nc; c += kWarp) {
      const int4 q = __ldg(reinterpret_cast<const int4*>(qr + c * 16));
      const int4 a = *reinterpret_cast<const int4*>(xq + c * 16);
      int s = __dp4a(q.x, a.x, 0);
      s = __dp4a(q.y, a.y, s);
      s = __dp4a(q.z, a.z, s);
      s = __dp4a(q.w, a.w, s);
      acc += static_cast<float>(s) * (__half2float(sr[c >> 1]) * xd[c >> 1]);
    }
  } else {
    const uint8_t* qr = w.q + r * (n / 2);
    const uint8_t* er = w.s + r * (n / 32);
    const int nc = static_cast<int>(n / 32);
#pragma unroll 2
    for (int c = lane; c < nc; c += kWarp) {
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(qr + c * 16));
      const int4 a = *reinterpret_cast<const int4*>(xq + c * 32);
      const int4 b = *reinterpret_cast<const int4*>(xq + c * 32 + 16);
      const int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      const int s = mx_dot(q, w);
      acc += static_cast<float>(s) * (e8m0_half(__ldg(er + c)) * xd[c]);
    }
  }
  return acc;
}


// Two weight rows (possibly of two matrices) against the same quantized activation,
// their loads interleaved so that twice the bytes are in flight per lane.
template <int TYPE>
__device__ __forceinline__ void row_dot2_q8x(const DevW& w1, int64_t r1, const DevW& w2, int64_t r2, const int8_t* xq,
                                             const float* xd, int lane, float& o1, float& o2) {
  const int64_t n = w1.n_in;
  float a1 = 0.f, a2 = 0.f;
  if constexpr (TYPE == kQ8) {
    const int8_t* q1 = reinterpret_cast<const int8_t*>(w1.q) + r1 * n;
    const int8_t* q2 = reinterpret_cast<const int8_t*>(w2.q) + r2 * n;
    const __half* s1 = reinterpret_cast<const __half*>(w1.s) + r1 * (n / 32);
    const __half* s2 = reinterpret_cast<const __half*>(w2.s) + r2 * (n / 32);
    const int nc = static_cast<int>(n / 16);
#pragma unroll 4
    for (int c = lane; c < nc; c += kWarp) {
      const int4 u = __ldg(reinterpret_cast<const int4*>(q1 + c * 16));
      const int4 v = __ldg(reinterpret_cast<const int4*>(q2 + c * 16));
      const int4 a = *reinterpret_cast<const int4*>(xq + c * 16);
      const float xs = xd[c >> 1];
      int su = __dp4a(u.x, a.x, 0), sv = __dp4a(v.x, a.x, 0);
      su = __dp4a(u.y, a.y, su); sv = __dp4a(v.y, a.y, sv);
      su = __dp4a(u.z, a.z, su); sv = __dp4a(v.z, a.z, sv);
      su = __dp4a(u.w, a.w, su); sv = __dp4a(v.w, a.w, sv);
      a1 += static_cast<float>(su) * (__half2float(s1[c >> 1]) * xs);
      a2 += static_cast<float>(sv) * (__half2float(s2[c >> 1]) * xs);
    }
  } else {
    const uint8_t* q1 = w1.q + r1 * (n / 2);
    const uint8_t* q2 = w2.q + r2 * (n / 2);
    const uint8_t* e1 = w1.s + r1 * (n / 32);
    const uint8_t* e2 = w2.s + r2 * (n / 32);
    const int nc = static_cast<int>(n / 32);
#pragma unroll 3
    for (int c = lane; c < nc; c += kWarp) {
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(q1 + c * 16));
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(q2 + c * 16));
      const int4 a = *reinterpret_cast<const int4*>(xq + c * 32);
      const int4 b = *reinterpret_cast<const int4*>(xq + c * 32 + 16);
      const float xs = xd[c];
      const int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      const int su = mx_dot(u, w), sv = mx_dot(v, w);
      a1 += static_cast<float>(su) * (e8m0_half(__ldg(e1 + c)) * xs);
      a2 += static_cast<float>(sv) * (e8m0_half(__ldg(e2 + c)) * xs);
    }
  }
  o1 = a1;
  o2 = a2;
}

}  // namespace brass::backend::cuda

