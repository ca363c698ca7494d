// CUDA attention path: KV store, flash-decoding attention with sinks and sliding
// window, and the fused decode input block (q/k/v mat-vecs + biases + RoPE + KV store).
//
// Attention = split-K ("flash decoding"): grid (n_head_kv, n_splits, n_tok). The number
// of splits depends only on the cache capacity, and each block derives its key range
// from the query position read on the device, so a captured graph replays at any
// depth. Inside a block, 4 warps take tiles of 32 keys: for the scores a lane owns a
// key (q of the group's n_rep heads sits in shared memory, pre-scaled); for the values
// a lane owns head dimensions. Online softmax per warp (running max, rescaled sums),
// then the warps merge in shared memory and write one partial (m, l, acc) per split;
// a combine kernel merges the splits with the sink logit (max and denominator only).
// One decode token of one sequence (the usual decode step) has its own one-launch kernels
// instead (attn_decode_tc_kernel for f16 caches, attn_decode_kernel for f32): tiles whose
// loads all go out before any math, the split merge folded into the last block to finish.
// Batched decode (many one-token sequences) keeps the split + combine pair, one launch each.
// Every kernel here finds a position's K/V row through KvAddr (cuda_kernels.h): a block
// of a shared paged pool (full-attention layers), a ring slot, or a linear slot.
#include <algorithm>
#include <cfloat>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_probe.cuh"

namespace brass::backend::cuda {
namespace {

constexpr int kAttnWarps = 4;
constexpr int kMaxRep = 8;

__device__ __forceinline__ float load_kv(const float* p) { return *p; }
__device__ __forceinline__ float load_kv(const __half* p) { return __half2float(*p); }

struct AttnParams {
  const float* q;        // seq's first token row
  float* out;            // its output row (multi-sequence launches only)
  __half* out_h;         // null, or out in f16 too (batched decode: the wo call's input)
  // One-token decode kernels: null, or out quantized as Q8_0 per 32 (wo_router's input,
  // quantize_x_smem's bits): out_q [n_head * D] int8, out_d [n_head * D / 32] scales.
  int8_t* out_q = nullptr;
  float* out_d = nullptr;
  float* partial;        // (n_tok, n_head, n_splits, D + 2)
  const void* k;
  const void* v;
  const int32_t* pos;    // seq's first token position in device memory, or null
  KvAddr kv;             // position -> storage row (paged / ring / linear)
  int32_t pos0;
  int32_t capacity;      // the sequence's limit (sizes the splits)
  int32_t window;
  int32_t n_splits;
  int32_t min_keys;      // keys a used split gets at least (split_keys)
  int32_t n_head;
  int32_t n_head_kv;
  float scale;
  // One-token decode launches (BRASS_CUDA_ATTN_EARLY=0 turns it off): each block lets the
  // next kernel (wo) launch before its PDL wait instead of after it. The dependent only
  // launches once every block of this grid has triggered, and a launch takes ~1.8 us to
  // put blocks on the SMs (probe, H200); this grid's blocks start ~1-4 us before q/k/v ends,
  // so wo's blocks, and their pre-wait row loads, start that much sooner. Nothing about
  // memory changes: wo still waits for this grid to complete before it reads its output.
  // H200, one build, three rounds: tg128 868.7-871.2 -> 875.2-877.7 tok/s, @ d4096
  // 804.3-806.1 -> 806.8-807.5; attention's increment 4.39 -> 3.66 us a layer (session 37).
  int32_t early_trigger = 0;
};

// Row of 8 consecutive K elements as floats.
__device__ __forceinline__ void load8(const __half* p, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __half22float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float* f) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

// Keys per split for a query that sees n_keys keys: the n_splits splits (sized for the
// capacity, so a recorded launch fits every length) share them, but each gets at least
// kMinSplitKeys; the splits past ceil(n_keys / per) are empty and exit at once. (Short
// histories in a big cache were spread a few keys per block: at 64 streams of ~200 keys
// in an 8192-slot cache the full layers took 0.38 ms each.)
// Batched decode uses 256 (kMultiMinSplitKeys): the sequences already fill the GPU, and
// fewer, fuller blocks were faster (64 streams of ~200 keys: 6,029 -> ~6,260 tok/s with one
// split instead of three on the H200).
constexpr int32_t kMinSplitKeys = 64, kMultiMinSplitKeys = 256;
__device__ __forceinline__ int32_t split_keys(int32_t n_keys, int n_splits, int32_t min_keys) {
  return max(min_keys, (n_keys + n_splits - 1) / n_splits);
}

template <int D, class KV>
__device__ __forceinline__ void attn_split_body(const AttnParams& p, const int t) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  constexpr int kDL = (D + kWarp - 1) / kWarp;  // dims per lane in the V phase
  const int g = blockIdx.x, split = blockIdx.y;
  const int n_rep = p.n_head / p.n_head_kv;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __shared__ __align__(16) float qs[kMaxRep][D];
  __shared__ float pw[kAttnWarps][kMaxRep][kWarp];
  __shared__ float wm[kAttnWarps][kMaxRep], wl[kAttnWarps][kMaxRep];
  __shared__ float wacc[kAttnWarps][kMaxRep][D];

  const int32_t pq = p.pos ? p.pos[t] : p.pos0 + t;
  const int32_t lo = p.window > 0 ? max(0, pq - p.window + 1) : 0;
  const int32_t n_keys = pq - lo + 1;
  const int32_t per = split_keys(n_keys, p.n_splits, p.min_keys);
  const int32_t k0 = lo + split * per, k1 = min(pq + 1, k0 + per);
  if (k0 >= k1) return;  // an empty split (short history): the combine skips it

  for (int i = threadIdx.x; i < n_rep * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    qs[r][d] = p.q[(static_cast<int64_t>(t) * p.n_head + g * n_rep + r) * D + d] * p.scale;
  }
  __syncthreads();

  const int64_t kv_row = static_cast<int64_t>(p.n_head_kv) * D;
  const KV* kb = static_cast<const KV*>(p.k) + g * D;
  const KV* vb = static_cast<const KV*>(p.v) + g * D;
  float m[kMaxRep], l[kMaxRep], acc[kMaxRep][kDL];
#pragma unroll
  for (int r = 0; r < kMaxRep; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int i = 0; i < kDL; ++i) acc[r][i] = 0.f;
  }

  for (int32_t kt = k0 + warp * kWarp; kt < k1; kt += kAttnWarps * kWarp) {
    const int32_t j = kt + lane;
    const bool valid = j < k1;
    float s[kMaxRep];
#pragma unroll
    for (int r = 0; r < kMaxRep; ++r) s[r] = 0.f;
    if (valid) {
      const KV* kr = kb + p.kv.row(j) * kv_row;
#pragma unroll
      for (int c = 0; c < D; c += 8) {
        float kf[8];
        load8(kr + c, kf);
#pragma unroll
        for (int r = 0; r < kMaxRep; ++r) {
          if (r < n_rep) {
            const float4 qa = *reinterpret_cast<const float4*>(&qs[r][c]);
            const float4 qb = *reinterpret_cast<const float4*>(&qs[r][c + 4]);
            s[r] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] + qb.y * kf[5] +
                    qb.z * kf[6] + qb.w * kf[7];
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMaxRep; ++r) {
      if (r >= n_rep) break;
      const float sv = valid ? s[r] : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(sv));
      const float corr = __expf(m[r] - m_new);  // m = -inf: 0
      const float pr = valid ? __expf(sv - m_new) : 0.f;
      l[r] = l[r] * corr + warp_sum(pr);
      m[r] = m_new;
#pragma unroll
      for (int i = 0; i < kDL; ++i) acc[r][i] *= corr;
      pw[warp][r][lane] = pr;
    }
    __syncwarp();
    const int nv = min(kWarp, k1 - kt);
    // V rows in batches of 8, all loads issued before the FMAs (the loop was one
    // dependent global load per key: latency-bound at depth).
    for (int jj0 = 0; jj0 < nv; jj0 += 8) {
      float vv[8][kDL];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int jj = jj0 + u;
        const KV* vr = vb + p.kv.row(min(kt + jj, k1 - 1)) * kv_row;  // (rows past nv are not used)
#pragma unroll
        for (int i = 0; i < kDL; ++i) {
          const int d = lane + i * kWarp;
          vv[u][i] = (jj < nv && d < D) ? load_kv(vr + d) : 0.f;
        }
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (jj0 + u >= nv) break;
#pragma unroll
        for (int r = 0; r < kMaxRep; ++r) {
          if (r < n_rep) {
            const float w = pw[warp][r][jj0 + u];
#pragma unroll
            for (int i = 0; i < kDL; ++i) acc[r][i] += w * vv[u][i];
          }
        }
      }
    }
    __syncwarp();
  }

  // Merge the warps of the block.
#pragma unroll
  for (int r = 0; r < kMaxRep; ++r) {
    if (r < n_rep) {
      if (lane == 0) {
        wm[warp][r] = m[r];
        wl[warp][r] = l[r];
      }
#pragma unroll
      for (int i = 0; i < kDL; ++i) {
        const int d = lane + i * kWarp;
        if (d < D) wacc[warp][r][d] = acc[r][i];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_rep * (D + 2); i += blockDim.x) {
    const int r = i / (D + 2), e = i % (D + 2);
    float M = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, wm[w][r]);
    float v = 0.f;
    if (e == 0) {
      v = M;
    } else {
      for (int w = 0; w < kAttnWarps; ++w) {
        if (wm[w][r] == -INFINITY) continue;
        const float f = __expf(wm[w][r] - M);
        v += f * (e == 1 ? wl[w][r] : wacc[w][r][e - 2]);
      }
    }
    const int h = g * n_rep + r;
    p.partial[((static_cast<int64_t>(t) * p.n_head + h) * p.n_splits + split) * (D + 2) + e] = v;
  }
}

template <int D, class KV>
__global__ void __launch_bounds__(kAttnWarps * kWarp) attn_split_kernel(AttnParams p) {
  attn_split_body<D, KV>(p, blockIdx.z);
}

// Many single-token sequences in one launch (batched decode): blockIdx.z picks the
// sequence's parameters from a device table; grid y is the largest split count.
template <int D, class KV>
__global__ void __launch_bounds__(kAttnWarps * kWarp) attn_split_multi_kernel(const AttnParams* __restrict__ table) {
  const AttnParams p = table[blockIdx.z];
  if (static_cast<int>(blockIdx.y) >= p.n_splits) return;
  attn_split_body<D, KV>(p, 0);
}

// grid (n_tok, n_head), D threads: merge the splits and the sink.
// Only the splits the split kernel filled are read: with n_keys keys and per =
// split_keys(n_keys, n_splits, min_keys) keys a split, the first ceil(n_keys / per) splits.
// One output element (head h, dim d) of a query at position pq from its splits' partials
// pp (n_splits x (D + 2): max, sum, acc) and the sink.
template <int D>
__device__ __forceinline__ float combine_splits(const float* __restrict__ pp, const float* __restrict__ sinks, int h,
                                                int d, int32_t pq, int32_t window, int n_splits, int32_t min_keys) {
  const int32_t n_keys = pq - (window > 0 ? max(0, pq - window + 1) : 0) + 1;
  const int32_t per = split_keys(n_keys, n_splits, min_keys);
  const int used = (n_keys + per - 1) / per;
  float M = sinks ? sinks[h] : -INFINITY;
  for (int s = 0; s < used; ++s) M = fmaxf(M, pp[s * (D + 2)]);
  float den = sinks ? __expf(sinks[h] - M) : 0.f, num = 0.f;
  for (int s = 0; s < used; ++s) {
    const float ms = pp[s * (D + 2)];
    if (ms == -INFINITY) continue;
    const float f = __expf(ms - M);
    den += f * pp[s * (D + 2) + 1];
    num += f * pp[s * (D + 2) + 2 + d];
  }
  return num / den;
}

template <int D>
__global__ void attn_combine_kernel(const float* __restrict__ partial, const float* __restrict__ sinks,
                                    float* out, int n_head, int n_splits, const int32_t* pos, int32_t pos0,
                                    int32_t window) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int32_t pq = pos ? pos[t] : pos0 + t;
  const float* pp = partial + (static_cast<int64_t>(t) * n_head + h) * n_splits * (D + 2);
  out[(static_cast<int64_t>(t) * n_head + h) * D + d] = combine_splits<D>(pp, sinks, h, d, pq, window, n_splits, kMinSplitKeys);
}

// The multi-sequence combine: grid (n_seq, n_head), sequence blockIdx.x's table entry.
template <int D>
__global__ void attn_combine_multi_kernel(const AttnParams* __restrict__ table, const float* __restrict__ sinks,
                                          int n_head) {
  const AttnParams& p = table[blockIdx.x];
  const int h = blockIdx.y, d = threadIdx.x;
  const int32_t pq = p.pos ? p.pos[0] : p.pos0;
  const float* pp = p.partial + static_cast<int64_t>(h) * p.n_splits * (D + 2);
  const float o = combine_splits<D>(pp, sinks, h, d, pq, p.window, p.n_splits, p.min_keys);
  p.out[static_cast<int64_t>(h) * D + d] = o;
  if (p.out_h) p.out_h[static_cast<int64_t>(h) * D + d] = __float2half_rn(o);
}

// Splits depend only on the capacity (fixed for a captured graph): about one 128-key
// block of work per split at full depth, at most 64 (the combine reads every split).
int n_splits_for(int32_t capacity) { return std::clamp((capacity + 127) / 128, 1, 64); }

// ---- one sequence, one token (decode): one launch per layer ----
// The split + combine pair above is a chain of dependent global round trips (per key the
// block-table entry, then K; V in batches of 8 keys, each a new round trip; then a second
// launch for the combine): ~14 us per layer at depth 1, ~20 at 128 keys, ~24 at 4097 (H200,
// ncu without cache flush). The decode kernels: grid (n_head_kv, n_splits), kDecWarps
// warps, launched with PDL (the launch overlaps the q/k/v kernel's tail; the f32 kernel
// reads everything but the sinks after pdl_wait, the f16 one its first tile's older keys
// before it: dec_tc_body). A tile interleaves the warps key by key (a short
// history spreads over every warp) and issues all its loads, each key's block-table entry
// once for K and V, before any math: one memory round trip per tile. The block merges its
// warps; with one used split (short histories, sliding layers) it writes `out` itself,
// otherwise it writes a partial (m, l, acc) and the last block of its kv head to finish (an
// atomic ticket, reset by that block so a captured graph replays) merges the used splits
// with the sink (dec_finish: one exp per (head, split), then FMA chains): no second launch.
// Splits: at least a tile of keys each (BRASS_CUDA_ATTN_SPLIT_KEYS overrides), at most one
// wave of blocks and at most ~4/3 blocks an SM (BRASS_CUDA_ATTN_DEC_SPLITS overrides): a
// block's tiles then follow each other on its SM instead of queueing as further blocks.
// BRASS_CUDA_ATTN_DECODE=0 sends decode tokens to the split + combine pair (measurement
// knobs). Why 4/3: the 64-dim tensor-core kernel fits 2 blocks an SM (a wave: 33 splits a
// kv head for gpt-oss), each holding half the SM's registers, so a full wave leaves no
// room beside it for wo's blocks and their pre-wait loads, even at short depth where all
// but the first split exit at once; at depth 4096 its 33 partials also take the merge two
// rounds of loads (dec_finish: 32 in the first). 22 splits (176 blocks), H200, against
// the 33 built beside it (session 40, three rounds): tg128 895-900 -> 900-904 tok/s, @
// d4096 837 -> 838-840, although each split's 187 keys then take two tiles. At depth
// 4096, 16 (three tiles) and 8 splits were 0.5% and 3% below 33, and 26 ~0.7% below 22.
// (Tried: the later tiles of a split prefetched into shared memory a tile ahead by
// cp.async: no gain at 22 splits, @ d4096 -0.3%.)
// attn_decode_kernel (CUDA cores; the f32 cache): a key's row is read by G = D / 8
// consecutive lanes, 8 dimensions each, K and V together, so a lane holds the same dims
// of K (scores) and V (values); a warp takes KG = 32 / G keys side by side and kDecU of
// them per lane. Scores: partial dot products over the lane's 8 dims for the group's n_rep
// heads, summed across the G lanes by a reduce-scatter (each step halves the heads a lane
// keeps: 7 shuffles instead of 24 for G = 8). The probabilities go through shared memory
// to the lanes' V dims. (It ran f16 caches too before the tensor-core kernel: 6.9 / 8.8 /
// 12.9 / 19.5 us at depth 1 / 128 / 1000 / 4097 on the H200, compute-bound on the ~1,000
// FMAs a key costs for 8 heads of 64 dims.)
constexpr int kDecWarps = 8, kDecU = 4;
// Ticket counters (one per kv head) at the start of the attention scratch, ahead of the
// partials: zeroed with the scratch when it is allocated, back at zero after every launch.
constexpr int kTicketSlots = 4096;  // (batched decode: one per (sequence, kv head))
constexpr int kDecMaxSplits = 64;
__host__ __device__ constexpr int dec_tile(int d) { return kDecWarps * (kWarp / (d / 8)) * kDecU; }

template <class KV>
struct Raw8;  // 8 consecutive K or V elements as loaded (the f32 cache: this kernel's only type)
template <>
struct Raw8<float> { float4 a, b; };
__device__ __forceinline__ void raw_load(Raw8<float>& r, const float* p) {
  r.a = *reinterpret_cast<const float4*>(p);
  r.b = *reinterpret_cast<const float4*>(p + 4);
}
__device__ __forceinline__ void raw_zero(Raw8<float>& r) { r.a = r.b = make_float4(0.f, 0.f, 0.f, 0.f); }
__device__ __forceinline__ void raw_float(const Raw8<float>& r, float* f) {
  f[0] = r.a.x; f[1] = r.a.y; f[2] = r.a.z; f[3] = r.a.w; f[4] = r.b.x; f[5] = r.b.y; f[6] = r.b.z; f[7] = r.b.w;
}
__device__ __forceinline__ void f4_to(float* f, float4 a, float4 b) {
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

// The end of a decode block, after its warps wrote their (m, l, acc) to shared memory
// (wm, wl, wacc: kDecWarps rows; sk: the sinks, -inf for none): with one used split, out
// directly; otherwise this split's partial, a ticket, and for the last block of the kv
// head the merge of the used splits with the sink.
template <int D>
__device__ __forceinline__ void dec_finish(const AttnParams& p, bool has_sinks, const float* sk,
                                           const float (*wm)[kMaxRep], const float (*wl)[kMaxRep],
                                           const float (*wacc)[kMaxRep][D], unsigned* tickets, int used, bool* last) {
  constexpr int kThreads = kDecWarps * kWarp;
  const int g = blockIdx.x, split = blockIdx.y, tid = threadIdx.x;
  const int n_rep = p.n_head / p.n_head_kv;
  const int h0 = g * n_rep;
  // Each (warp, head)'s factor exp(m_w - M) once, M over the block's warps (and the sink
  // when this is the only split), with the head's sum of l: a lane per (head, warp), eight
  // lanes a head. Then every output (or partial) is a chain of FMAs over the warps. (It
  // took one exp per (output, warp) term: 16 a thread.)
  __shared__ float wf[kDecWarps][kMaxRep], hm[kMaxRep], hl[kMaxRep];
  static_assert(kDecWarps == 8 && kMaxRep * kDecWarps == 2 * kWarp, "two warps: a lane per (head, warp)");
  if (tid < kMaxRep * kDecWarps) {
    const int r = tid / kDecWarps, w = tid % kDecWarps;
    const bool ok = r < n_rep;
    const float m = ok ? wm[w][r] : -INFINITY;  // -inf: a warp without keys
    float M = m;
#pragma unroll
    for (int o = kDecWarps / 2; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if (used == 1 && ok) M = fmaxf(M, sk[r]);
    const float f = m == -INFINITY ? 0.f : __expf(m - M);
    float l = ok ? f * wl[w][r] : 0.f;
#pragma unroll
    for (int o = kDecWarps / 2; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (ok) {
      wf[w][r] = f;
      if (w == 0) {
        hm[r] = M;
        hl[r] = l + (used == 1 && has_sinks ? __expf(sk[r] - M) : 0.f);
      }
    }
  }
  __syncthreads();
  auto merged = [&](int r, int d) {
    float num = 0.f;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) num += wf[w][r] * wacc[w][r][d];
    return num;
  };
  if (used == 1) {  // the only split: out = the block's merge with the sink
    // (n_rep D % 32 == 0 where out_q is set: a warp's 32 outputs are one 32-group)
    for (int i = tid; i < n_rep * D; i += kThreads) {
      const int r = i / D, d = i % D;
      const float o = merged(r, d) / hl[r];
      p.out[static_cast<int64_t>(h0 + r) * D + d] = o;
      if (p.out_h) p.out_h[static_cast<int64_t>(h0 + r) * D + d] = __float2half_rn(o);
      if (p.out_q) {
        const int64_t g0 = static_cast<int64_t>(h0) * D + i - tid % kWarp;  // the warp's group
        quantize_group_warp<false>(o, tid % kWarp, p.out_q + g0, p.out_d + g0 / 32);
      }
    }
    return;
  }
  // This split's partial (m, l, acc) per head, laid out as attn_split_body writes it.
  for (int i = tid; i < n_rep * (D + 2); i += kThreads) {
    const int r = i / (D + 2), e = i % (D + 2);
    const float v = e == 0 ? hm[r] : e == 1 ? hl[r] : merged(r, e - 2);
    p.partial[(static_cast<int64_t>(h0 + r) * p.n_splits + split) * (D + 2) + e] = v;
  }
  // Ticket: the barrier orders every thread's partial writes before thread 0's release;
  // its acquire (with the barrier after it) orders the other splits' partials before the
  // last block's reads. (A __threadfence in each of the 256 threads cost more.)
  __syncthreads();
  if (tid == 0) {
    *last = ticket_acq_rel(&tickets[g]) == static_cast<unsigned>(used - 1);
    if (*last) tickets[g] = 0;  // every used split has taken its ticket: ready for the next launch
  }
  __syncthreads();
  BRASS_PROBE_MARK(6, 3);
  if (!*last) return;
  // The last block: combine_splits' math over the used splits. Partials are read through
  // L2 (__ldcg): other SMs wrote them.
  // 1. every (head, split)'s (m, l) to shared memory, while each thread's first two chunks
  //    of values load (V dims of one head a thread, CH splits a chunk);
  // 2. a warp per head: M = max(sink, m_s), f_s = exp(m_s - M) once per split, den = sum of
  //    f_s l_s plus the sink's exp(sink - M);
  // 3. out = sum of f_s acc_s (in split order) / den, each chunk's refill issued as it is
  //    summed. One exp per (head, split) instead of one per output: per output the merge
  //    is a chain of FMAs. (It was one exp per term, ~6 us after the loads at 33 splits on
  //    the H100, longer than the keys themselves.)
  constexpr int V = D >= 32 ? D / 32 : 1;  // dims of a thread: kMaxRep heads x D / V threads
  constexpr int CH = 32 / V;               // splits a chunk (32 value registers)
  static_assert(kMaxRep * (D / V) <= kThreads, "one output group a thread");
  __shared__ float pf[kMaxRep][kDecMaxSplits], pl[kMaxRep][kDecMaxSplits];
  __shared__ float pden[kMaxRep];
  const int r = tid / (D / V), d0 = (tid % (D / V)) * V;  // this thread's head and first dim
  const bool mine = r < n_rep;
  const float* pv = p.partial + static_cast<int64_t>(h0 + r) * p.n_splits * (D + 2) + 2 + d0;
  float va[CH][V], vb[CH][V];
  auto load_chunk = [&](float (&c)[CH][V], int s0) {
#pragma unroll
    for (int j = 0; j < CH; ++j) {
      const int sp = s0 + j;
      const float* q = pv + static_cast<int64_t>(sp) * (D + 2);
      if (mine && sp < used) {
        if constexpr (V == 1) {
          c[j][0] = __ldcg(q);
        } else {
#pragma unroll
          for (int v = 0; v < V; v += 2) {  // (D + 2) and d0 even: 8-byte aligned
            const float2 x = __ldcg(reinterpret_cast<const float2*>(q + v));
            c[j][v] = x.x;
            c[j][v + 1] = x.y;
          }
        }
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) c[j][v] = 0.f;
      }
    }
  };
  load_chunk(va, 0);
  load_chunk(vb, CH);
  for (int i = tid; i < n_rep * used; i += kThreads) {
    const int hr = i / used, sp = i % used;
    const float2 ml =
        __ldcg(reinterpret_cast<const float2*>(p.partial + (static_cast<int64_t>(h0 + hr) * p.n_splits + sp) * (D + 2)));
    pf[hr][sp] = ml.x;
    pl[hr][sp] = ml.y;
  }
  __syncthreads();
  BRASS_PROBE_MARK(6, 5);
  const int warp = tid / kWarp, lane = tid % kWarp;
  if (warp < n_rep) {
    float M = sk[warp];
    for (int sp = lane; sp < used; sp += kWarp) M = fmaxf(M, pf[warp][sp]);
    M = warp_max(M);
    float den = 0.f;
    for (int sp = lane; sp < used; sp += kWarp) {
      const float m = pf[warp][sp];
      const float f = m == -INFINITY ? 0.f : __expf(m - M);
      pf[warp][sp] = f;
      den += f * pl[warp][sp];
    }
    den = warp_sum(den);
    if (lane == 0) pden[warp] = den + (has_sinks ? __expf(sk[warp] - M) : 0.f);
  }
  __syncthreads();
  if (!mine) return;
  float num[V];
#pragma unroll
  for (int v = 0; v < V; ++v) num[v] = 0.f;
  auto sum_chunk = [&](const float (&c)[CH][V], int s0) {
#pragma unroll
    for (int j = 0; j < CH; ++j) {
      if (s0 + j >= used) break;
      const float f = pf[r][s0 + j];
#pragma unroll
      for (int v = 0; v < V; ++v) num[v] += f * c[j][v];
    }
  };
  for (int s0 = 0; s0 < used; s0 += 2 * CH) {
    sum_chunk(va, s0);
    if (s0 + 2 * CH < used) load_chunk(va, s0 + 2 * CH);
    sum_chunk(vb, s0 + CH);
    if (s0 + 3 * CH < used) load_chunk(vb, s0 + 3 * CH);
  }
  const float den = pden[r];
  const int64_t e0 = static_cast<int64_t>(h0 + r) * D + d0;
  float o[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    o[v] = num[v] / den;
    p.out[e0 + v] = o[v];
    if (p.out_h) p.out_h[e0 + v] = __float2half_rn(o[v]);
  }
  if (p.out_q) {  // a 32-group is 32 / V neighbouring threads' V outputs (D >= 32: whole warps)
    float amax = 0.f;
#pragma unroll
    for (int v = 0; v < V; ++v) amax = fmaxf(amax, fabsf(o[v]));
#pragma unroll
    for (int m = 1; m < 32 / V; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
#pragma unroll
    for (int v = 0; v < V; ++v) q8_store(o[v], amax, e0 + v, p.out_q, p.out_d);
  }
  BRASS_PROBE_MARK(6, 4);
}

// p.partial: this launch's (n_head, n_splits, D + 2) partials; p.min_keys: keys a used
// split gets at least; tickets: n_head_kv counters. (No register cap: ~190 registers, one
// block of 8 warps per SM; a cap of 128 spilled.)
template <int D, class KV>
__global__ void __launch_bounds__(kDecWarps * kWarp, 1)
    attn_decode_kernel(AttnParams p, const float* __restrict__ sinks, unsigned* tickets) {
  constexpr int G = D / 8, KG = kWarp / G, U = kDecU;
  static_assert(D % 16 == 0 && G >= 2 && G <= kWarp / 2, "head_dim 16..128");
  constexpr int L = G >= 8 ? 3 : (G == 4 ? 2 : 1);  // reduce-scatter steps: log2(min(G, kMaxRep))
  constexpr int NH = kMaxRep >> L;                  // heads a lane holds after them
  constexpr int kStride = kDecWarps * KG;           // keys between a lane's u and u + 1
  constexpr int kTile = kStride * U;
  static_assert(kTile == dec_tile(D), "tile");
  __shared__ __align__(16) float qs[kMaxRep][D];                 // q of the group, pre-scaled
  __shared__ __align__(16) float pw[kDecWarps][U][KG][kMaxRep];  // a tile's probabilities
  __shared__ __align__(16) float cw[kDecWarps][kMaxRep];         // a tile's rescale factors
  __shared__ float wm[kDecWarps][kMaxRep], wl[kDecWarps][kMaxRep];
  __shared__ __align__(16) float wacc[kDecWarps][kMaxRep][D];
  __shared__ float sk[kMaxRep];  // sinks (-inf: none)
  __shared__ bool last;

  const int g = blockIdx.x, split = blockIdx.y;
  const int n_rep = p.n_head / p.n_head_kv;
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int kg = lane / G, j = lane % G;  // key group in the warp, 8-dim chunk of the row
  // The sinks are weights: read while the previous kernel may still run. Everything else
  // (q, pos, the cache) is written by earlier kernels: only after pdl_wait.
  if (tid < kMaxRep) sk[tid] = sinks && tid < n_rep ? sinks[g * n_rep + tid] : -INFINITY;
  if (p.early_trigger) pdl_trigger();
  pdl_wait();
  if (!p.early_trigger) pdl_trigger();
  // pos and q in one round trip (q does not depend on pos): one float4 per thread.
  const int32_t pq = p.pos ? p.pos[0] : p.pos0;
  const bool has_q = tid < n_rep * D / 4;
  float4 qv = make_float4(0.f, 0.f, 0.f, 0.f);
  if (has_q) qv = reinterpret_cast<const float4*>(p.q + static_cast<int64_t>(g) * n_rep * D)[tid];
  const int32_t lo = p.window > 0 ? max(0, pq - p.window + 1) : 0;
  const int32_t n_keys = pq - lo + 1;
  const int32_t per = split_keys(n_keys, p.n_splits, p.min_keys);
  const int used = (n_keys + per - 1) / per;
  const int32_t k0 = lo + split * per, k1 = min(pq + 1, k0 + per);
  if (k0 >= k1) return;  // an empty split (short history): takes no ticket
  if (has_q) {
    qv.x *= p.scale; qv.y *= p.scale; qv.z *= p.scale; qv.w *= p.scale;
    reinterpret_cast<float4*>(&qs[0][0])[tid] = qv;  // (q's rows of D floats, like qs[r])
  }
  __syncthreads();

  const int64_t kv_row = static_cast<int64_t>(p.n_head_kv) * D;
  const KV* kb = static_cast<const KV*>(p.k) + g * D + j * 8;
  const KV* vb = static_cast<const KV*>(p.v) + g * D + j * 8;
  int hb = 0;  // after the reduce-scatter a lane holds heads hb .. hb + NH - 1
#pragma unroll
  for (int st = 0; st < L; ++st)
    if (lane & ((G / 2) >> st)) hb += (kMaxRep / 2) >> st;
  float m_run[NH], l_run[NH], acc[kMaxRep][8];  // l, acc: this lane's keys only (summed at the end)
#pragma unroll
  for (int i = 0; i < NH; ++i) {
    m_run[i] = -INFINITY;
    l_run[i] = 0.f;
  }
#pragma unroll
  for (int r = 0; r < kMaxRep; ++r)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = 0.f;

  for (int32_t kt = k0; kt < k1; kt += kTile) {
    // Slices u < nu hold keys of this warp (a prefix: keys grow with u); warp-uniform, so
    // a short history costs the math of its keys only.
    const int32_t first = kt + warp * KG;
    if (first >= k1) break;
    const int nu = min(U, (k1 - first + kStride - 1) / kStride);
    bool valid[U];
    int64_t row[U];
    Raw8<KV> kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // each key's block-table entry once, for K and V
      const int32_t key = first + u * kStride + kg;
      valid[u] = key < k1;
      row[u] = valid[u] ? p.kv.row(key) * kv_row : 0;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (valid[u]) {
        raw_load(kr[u], kb + row[u]);
        raw_load(vr[u], vb + row[u]);
      } else {
        raw_zero(kr[u]);
        raw_zero(vr[u]);
      }
    }
    // Partial scores over this lane's 8 dims, every head of the group (heads past n_rep: 0).
    float s[U][kMaxRep];
#pragma unroll
    for (int r = 0; r < kMaxRep; ++r) {
#pragma unroll
      for (int u = 0; u < U; ++u) s[u][r] = 0.f;
      if (r < n_rep) {
        float q8[8];
        f4_to(q8, *reinterpret_cast<const float4*>(&qs[r][j * 8]), *reinterpret_cast<const float4*>(&qs[r][j * 8 + 4]));
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (u < nu) {
            float kf[8];
            raw_float(kr[u], kf);
            float a = 0.f;
#pragma unroll
            for (int c = 0; c < 8; ++c) a += q8[c] * kf[c];
            s[u][r] = a;
          }
        }
      }
    }
    // Reduce-scatter over the G lanes of a key: step st exchanges half of the remaining
    // heads with the lane (G / 2) >> st away; then (G = 16) a plain sum of the last one.
#pragma unroll
    for (int st = 0; st < L; ++st) {
      const int o = (G / 2) >> st, half = (kMaxRep / 2) >> st;
      const bool hi = lane & o;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (u < nu) {
#pragma unroll
          for (int i = 0; i < kMaxRep / 2; ++i) {
            if (i < half) {
              const float send = hi ? s[u][i] : s[u][i + half];
              const float keep = hi ? s[u][i + half] : s[u][i];
              s[u][i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
          }
        }
      }
    }
#pragma unroll
    for (int o = (G / 2) >> L; o > 0; o >>= 1)
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (u < nu)
#pragma unroll
          for (int i = 0; i < NH; ++i) s[u][i] += __shfl_xor_sync(0xffffffffu, s[u][i], o);
    // Online softmax per head over the warp's keys of this tile (max across key groups).
#pragma unroll
    for (int i = 0; i < NH; ++i) {
      float mt = -INFINITY;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (u < nu && valid[u]) mt = fmaxf(mt, s[u][i]);
#pragma unroll
      for (int o = G; o < kWarp; o <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
      const float m_new = fmaxf(m_run[i], mt);  // finite: slice 0 holds a key of this warp
      const float corr = m_run[i] == -INFINITY ? 0.f : __expf(m_run[i] - m_new);
      float ls = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (u < nu) {
          const float pr = valid[u] ? __expf(s[u][i] - m_new) : 0.f;
          ls += pr;
          pw[warp][u][kg][hb + i] = pr;
        }
      }
      l_run[i] = l_run[i] * corr + ls;
      m_run[i] = m_new;
      if (kg == 0) cw[warp][hb + i] = corr;
    }
    __syncwarp();
    // Values: acc[r][c] = acc[r][c] * corr[r] + sum over the lane's keys of p(key, r) V[key][8 j + c].
    float cr[kMaxRep];
    f4_to(cr, *reinterpret_cast<const float4*>(&cw[warp][0]), *reinterpret_cast<const float4*>(&cw[warp][4]));
#pragma unroll
    for (int r = 0; r < kMaxRep; ++r)
      if (r < n_rep)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] *= cr[r];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u < nu) {
        float vf[8], pu[kMaxRep];
        raw_float(vr[u], vf);
        f4_to(pu, *reinterpret_cast<const float4*>(&pw[warp][u][kg][0]),
              *reinterpret_cast<const float4*>(&pw[warp][u][kg][4]));
#pragma unroll
        for (int r = 0; r < kMaxRep; ++r)
          if (r < n_rep)
#pragma unroll
            for (int c = 0; c < 8; ++c) acc[r][c] += pu[r] * vf[c];
      }
    }
    __syncwarp();  // pw / cw are rewritten by the next tile
  }

  // Sum the key groups of the warp (they share the running max), then merge the warps.
#pragma unroll
  for (int o = G; o < kWarp; o <<= 1) {
#pragma unroll
    for (int i = 0; i < NH; ++i) l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], o);
#pragma unroll
    for (int r = 0; r < kMaxRep; ++r)
      if (r < n_rep)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] += __shfl_xor_sync(0xffffffffu, acc[r][c], o);
  }
  if (kg == 0) {
#pragma unroll
    for (int i = 0; i < NH; ++i) {
      wm[warp][hb + i] = m_run[i];
      wl[warp][hb + i] = l_run[i];
    }
#pragma unroll
    for (int r = 0; r < kMaxRep; ++r)
      if (r < n_rep) {
        *reinterpret_cast<float4*>(&wacc[warp][r][j * 8]) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        *reinterpret_cast<float4*>(&wacc[warp][r][j * 8 + 4]) = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
      }
  }
  __syncthreads();

  dec_finish<D>(p, sinks != nullptr, sk, wm, wl, wacc, tickets, used, &last);
}

// ---- the f16 cache on tensor cores ----
// The CUDA-core kernel above spends ~1,000 FMAs per key (8 heads x 64 dims, scores and
// values) plus the shuffles of its reduce-scatter and a 64-register accumulator: at depth
// 4097 it ran 4.8M warp instructions (H200, 19.5 us). attn_decode_tc_kernel does both
// products with mma.sync m16n8k16 (f16 in, f32 accumulate) per warp step of 16 keys:
// - scores: A = the group's q (rows 0-7: q in f16, rows 8-15: the f16 remainder q - hi,
//   so one MMA gives both halves and hi + lo carries q to ~2^-22), B = K (16 dims x 8
//   keys); the dims are permuted so that a lane's B words for every k step are D / 4
//   consecutive halves of its key's row (one or two 16-byte loads), and q follows the
//   same permutation. C holds head g's scores of keys 2t, 2t+1 (and 8 + 2t, 9 + 2t from
//   the second key tile): exactly the keys of P's B fragment below.
// - values: O^T = V^T P^T: A = V^T (16 dims x 16 keys; a lane loads D / 8 consecutive dims
//   of its four keys' rows and pairs them by byte permutes), B = P (f16, scaled by 2^14
//   so that small probabilities stay normal, as hi + lo: two MMAs), C = heads 2t, 2t + 1 x
//   the lane's dims: a 2 * D / 8 register accumulator, no cross-lane sums.
// K and V are f16 exactly, the products exact in f32: the results differ from the CUDA
// cores' by float rounding (and the ~2^-22 of the hi / lo splits). A tile is a step of 16
// keys for each of kDecWarps warps (128 keys), all its loads before any MMA.
// H200, ncu without cache flush, gpt-oss shapes (8 kv heads, 64 dims): 4.8 / 5.5 / 10.0 /
// 14.5 us at depth 1 / 128 (sliding layer) / 1000 / 4097 (capacity = depth: 1 / 1 / 8 /
// 33 splits), against 14.3 / 19.7 / 19.4 / 23.7 for split + combine. Two steps per warp
// per tile (256 keys, 17 splits at 4097) took 13.0 us there but 6.2 / 6.3 / 11.0 at the
// shorter depths.
constexpr int kTcSteps = 1;  // 16-key steps per warp per tile
constexpr int kTcTile = kDecWarps * 16 * kTcSteps;
constexpr float kPScale = 16384.f, kPUnscale = 1.f / 16384.f;

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t half2_bits(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);  // a in the low half
  return *reinterpret_cast<const uint32_t*>(&h);
}
// W 32-bit words from p (16-, 8- or 4-byte aligned as W asks).
template <int W>
__device__ __forceinline__ void load_words(uint32_t (&w)[W], const __half* p) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int i = 0; i < W / 4; ++i) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = u.x; w[4 * i + 1] = u.y; w[4 * i + 2] = u.z; w[4 * i + 3] = u.w;
    }
  } else if constexpr (W == 2) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    w[0] = u.x; w[1] = u.y;
  } else {
    static_assert(W == 1, "words");
    w[0] = *reinterpret_cast<const uint32_t*>(p);
  }
}
// load_words at p + off, or zeros for off < 0 (a masked key: its p = 0 times a finite value).
template <int W>
__device__ __forceinline__ void load_words_or_zero(uint32_t (&w)[W], const __half* p, int64_t off) {
  if (off >= 0) {
    load_words(w, p + off);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) w[i] = 0u;
  }
}

// The first tile's table entries and K / V rows load before the PDL wait, all but the
// newest key's. Everything they read was written before the previous kernel started (the
// position and the block table by the round's uploads or the last round's pick, the older
// keys' rows by earlier rounds; a ring slot is reused only past the window). The newest
// key's row (written by the q/k/v kernel just before) and q load after the wait.
// (Measured on the H100 against loading every key after the wait: the same tok/s at
// depth 0 and 4096, session 20; kept as the one form, since it is no slower.)
template <int D>
__device__ __forceinline__ void dec_tc_body(const AttnParams& p, const float* __restrict__ sinks, unsigned* tickets) {
  constexpr int KS = D / 16;  // k steps of the scores = m tiles of the values
  constexpr int KW = D / 8;   // words of a lane's K chunk (D / 4 halves)
  constexpr int VW = D / 16;  // words of a lane's V chunk (D / 8 halves)
  static_assert(D % 16 == 0 && D <= 128, "head_dim 16..128");
  __shared__ float wm[kDecWarps][kMaxRep], wl[kDecWarps][kMaxRep];
  __shared__ __align__(16) float wacc[kDecWarps][kMaxRep][D];
  __shared__ float sk[kMaxRep];
  __shared__ bool last;

  const int g = blockIdx.x, split = blockIdx.y;
  const int n_rep = p.n_head / p.n_head_kv;
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int gq = lane >> 2, t = lane & 3;  // mma group (head row / key column) and thread in group
  BRASS_PROBE_MARK(6, 0);
  if (tid < kMaxRep) sk[tid] = sinks && tid < n_rep ? sinks[g * n_rep + tid] : -INFINITY;  // weights
  const int64_t kv_row = static_cast<int64_t>(p.n_head_kv) * D;
  const __half* kb = static_cast<const __half*>(p.k) + g * D + t * (D / 4);
  const __half* vb = static_cast<const __half*>(p.v) + g * D + gq * (D / 8);
  // A tile's step u of this warp: keys kbase[u] .. + 15, the warps interleaved step by
  // step (a short history spreads over all of them). K rows: keys kbase + gq, kbase + 8 +
  // gq; V rows (and this lane's scores): kbase + 2t, + 2t + 1, + 8 + 2t, + 9 + 2t. Keys
  // from k1 on are masked (zero rows, -inf scores).
  uint32_t kw[kTcSteps][2][KW], vw[kTcSteps][4][VW];
  auto key_k = [&](int32_t first, int u, int i) { return first + u * kDecWarps * 16 + 8 * i + gq; };
  auto key_v = [&](int32_t first, int u, int i) { return first + u * kDecWarps * 16 + 8 * (i >> 1) + 2 * t + (i & 1); };
  // The rows of keys < below (all table entries first, then every load); zeros for the rest.
  auto tile_loads = [&](int32_t first, int32_t below) {
    int64_t kr[kTcSteps][2], vr[kTcSteps][4];
#pragma unroll
    for (int u = 0; u < kTcSteps; ++u) {
#pragma unroll
      for (int i = 0; i < 2; ++i) kr[u][i] = key_k(first, u, i) < below ? p.kv.row(key_k(first, u, i)) * kv_row : -1;
#pragma unroll
      for (int i = 0; i < 4; ++i) vr[u][i] = key_v(first, u, i) < below ? p.kv.row(key_v(first, u, i)) * kv_row : -1;
    }
#pragma unroll
    for (int u = 0; u < kTcSteps; ++u) {
#pragma unroll
      for (int i = 0; i < 2; ++i) load_words_or_zero(kw[u][i], kb, kr[u][i]);
#pragma unroll
      for (int i = 0; i < 4; ++i) load_words_or_zero(vw[u][i], vb, vr[u][i]);
    }
  };
  // The rows of key `key` (storage offset `off`), where this lane holds it (after the wait).
  auto tile_newest = [&](int32_t first, int32_t key, int64_t off) {
#pragma unroll
    for (int u = 0; u < kTcSteps; ++u) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
        if (key_k(first, u, i) == key) load_words(kw[u][i], kb + off);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (key_v(first, u, i) == key) load_words(vw[u][i], vb + off);
    }
  };
  // The key range of this split, from the query position.
  const int32_t pq = p.pos ? p.pos[0] : p.pos0;
  const int32_t lo = p.window > 0 ? max(0, pq - p.window + 1) : 0;
  const int32_t n_keys = pq - lo + 1;
  const int32_t per = split_keys(n_keys, p.n_splits, p.min_keys);
  const int used = (n_keys + per - 1) / per;
  const int32_t k0 = lo + split * per, k1 = min(pq + 1, k0 + per);
  int64_t newest = -1;  // the newest key's storage offset, where this split's first tile holds it
  if (k0 >= k1) return;  // an empty split (short history): takes no ticket
  if (p.early_trigger) pdl_trigger();
  if (k0 + warp * 16 < k1) {
    tile_loads(k0 + warp * 16, pq);
    if (k1 == pq + 1 && pq < k0 + kTcTile) newest = p.kv.row(pq) * kv_row;
  }
  pdl_wait();
  BRASS_PROBE_MARK(6, 1);
  if (!p.early_trigger) pdl_trigger();
  // This lane's q chunk: head gq, dims [t D / 4, (t + 1) D / 4).
  float qf[D / 4];
  {
    const float4* qr = reinterpret_cast<const float4*>(p.q + (static_cast<int64_t>(g) * n_rep + gq) * D + t * (D / 4));
#pragma unroll
    for (int i = 0; i < D / 16; ++i) {
      const float4 x = gq < n_rep ? qr[i] : make_float4(0.f, 0.f, 0.f, 0.f);
      qf[4 * i] = x.x; qf[4 * i + 1] = x.y; qf[4 * i + 2] = x.z; qf[4 * i + 3] = x.w;
    }
  }
  if (newest >= 0) tile_newest(k0 + warp * 16, pq, newest);
  // A fragments of the scores: k step s takes dims t D / 4 + 4 s .. + 3 (see above).
  uint32_t qa[KS][4];
#pragma unroll
  for (int s = 0; s < KS; ++s) {
    float hi[4], rest[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = qf[4 * s + e] * p.scale;
      hi[e] = __half2float(__float2half_rn(x));
      rest[e] = x - hi[e];
    }
    qa[s][0] = half2_bits(hi[0], hi[1]);
    qa[s][1] = half2_bits(rest[0], rest[1]);
    qa[s][2] = half2_bits(hi[2], hi[3]);
    qa[s][3] = half2_bits(rest[2], rest[3]);
  }

  float m_run = -INFINITY, l_run = 0.f;  // head gq (l: this lane's keys)
  float acc[KS][4];                     // heads 2t, 2t + 1 x dims gq D / 8 + 2 j, + 1
#pragma unroll
  for (int j = 0; j < KS; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  for (int32_t kt = k0; kt < k1; kt += kTcTile) {
    const int32_t first = kt + warp * 16;
    if (first >= k1) break;  // no key of this warp in the tile (nor later)
    // steps u < nu hold keys (warp-uniform)
    const int nu = min(kTcSteps, (k1 - first + kDecWarps * 16 - 1) / (kDecWarps * 16));
    if (kt != k0) tile_loads(first, k1);  // table entries, then every load, then the math
    // Scores of head gq: c[i][0] + c[i][2] (hi + lo) for key 2t of key tile i, [1] + [3] for 2t + 1.
    float sc[kTcSteps][4];
    float mt = -INFINITY;
#pragma unroll
    for (int u = 0; u < kTcSteps; ++u) {
      if (u < nu) {
        float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int s = 0; s < KS; ++s) {
          mma_f16(c[0], qa[s], kw[u][0][2 * s], kw[u][0][2 * s + 1]);
          mma_f16(c[1], qa[s], kw[u][1][2 * s], kw[u][1][2 * s + 1]);
        }
        sc[u][0] = c[0][0] + c[0][2];
        sc[u][1] = c[0][1] + c[0][3];
        sc[u][2] = c[1][0] + c[1][2];
        sc[u][3] = c[1][1] + c[1][3];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (key_v(first, u, i) >= k1) sc[u][i] = -INFINITY;
          mt = fmaxf(mt, sc[u][i]);
        }
      }
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float m_new = fmaxf(m_run, mt);  // finite: key `first` is this warp's (lane t = 0)
    const float corr = m_run == -INFINITY ? 0.f : __expf(m_run - m_new);
    l_run *= corr;
    m_run = m_new;
    // The accumulator's heads 2t, 2t + 1 take their factors from the lanes of those rows.
    const float ca = __shfl_sync(0xffffffffu, corr, 8 * t), cb = __shfl_sync(0xffffffffu, corr, 8 * t + 4);
#pragma unroll
    for (int j = 0; j < KS; ++j) {
      acc[j][0] *= ca; acc[j][1] *= cb; acc[j][2] *= ca; acc[j][3] *= cb;
    }
#pragma unroll
    for (int u = 0; u < kTcSteps; ++u) {
      if (u < nu) {
        float pr[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) pr[i] = sc[u][i] == -INFINITY ? 0.f : __expf(sc[u][i] - m_new);
        l_run += (pr[0] + pr[1]) + (pr[2] + pr[3]);
        // P as B (keys 2t, 2t + 1 | 8 + 2t, 9 + 2t; column gq), hi and lo.
        uint32_t ph[2], pl[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float a = pr[2 * i] * kPScale, b = pr[2 * i + 1] * kPScale;
          const __half2 h = __floats2half2_rn(a, b);
          const float2 hf = __half22float2(h);
          ph[i] = *reinterpret_cast<const uint32_t*>(&h);
          pl[i] = half2_bits(a - hf.x, b - hf.y);
        }
#pragma unroll
        for (int j = 0; j < KS; ++j) {
          uint32_t a[4];
          a[0] = __byte_perm(vw[u][0][j], vw[u][1][j], 0x5410);  // keys 2t, 2t + 1 at dim gq D / 8 + 2 j
          a[1] = __byte_perm(vw[u][0][j], vw[u][1][j], 0x7632);  // ... at the next dim (rows g + 8)
          a[2] = __byte_perm(vw[u][2][j], vw[u][3][j], 0x5410);  // keys 8 + 2t, 9 + 2t
          a[3] = __byte_perm(vw[u][2][j], vw[u][3][j], 0x7632);
          mma_f16(acc[j], a, ph[0], ph[1]);
          mma_f16(acc[j], a, pl[0], pl[1]);
        }
      }
    }
  }

  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  if (t == 0) {
    wm[warp][gq] = m_run;
    wl[warp][gq] = l_run;
  }
#pragma unroll
  for (int j = 0; j < KS; ++j) {
    const int d = gq * (D / 8) + 2 * j;
    *reinterpret_cast<float2*>(&wacc[warp][2 * t][d]) = make_float2(acc[j][0] * kPUnscale, acc[j][2] * kPUnscale);
    *reinterpret_cast<float2*>(&wacc[warp][2 * t + 1][d]) = make_float2(acc[j][1] * kPUnscale, acc[j][3] * kPUnscale);
  }
  __syncthreads();
  BRASS_PROBE_MARK(6, 2);  // (after the warps' stores of their sums)
  dec_finish<D>(p, sinks != nullptr, sk, wm, wl, wacc, tickets, used, &last);
}

template <int D>
__global__ void __launch_bounds__(kDecWarps * kWarp, D == 64 ? 2 : 1)
    attn_decode_tc_kernel(AttnParams p, const float* __restrict__ sinks, unsigned* tickets) {
  dec_tc_body<D>(p, sinks, tickets);
}

// Batched decode (one token per sequence) on the same kernel: blockIdx.z picks the
// sequence's parameters from a device table (written before the launch, like the split
// table), each sequence has its own n_head_kv ticket counters and partials, and the splits
// past a sequence's count exit at once (grid y is the largest count).
template <int D>
__global__ void __launch_bounds__(kDecWarps * kWarp, D == 64 ? 2 : 1)
    attn_decode_tc_multi_kernel(const AttnParams* __restrict__ table, const float* __restrict__ sinks,
                                unsigned* tickets) {
  const AttnParams p = table[blockIdx.z];
  if (static_cast<int>(blockIdx.y) >= p.n_splits) return;
  dec_tc_body<D>(p, sinks, tickets + static_cast<int64_t>(blockIdx.z) * p.n_head_kv);
}

// Decode launch configuration (host). Measurement knobs, read once: BRASS_CUDA_ATTN_SPLIT_KEYS
// (keys a used split gets at least; default one tile) and BRASS_CUDA_ATTN_DEC_SPLITS (most
// splits per kv head; default one wave of blocks, at most ~4/3 blocks an SM).
// The decode kernel of a cache type: tensor cores for f16, CUDA cores for f32.
template <int D, class KV>
static constexpr auto dec_kernel() {
  if constexpr (std::is_same_v<KV, __half>) return attn_decode_tc_kernel<D>;
  else return attn_decode_kernel<D, KV>;
}
template <int D, class KV>
static constexpr int dec_tile_of() { return std::is_same_v<KV, __half> ? kTcTile : dec_tile(D); }
template <int D, class KV>
static int dec_blocks_per_sm() {
  static const int n = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, dec_kernel<D, KV>(), kDecWarps * kWarp, 0) != cudaSuccess)
      b = 1;
    return std::max(1, b);
  }();
  return n;
}
template <int D, class KV>
static int32_t dec_min_keys() {
  static const int env_keys = env_int("BRASS_CUDA_ATTN_SPLIT_KEYS");
  return env_keys > 0 ? env_keys : dec_tile_of<D, KV>();
}
// The decode splits for queries that see at most max_keys keys of a sequence of this
// capacity and window: a split per min_keys keys, 1 .. cap (launch_decode sizes a launch
// by the capacity, retarget_decode_node a recorded one by the depth).
static int splits_for_keys(int64_t max_keys, int32_t capacity, int32_t window, int32_t min_keys, int64_t cap) {
  const int64_t seen = window > 0 ? std::min(capacity, window) : capacity;
  const int64_t keys = std::max<int64_t>(1, std::min(max_keys, seen));
  return static_cast<int>(std::clamp<int64_t>((keys + min_keys - 1) / min_keys, 1, cap));
}
template <int D, class KV>
static int dec_splits_kv(const AttentionP& a, const SeqP& s) {
  static const int env_splits = env_int("BRASS_CUDA_ATTN_DEC_SPLITS");
  const int32_t min_keys = dec_min_keys<D, KV>();
  const int64_t sms = sm_count();
  const int64_t blocks = std::min<int64_t>(static_cast<int64_t>(dec_blocks_per_sm<D, KV>()) * sms, 4 * sms / 3);
  const int64_t wave = std::max<int64_t>(1, blocks / a.n_head_kv);
  const int64_t cap = std::min<int64_t>(kDecMaxSplits, env_splits > 0 ? env_splits : wave);
  return splits_for_keys(s.capacity, s.capacity, a.window, min_keys, cap);
}
template <int D>
static int dec_splits(const AttentionP& a, const SeqP& s) {
  return a.kv_type == DType::F16 ? dec_splits_kv<D, __half>(a, s) : dec_splits_kv<D, float>(a, s);
}

template <class KV>
__global__ void kv_store_kernel(const float* __restrict__ k, const float* __restrict__ v, KV* kc, KV* vc,
                                const int32_t* pos, int32_t pos0, KvAddr kv, int64_t row) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  const int t = blockIdx.x;
  const int32_t pp = pos ? pos[t] : pos0 + t;
  const int64_t slot = kv.row(pp);
  for (int64_t e = threadIdx.x; e < row; e += blockDim.x) {
    store_kv(kc + slot * row + e, k[t * row + e]);
    store_kv(vc + slot * row + e, v[t * row + e]);
  }
}

KvDestDev kv_dest(const SeqP& s, const int32_t* pos) { return KvDestDev{s.k, s.v, pos, kv_addr(s), s.pos0}; }

struct KvRowDev {  // one token of a multi-sequence kv_store
  const float* k;
  const float* v;
  KvDestDev dst;
};

template <class KV>
__global__ void kv_store_multi_kernel(const KvRowDev* __restrict__ table, int64_t row) {
  const KvRowDev r = table[blockIdx.x];
  const int64_t slot = r.dst.kv.row(r.dst.position());
  KV* kc = static_cast<KV*>(r.dst.kc);
  KV* vc = static_cast<KV*>(r.dst.vc);
  for (int64_t e = threadIdx.x; e < row; e += blockDim.x) {
    store_kv(kc + slot * row + e, r.k[e]);
    store_kv(vc + slot * row + e, r.v[e]);
  }
}

// ---- batched decode: RoPE of q and k and the KV store in one launch ----
// grid (n_tok, q head groups + k head groups of hpb heads): block (t, y) rotates its
// heads' pairs of token t (cos / sin per frequency in shared memory, as rope_kernel);
// a k group also writes its heads' rotated k and their v into the cache. Replaces two
// rope launches and the kv_store launch of batched decode (their arithmetic: rope_pair,
// store_kv).
template <class KV>
__global__ void rope_store_multi_kernel(const RopeRowDev* __restrict__ table, const float* __restrict__ inv_freq,
                                        float mscale, int n_head, int n_head_kv, int head_dim, int hpb) {
  pdl_trigger();  // dependents may start prefetching
  pdl_wait();     // (a PDL launch: its launch overlaps q/k/v's tail)
  extern __shared__ float cs[];  // [half] cos * mscale, [half] sin * mscale
  const RopeRowDev r = table[blockIdx.x];
  const int half = head_dim / 2;
  const int32_t pp = r.dst.position();
  for (int j = threadIdx.x; j < half; j += blockDim.x) rope_cs(pp, inv_freq[j], mscale, cs[j], cs[half + j]);
  __syncthreads();
  const int qgroups = (n_head + hpb - 1) / hpb;
  const bool is_k = static_cast<int>(blockIdx.y) >= qgroups;
  const int h0 = (is_k ? static_cast<int>(blockIdx.y) - qgroups : static_cast<int>(blockIdx.y)) * hpb;
  const int nh = min(hpb, (is_k ? n_head_kv : n_head) - h0);
  float* xt = (is_k ? r.k : r.q) + static_cast<int64_t>(h0) * head_dim;
  const int64_t row = static_cast<int64_t>(n_head_kv) * head_dim;
  const int64_t at = r.dst.kv.row(pp) * row + static_cast<int64_t>(h0) * head_dim;  // (k groups) cache offset
  for (int i = threadIdx.x; i < nh * half; i += blockDim.x) {
    const int j = i % half, o = (i / half) * head_dim + j;
    float x0 = xt[o], x1 = xt[o + half];
    rope_pair(x0, x1, cs[j], cs[half + j]);
    xt[o] = x0;
    xt[o + half] = x1;
    if (is_k) {
      KV* kc = static_cast<KV*>(r.dst.kc) + at;
      KV* vc = static_cast<KV*>(r.dst.vc) + at;
      const float* v = r.v + static_cast<int64_t>(h0) * head_dim;
      store_kv(kc + o, x0);
      store_kv(kc + o + half, x1);
      store_kv(vc + o, v[o]);
      store_kv(vc + o + half, v[o + half]);
    }
  }
}

struct QkvParams {
  DevW wq, wk, wv;
  const float* bq;
  const float* bk;
  const float* bv;
  const float* x;
  float* q;
  float* k;
  float* v;
  const int32_t* pos;   // (n_tok) of this launch's tokens
  const float* inv_freq;
  void* kc;
  void* vc;
  KvAddr kv;
  int64_t n_tok;
  float mscale;
  int32_t n_head, n_head_kv, head_dim;
};

constexpr int kQkvTok = 4;

// One warp per (head, pair j): rows j and j + half of that head's q, k or v, for up to
// kQkvTok tokens; then bias, RoPE (q, k) and the cache store (k, v).
// QX: int8 activations (cuda_common.cuh), quantized per block into shared memory.
template <int TYPE, class KV, bool QX>
__global__ void __launch_bounds__(256) qkv_kernel(QkvParams p) {
  __shared__ float lut[16];
  extern __shared__ __align__(16) uint8_t qsm[];
  if constexpr (TYPE == kMX && !QX) {
    load_mx_lut(lut);
    __syncthreads();
  }
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kQkvTok;
  const int nt = static_cast<int>(min(static_cast<int64_t>(kQkvTok), p.n_tok - t0));
  const int nx = static_cast<int>(p.wq.n_in);
  {  // prefetch this warp's two weight rows (static) while the previous kernel finishes
    const int half_ = p.head_dim / 2;
    const int64_t u = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    if (QX && blockIdx.y == 0 && threadIdx.x % kWarp < 2 && u < static_cast<int64_t>(p.n_head + 2 * p.n_head_kv) * half_) {
      int h = static_cast<int>(u / half_);
      const DevW* wp = &p.wq;
      if (h >= p.n_head + p.n_head_kv) { h -= p.n_head + p.n_head_kv; wp = &p.wv; }
      else if (h >= p.n_head) { h -= p.n_head; wp = &p.wk; }
      const int64_t r = static_cast<int64_t>(h) * p.head_dim + u % half_ + (threadIdx.x % kWarp) * half_;
      const int64_t rb = TYPE == kQ8 ? nx : nx / 2;
      prefetch_l2(wp->q + r * rb, rb);
    }
  }
  pdl_wait();
  pdl_trigger();
  int8_t* xq = reinterpret_cast<int8_t*>(qsm);
  float* xd = reinterpret_cast<float*>(qsm + kQkvTok * nx);
  if constexpr (QX) {
    for (int t = 0; t < nt; ++t) quantize_x_smem<TYPE == kMX>(p.x + (t0 + t) * nx, nx, xq + t * nx, xd + t * (nx / 32));
    __syncthreads();
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int half = p.head_dim / 2;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp;
  const int64_t n_units = static_cast<int64_t>(p.n_head + 2 * p.n_head_kv) * half;
  if (unit >= n_units) return;
  int hh = static_cast<int>(unit / half);
  const int j = static_cast<int>(unit % half);
  int kind;  // 0 q, 1 k, 2 v
  const DevW* w;
  const float* bias;
  float* dst;
  int nh;
  if (hh < p.n_head) {
    kind = 0; w = &p.wq; bias = p.bq; dst = p.q; nh = p.n_head;
  } else if (hh < p.n_head + p.n_head_kv) {
    kind = 1; hh -= p.n_head; w = &p.wk; bias = p.bk; dst = p.k; nh = p.n_head_kv;
  } else {
    kind = 2; hh -= p.n_head + p.n_head_kv; w = &p.wv; bias = p.bv; dst = p.v; nh = p.n_head_kv;
  }
  const int64_t r0 = static_cast<int64_t>(hh) * p.head_dim + j, r1 = r0 + half;
  float a0[kQkvTok] = {0, 0, 0, 0}, a1[kQkvTok] = {0, 0, 0, 0};
  if constexpr (QX) {
#pragma unroll
    for (int t = 0; t < kQkvTok; ++t) {
      if (t < nt) {
        row_dot2_q8x<TYPE>(*w, r0, *w, r1, xq + t * nx, xd + t * (nx / 32), lane, a0[t], a1[t]);
      }
    }
  } else {
    const float* x = p.x + t0 * w->n_in;
    row_dot<TYPE, kQkvTok>(*w, r0, x, nt, a0, lane, kWarp, lut);
    row_dot<TYPE, kQkvTok>(*w, r1, x, nt, a1, lane, kWarp, lut);
  }
#pragma unroll
  for (int t = 0; t < kQkvTok; ++t) {
    a0[t] = warp_sum(a0[t]);
    a1[t] = warp_sum(a1[t]);
  }
  if (lane >= nt) return;
  // lane t writes token t (registers indexed by compile-time t only).
#pragma unroll
  for (int t = 0; t < kQkvTok; ++t) {
    if (t != lane) continue;
    float x0 = a0[t] + (bias ? bias[r0] : 0.f), x1 = a1[t] + (bias ? bias[r1] : 0.f);
    const int32_t pp = p.pos[t0 + t];
    if (kind < 2) {
      float s, c;
      sincosf(static_cast<float>(pp) * p.inv_freq[j], &s, &c);
      c *= p.mscale;
      s *= p.mscale;
      const float y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;
      x0 = y0;
      x1 = y1;
    }
    const int64_t row = static_cast<int64_t>(nh) * p.head_dim;
    dst[(t0 + t) * row + r0] = x0;
    dst[(t0 + t) * row + r1] = x1;
    if (kind > 0) {
      const int64_t slot = p.kv.row(pp);
      KV* c = static_cast<KV*>(kind == 1 ? p.kc : p.vc);
      store_kv(c + slot * row + r0, x0);
      store_kv(c + slot * row + r1, x1);
    }
  }
}

}  // namespace

void launch_kv_store(const KvStoreP& a, cudaStream_t st) {
  const int64_t row = a.n_head_kv * a.head_dim;
  for (const SeqP& s : a.seqs) {
    if (s.n_tok <= 0) continue;
    const int32_t* pos = a.pos ? a.pos + s.tok0 : nullptr;
    const float* k = a.k + s.tok0 * row;
    const float* v = a.v + s.tok0 * row;
    const unsigned grid = static_cast<unsigned>(s.n_tok);
    if (a.kv_type == DType::F16)
      kv_store_kernel<__half><<<grid, 256, 0, st>>>(k, v, static_cast<__half*>(s.k), static_cast<__half*>(s.v), pos,
                                                    s.pos0, kv_addr(s), row);
    else
      kv_store_kernel<float><<<grid, 256, 0, st>>>(k, v, static_cast<float*>(s.k), static_cast<float*>(s.v), pos,
                                                   s.pos0, kv_addr(s), row);
    BRASS_CUDA_LAUNCHED();
  }
}

// The attention scratch: kTicketSlots ticket counters (as unsigned), then the partials.
// Both launchers below skip the counters, so they stay at zero between launches.
// (BRASS_CUDA_ATTN_DECODE=0: decode tokens take the split + combine pair too; measurement knob.)
static bool use_decode_kernel(const AttentionP& a, const SeqP& s) {
  static const bool on = knob_on("BRASS_CUDA_ATTN_DECODE");
  return on && s.n_tok == 1 && a.n_head_kv <= kTicketSlots;
}

// Splits of one sequence's launch (decode kernel or split kernel).
static int64_t seq_splits(const AttentionP& a, const SeqP& s) {
  if (!use_decode_kernel(a, s)) return s.n_tok * n_splits_for(s.capacity);
  switch (a.head_dim) {
    case 16: return dec_splits<16>(a, s);
    case 32: return dec_splits<32>(a, s);
    case 64: return dec_splits<64>(a, s);
    case 128: return dec_splits<128>(a, s);
    default: return 1;  // (launch_attention refuses the head_dim)
  }
}

int64_t attention_scratch_floats(const AttentionP& a) {
  int64_t need = 0;
  for (const SeqP& s : a.seqs) need = std::max<int64_t>(need, a.n_head * seq_splits(a, s) * (a.head_dim + 2));
  return kTicketSlots + need;
}

// The split kernel's parameters for one sequence of a call (partial: its scratch).
static AttnParams seq_attn_params(const AttentionP& a, const SeqP& s, float* partial) {
  AttnParams p;
  p.q = a.q + s.tok0 * a.n_head * a.head_dim;
  p.out = a.out + s.tok0 * a.n_head * a.head_dim;
  p.out_h = a.out_h ? a.out_h + s.tok0 * a.n_head * a.head_dim : nullptr;
  p.partial = partial;
  p.k = s.k;
  p.v = s.v;
  p.pos = a.pos ? a.pos + s.tok0 : nullptr;
  p.pos0 = s.pos0;
  p.kv = kv_addr(s);
  p.capacity = s.capacity;
  p.window = a.window;
  p.n_splits = n_splits_for(s.capacity);
  p.min_keys = kMinSplitKeys;
  p.n_head = static_cast<int32_t>(a.n_head);
  p.n_head_kv = static_cast<int32_t>(a.n_head_kv);
  p.scale = a.scale;
  return p;
}

template <int D, class KV>
static void launch_decode(const AttentionP& a, const SeqP& s, float* partial, unsigned* tickets, cudaStream_t st) {
  AttnParams p = seq_attn_params(a, s, partial);
  p.out_q = a.out_q;
  p.out_d = a.out_d;
  p.n_splits = dec_splits_kv<D, KV>(a, s);
  p.min_keys = dec_min_keys<D, KV>();
  static const bool early = knob_on("BRASS_CUDA_ATTN_EARLY");
  p.early_trigger = early ? 1 : 0;
  const dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(p.n_splits));
  launch_pdl(dec_kernel<D, KV>(), grid, dim3(kDecWarps * kWarp), 0, st, p, a.sinks, tickets);
  BRASS_CUDA_LAUNCHED();
  if (a.graph_nodes) {  // the capture's tail is this launch's node
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    const cudaGraphNode_t* tail = nullptr;
    size_t n_tail = 0;
    if (cudaStreamGetCaptureInfo(st, &cs, nullptr, nullptr, &tail, nullptr, &n_tail) == cudaSuccess &&
        cs == cudaStreamCaptureStatusActive && n_tail == 1)
      a.graph_nodes->push_back({tail[0], p.n_splits});
  }
}

template <int D>
static bool attention_d(const AttentionP& a, float* scratch, cudaStream_t st) {
  unsigned* tickets = reinterpret_cast<unsigned*>(scratch);
  float* partial = scratch + kTicketSlots;
  const bool q8 = a.out_q && a.seqs.size() == 1 && (a.n_head / a.n_head_kv) * D % 32 == 0;
  bool wrote_q8 = false;
  for (const SeqP& s : a.seqs) {
    if (s.n_tok <= 0) continue;
    if (use_decode_kernel(a, s)) {  // one decode token: one launch (after the previous kernel's tail, PDL)
      AttentionP b = a;
      if (!q8) b.out_q = nullptr, b.out_d = nullptr;
      if (a.kv_type == DType::F16) launch_decode<D, __half>(b, s, partial, tickets, st);
      else launch_decode<D, float>(b, s, partial, tickets, st);
      wrote_q8 = q8;
      continue;
    }
    const AttnParams p = seq_attn_params(a, s, partial);
    dim3 grid(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(p.n_splits), static_cast<unsigned>(s.n_tok));
    if (a.kv_type == DType::F16)
      attn_split_kernel<D, __half><<<grid, kAttnWarps * kWarp, 0, st>>>(p);
    else
      attn_split_kernel<D, float><<<grid, kAttnWarps * kWarp, 0, st>>>(p);
    BRASS_CUDA_LAUNCHED();
    dim3 cgrid(static_cast<unsigned>(s.n_tok), static_cast<unsigned>(a.n_head));
    attn_combine_kernel<D><<<cgrid, D, 0, st>>>(partial, a.sinks, a.out + s.tok0 * a.n_head * D,
                                                static_cast<int>(a.n_head), p.n_splits, p.pos, p.pos0, p.window);
    BRASS_CUDA_LAUNCHED();
  }
  return wrote_q8;
}

bool retarget_decode_node(cudaGraphExec_t exec, DecodeNode& n, int64_t max_keys) {
  cudaKernelNodeParams kp{};
  if (cudaGraphKernelNodeGetParams(n.node, &kp) != cudaSuccess) return false;  // (as recorded)
  AttnParams p = *static_cast<const AttnParams*>(kp.kernelParams[0]);  // n_splits: as recorded, the most
  const int splits = splits_for_keys(max_keys, p.capacity, p.window, p.min_keys, p.n_splits);
  if (splits == n.splits) return true;
  p.n_splits = splits;
  void* args[3] = {&p, kp.kernelParams[1], kp.kernelParams[2]};  // (p, sinks, tickets)
  kp.kernelParams = args;
  kp.extra = nullptr;
  kp.gridDim.y = static_cast<unsigned>(splits);
  if (cudaGraphExecKernelNodeSetParams(exec, n.node, &kp) != cudaSuccess) return false;
  n.splits = splits;
  return true;
}

bool launch_attention(const AttentionP& a, float* scratch, cudaStream_t st) {
  if (a.n_head / a.n_head_kv > kMaxRep || a.n_head % a.n_head_kv != 0) {
    std::fprintf(stderr, "cuda attention: n_head / n_head_kv = %lld / %lld is not supported (max %d)\n",
                 static_cast<long long>(a.n_head), static_cast<long long>(a.n_head_kv), kMaxRep);
    std::abort();
  }
  switch (a.head_dim) {
    case 16: return attention_d<16>(a, scratch, st);
    case 32: return attention_d<32>(a, scratch, st);
    case 64: return attention_d<64>(a, scratch, st);
    case 128: return attention_d<128>(a, scratch, st);
    default:
      std::fprintf(stderr, "cuda attention: head_dim %lld is not supported (16, 32, 64, 128)\n",
                   static_cast<long long>(a.head_dim));
      std::abort();
  }
}

// ---- batched decode: every sequence has exactly one token; one launch for all ----

static bool all_single(std::span<const SeqP> seqs) {
  if (seqs.size() < 2) return false;
  for (const SeqP& s : seqs)
    if (s.n_tok != 1) return false;
  return true;
}

bool launch_kv_store_multi(const KvStoreP& a, TablePut& put, cudaStream_t st) {
  if (!all_single(a.seqs)) return false;
  const int64_t row = a.n_head_kv * a.head_dim;
  std::vector<KvRowDev> t(a.seqs.size());
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    const SeqP& s = a.seqs[i];
    t[i] = KvRowDev{a.k + s.tok0 * row, a.v + s.tok0 * row, kv_dest(s, a.pos ? a.pos + s.tok0 : nullptr)};
  }
  const unsigned grid = static_cast<unsigned>(t.size());
  const void* table = put.put(t.data(), t.size() * sizeof(KvRowDev), (uint64_t{1} << 40) | grid);
  if (!table) return true;
  if (a.kv_type == DType::F16)
    kv_store_multi_kernel<__half><<<grid, 256, 0, st>>>(static_cast<const KvRowDev*>(table), row);
  else
    kv_store_multi_kernel<float><<<grid, 256, 0, st>>>(static_cast<const KvRowDev*>(table), row);
  BRASS_CUDA_LAUNCHED();
  return true;
}

bool rope_rows_apply(const RopeStoreP& a) {
  return all_single(a.seqs) && a.pos && a.head_dim % 2 == 0 && a.head_dim <= 512;
}

const void* put_rope_rows(const RopeStoreP& a, TablePut& put) {
  const int64_t qrow = a.n_head * a.head_dim, row = a.n_head_kv * a.head_dim;
  std::vector<RopeRowDev> t(a.seqs.size());
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    const SeqP& s = a.seqs[i];
    t[i] = RopeRowDev{a.q + s.tok0 * qrow, a.k + s.tok0 * row, a.v + s.tok0 * row, kv_dest(s, a.pos + s.tok0)};
  }
  // (kinds 1-3: kv_store, attention; the shape: the token count)
  return put.put(t.data(), t.size() * sizeof(RopeRowDev), (uint64_t{4} << 40) | t.size());
}

bool launch_rope_store_multi(const RopeStoreP& a, TablePut& put, cudaStream_t st) {
  if (!rope_rows_apply(a)) return false;
  const int half = static_cast<int>(a.head_dim / 2), hpb = std::max(1, 256 / half);
  const int groups = static_cast<int>((a.n_head + hpb - 1) / hpb + (a.n_head_kv + hpb - 1) / hpb);
  const dim3 grid(static_cast<unsigned>(a.seqs.size()), static_cast<unsigned>(groups));
  const void* table = put_rope_rows(a, put);
  if (!table) return true;
  const int threads = std::min(256, std::max(32, hpb * half));
  const size_t smem = static_cast<size_t>(a.head_dim) * sizeof(float);
  const auto* tab = static_cast<const RopeRowDev*>(table);
  const int nh = static_cast<int>(a.n_head), nkv = static_cast<int>(a.n_head_kv), d = static_cast<int>(a.head_dim);
  if (a.kv_type == DType::F16)
    launch_pdl(rope_store_multi_kernel<__half>, grid, dim3(threads), smem, st, tab, a.inv_freq, a.mscale, nh, nkv, d, hpb);
  else
    launch_pdl(rope_store_multi_kernel<float>, grid, dim3(threads), smem, st, tab, a.inv_freq, a.mscale, nh, nkv, d, hpb);
  BRASS_CUDA_LAUNCHED();
  return true;
}

int64_t attention_multi_scratch_floats(const AttentionP& a) {
  int64_t need = 0;
  for (const SeqP& s : a.seqs) need += a.n_head * n_splits_for(s.capacity) * (a.head_dim + 2);
  return kTicketSlots + need;  // (the ticket counters come first)
}

// Batched decode over an f16 cache takes the one-token tensor-core kernel, one launch for
// every sequence, instead of the split + combine pair (CUDA cores, ~32 us a layer for 32
// sequences of ~200 keys on the H200). Keys per split: at least BRASS_CUDA_ATTN_MULTI_KEYS
// (default 512: the sequences already fill the GPU; a split merge costs a round trip);
// splits: at most the capacity's, and enough for ~2 waves of blocks. BRASS_CUDA_ATTN_MULTI_DEC=0:
// the split + combine pair (measurement knob).
static bool use_multi_decode(const AttentionP& a) {
  static const bool on = knob_on("BRASS_CUDA_ATTN_MULTI_DEC");
  return on && a.kv_type == DType::F16 && static_cast<int64_t>(a.seqs.size()) * a.n_head_kv <= kTicketSlots;
}
static int32_t multi_dec_min_keys() {
  static const int32_t v = [] {
    const int e = env_int("BRASS_CUDA_ATTN_MULTI_KEYS");
    return e > 0 ? e : 512;
  }();
  return std::max<int32_t>(v, kTcTile);
}

// Splits per sequence of a batched launch: the sequences already give n_seq * n_head_kv
// blocks, so only enough splits for ~8 blocks per SM (never more than the capacity's).
// Why: with the capacity's count (64 for an 8192-slot cache) a step of 64 short sequences
// launched 64 * 8 * 64 blocks of which ~95% exit at once; the full layers' attention took
// ~58 us per layer on the H200, more than q/k/v and wo together.
// (BRASS_CUDA_ATTN_BLOCKS_PER_SM overrides the 8: measurement knob.)
static int multi_split_cap(int64_t n_seq, int64_t n_head_kv) {
  static const int per_sm = env_int("BRASS_CUDA_ATTN_BLOCKS_PER_SM", 8);
  const int64_t pairs = std::max<int64_t>(1, n_seq * n_head_kv);
  return static_cast<int>(std::clamp<int64_t>((per_sm * sm_count() + pairs - 1) / pairs, 1, 64));
}

// Every sequence's parameters (its splits and keys per split set by `splits(s, p)`, its
// partials after the previous sequence's) in a device table; grid: (n_head_kv, the most
// splits, sequences). kind tells the launch shapes apart for a graph update. Null: no
// table (an update that did not match).
template <int D, class Splits>
static const AttnParams* multi_table(const AttentionP& a, float* partial, TablePut& put, uint64_t kind,
                                     Splits splits, dim3& grid) {
  std::vector<AttnParams> t(a.seqs.size());
  int max_splits = 1;
  int64_t off = 0;
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    AttnParams& p = t[i] = seq_attn_params(a, a.seqs[i], partial + off);
    splits(a.seqs[i], p);
    off += a.n_head * p.n_splits * (D + 2);
    max_splits = std::max(max_splits, p.n_splits);
  }
  grid = dim3(static_cast<unsigned>(a.n_head_kv), static_cast<unsigned>(max_splits), static_cast<unsigned>(t.size()));
  const uint64_t shape = (kind << 40) | (uint64_t{grid.x} << 28) | (uint64_t{grid.y} << 16) | grid.z;
  return static_cast<const AttnParams*>(put.put(t.data(), t.size() * sizeof(AttnParams), shape));
}

template <int D>
static void attention_multi_dec(const AttentionP& a, unsigned* tickets, float* partial, TablePut& put,
                                cudaStream_t st) {
  const int64_t pairs = static_cast<int64_t>(a.seqs.size()) * a.n_head_kv;
  const int wave_cap = static_cast<int>(
      std::clamp<int64_t>((2 * dec_blocks_per_sm<D, __half>() * sm_count() + pairs - 1) / pairs, 1, kDecMaxSplits));
  const int32_t min_keys = multi_dec_min_keys();
  dim3 grid;
  const AttnParams* dt = multi_table<D>(a, partial, put, 3, [&](const SeqP& s, AttnParams& p) {
    const int32_t max_keys = a.window > 0 ? std::min(s.capacity, a.window) : s.capacity;
    p.n_splits = std::min({n_splits_for(s.capacity), wave_cap, std::max(1, (max_keys + min_keys - 1) / min_keys)});
    p.min_keys = min_keys;
  }, grid);
  if (!dt) return;
  launch_pdl(attn_decode_tc_multi_kernel<D>, grid, dim3(kDecWarps * kWarp), 0, st, dt, a.sinks, tickets);
  BRASS_CUDA_LAUNCHED();
}

template <int D>
static void attention_multi_d(const AttentionP& a, float* partial, TablePut& put, cudaStream_t st) {
  const int cap = multi_split_cap(static_cast<int64_t>(a.seqs.size()), a.n_head_kv);
  dim3 grid;
  const AttnParams* dt = multi_table<D>(a, partial, put, 2, [&](const SeqP&, AttnParams& p) {
    p.n_splits = std::min(p.n_splits, cap);
    p.min_keys = kMultiMinSplitKeys;
  }, grid);
  if (!dt) return;
  if (a.kv_type == DType::F16)
    attn_split_multi_kernel<D, __half><<<grid, kAttnWarps * kWarp, 0, st>>>(dt);
  else
    attn_split_multi_kernel<D, float><<<grid, kAttnWarps * kWarp, 0, st>>>(dt);
  BRASS_CUDA_LAUNCHED();
  dim3 cgrid(static_cast<unsigned>(a.seqs.size()), static_cast<unsigned>(a.n_head));
  attn_combine_multi_kernel<D><<<cgrid, D, 0, st>>>(dt, a.sinks, static_cast<int>(a.n_head));
  BRASS_CUDA_LAUNCHED();
}

bool launch_attention_multi(const AttentionP& a, float* scratch, TablePut& put, cudaStream_t st) {
  if (!all_single(a.seqs) || a.n_head / a.n_head_kv > kMaxRep || a.n_head % a.n_head_kv != 0) return false;
  float* partial = scratch + kTicketSlots;  // (leaves the ticket counters alone)
  if (use_multi_decode(a)) {
    unsigned* tickets = reinterpret_cast<unsigned*>(scratch);
    switch (a.head_dim) {
      case 16: attention_multi_dec<16>(a, tickets, partial, put, st); return true;
      case 32: attention_multi_dec<32>(a, tickets, partial, put, st); return true;
      case 64: attention_multi_dec<64>(a, tickets, partial, put, st); return true;
      case 128: attention_multi_dec<128>(a, tickets, partial, put, st); return true;
      default: return false;
    }
  }
  switch (a.head_dim) {
    case 16: attention_multi_d<16>(a, partial, put, st); return true;
    case 32: attention_multi_d<32>(a, partial, put, st); return true;
    case 64: attention_multi_d<64>(a, partial, put, st); return true;
    case 128: attention_multi_d<128>(a, partial, put, st); return true;
    default: return false;
  }
}

bool launch_attn_qkv(const AttnQkvP& a, cudaStream_t st) {
  if (a.seqs.size() != 1 || a.wq.type != a.wk.type || a.wq.type != a.wv.type || a.wq.n_in != a.wk.n_in || a.head_dim % 2 != 0 ||
      a.pos == nullptr || a.n_tok <= 0)
    return false;
  const SeqP& s = a.seqs[0];
  if (s.tok0 != 0 || s.n_tok != a.n_tok) return false;
  QkvParams p;
  p.wq = a.wq;
  p.wk = a.wk;
  p.wv = a.wv;
  p.bq = a.bq; p.bk = a.bk; p.bv = a.bv;
  p.x = a.x; p.q = a.q; p.k = a.k; p.v = a.v;
  p.pos = a.pos;
  p.inv_freq = a.inv_freq;
  p.kc = s.k;
  p.vc = s.v;
  p.n_tok = a.n_tok;
  p.mscale = a.mscale;
  p.n_head = static_cast<int32_t>(a.n_head);
  p.n_head_kv = static_cast<int32_t>(a.n_head_kv);
  p.head_dim = static_cast<int32_t>(a.head_dim);
  p.kv = kv_addr(s);
  const int64_t units = (a.n_head + 2 * a.n_head_kv) * (a.head_dim / 2);
  dim3 grid(static_cast<unsigned>((units + 7) / 8), static_cast<unsigned>((a.n_tok + kQkvTok - 1) / kQkvTok));
  const bool f16 = a.kv_type == DType::F16;
  const bool qx = a.q8x && q8x_supported(a.wq);
  const size_t sm = qx ? static_cast<size_t>(kQkvTok) * (a.wq.n_in + a.wq.n_in / 32 * 4) : 0;
#define BRASS_QKV(T, QX)                                                        \
  if (f16) launch_pdl(qkv_kernel<T, __half, QX>, grid, dim3(256), sm, st, p);   \
  else launch_pdl(qkv_kernel<T, float, QX>, grid, dim3(256), sm, st, p);
  switch (p.wq.type) {
    case kF32: BRASS_QKV(kF32, false) break;
    case kF16: BRASS_QKV(kF16, false) break;
    case kBF16: BRASS_QKV(kBF16, false) break;
    case kQ8:
      if (qx) { BRASS_QKV(kQ8, true) } else { BRASS_QKV(kQ8, false) }
      break;
    default:
      if (qx) { BRASS_QKV(kMX, true) } else { BRASS_QKV(kMX, false) }
      break;
  }
#undef BRASS_QKV
  BRASS_CUDA_LAUNCHED();
  return true;
}

#ifdef BRASS_PROBE
// The one-token attention's marks (kernel 6), appended to the CSV of probe_dump.
void probe_dump_attn(const char* path) { probe_write(path, false); }
#endif

}  // namespace brass::backend::cuda
