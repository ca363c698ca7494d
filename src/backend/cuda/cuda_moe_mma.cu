// The grouped MoE for batches of a few tokens per expert (batched decode): int8 tensor-core
// MMA (mma.sync m16n8k32 s8) straight from the MXFP4 weights, each touched expert's rows
// read once for all the tokens routed to it. Why: the per-slot dp4a kernels (cuda_q8.cu)
// read an expert's rows once per slot (at 64 streams: ~8 times per expert and layer), and
// the cuBLAS path dequantizes every touched expert to 16 bits per call; here the bytes
// streamed per step are the touched experts' MXFP4 bytes.
//
// Numerics are those of the q8x path (its CPU twin applies): activations quantized per 32
// exactly as quant::quantize_row(Q8_0); a block's integer dot is exact (int32), then
// scaled by the weight's E8M0 and the activation's f16 scale in f32; the SwiGLU output is
// re-quantized the same way before the down projection. Only the f32 summation order of
// the per-block terms differs.
//
// Kernel building blocks and the fragment mapping: cuda_mma.cuh.
#include <algorithm>

#include "backend/cuda/cuda_mma.cuh"
#include "backend/oai_swiglu.h"

namespace brass::backend::cuda {
namespace {

using namespace mma;

constexpr int kGptOssDim = 2880;  // gpt-oss 20b / 120b: n_embd = expert n_ff = 2880
constexpr int64_t kMaxMmaExperts = 1024;  // moe_mma_supported's bound

// Before the PDL wait (the weights are static): L2 prefetches of the block's first `pre` K
// steps of each matrix's tiles (rows r0 .. r0 + 31: warp w's step u is tile w + kKs u of
// the row block, so they are contiguous), one bulk prefetch a matrix from thread 0. The
// expert may get no tokens (known only after the wait): then the bytes are unused.
template <int N, int NM>
__device__ __forceinline__ void prefetch_first_tiles(const uint8_t* const (&tiles)[NM], int64_t r0, int pre) {
  if (pre <= 0 || threadIdx.x != 0) return;
  const int64_t at = r0 / 32 * (N / 64) * kMxTileBytes;
  const int64_t bytes = static_cast<int64_t>(min(pre * kKs, N / 64)) * kMxTileBytes;
#pragma unroll
  for (int m = 0; m < NM; ++m) prefetch_l2(tiles[m] + at, bytes);
}

// grid (n_ff / 32 * S, n_expert): block (x, e) computes SwiGLU rows [32 rb, 32 rb + 32)
// of expert e, rb = x / S, for its share of e's slots and writes them quantized (int8 in
// MXFP4 order + scale) at the slots' sorted positions. S > 1 (one token tile a pass): the
// S blocks of a row block take token tiles h, h + S, ... (h = x % S); they are adjacent in
// launch order, so they read the rows from DRAM about once between them.
// N > 0: rows of N elements on the k_loop_mx1 path (NT 1, or 2: a pass takes 16 tokens
// when more than 8 are left, else 8; the caller checked n == N).
// TL: gate / up read from their tile copies (DevW::tiles; N > 0).
template <int NT, int MINB, int N = 0, int P = 1, bool TL = false, int S = 1>
__global__ void __launch_bounds__(kKs* kWarp, MINB) moe_gate_up_mma_kernel(
    DevW gate, DevW up, const float* __restrict__ gb, const float* __restrict__ ub, const int8_t* __restrict__ xq,
    const float* __restrict__ xd, const int32_t* __restrict__ counts, const int32_t* __restrict__ offsets,
    const int32_t* __restrict__ perm, int k, int8_t* __restrict__ act_q, float* __restrict__ act_d, float alpha,
    float limit, int64_t xneg, int64_t aneg, int pre) {
  static_assert(S == 1 || NT == 1, "split row blocks take one token tile a pass");
  constexpr int NA = 2 * 2 * NT * 4;
  __shared__ float red[kKs][NA][kWarp];  // every warp's partial sums
  __shared__ float bsh[2][kRows];        // the block's gate / up biases (0 where none)
  const int e = blockIdx.y, rb = static_cast<int>(blockIdx.x) / S, h0 = static_cast<int>(blockIdx.x) % S;
  const int64_t n_ff = gate.ne1, r0 = e * n_ff + static_cast<int64_t>(rb) * kRows;
  // The biases are static: copied before the wait, without stalling the threads that ask
  // (cp.async), and waited for at the epilogue.
  if (threadIdx.x < 2 * kRows) {
    const int m = threadIdx.x / kRows, r = threadIdx.x % kRows;
    const float* b = m ? ub : gb;
    if (b)
      cp_async4(&bsh[m][r], b + r0 + r);
    else
      bsh[m][r] = 0.f;
  }
  if constexpr (TL) prefetch_first_tiles<N>({gate.tiles, up.tiles}, r0, pre);
  pdl_wait();
  pdl_trigger();
  const int cnt = counts[e];
  if (8 * h0 >= cnt) {
    cp_async_wait_all();  // (no copy left in flight into a block that ends)
    return;
  }
  const int off = offsets[e];
  const int n = static_cast<int>(gate.n_in);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  const uint8_t* const wq[2] = {TL ? gate.tiles : gate.q, TL ? up.tiles : up.q};
  const uint8_t* const wsc[2] = {gate.s, up.s};
  cp_async_wait_all();  // (the first barrier below shows bsh to every warp)
  for (int base = 8 * h0, live = 1; base < cnt; base += 8 * live * S) {
    live = N > 0 && cnt - base <= 8 ? 1 : NT;  // token tiles of this pass
    float acc[2][2][NT][4] = {};
    if constexpr (N > 0) {
      static_assert(NT <= 2, "k_loop_mx1: one or two token tiles");
      const int8_t* xr[NT];
      const float* xdr[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int64_t row = perm[off + min(base + 8 * j + g, cnt - 1)] / k;  // a missing column repeats the last
        xr[j] = xq + row * N + 8 * t;
        xdr[j] = xd + row * (N / 32);
      }
      k_loop_mx1<N, 2, NT, kKs, P, TL, 0, S == 1>(wq, wsc, r0, xr, xdr, live > 1, acc);
    } else {
      const Cols<NT> cols = make_cols<NT>(base, cnt, [&](int i) { return perm[off + i] / k; }, xq, xd, n, xneg);
      k_loop<kMX, 2, NT>(wq, wsc, r0, n, cols, acc);
    }
    // The epilogue is spread over the warps, a (token tile j, column parity cc) pair each:
    // the warp sums the four warps' partials of its columns (warp_sum) and writes them.
    // (Warp 0 alone, after reduce_warps, held the block for the SwiGLU, the quantization and
    // its bias loads: bench/cuda_moe_arith.cu, H200, a layer's gate/up at 8 / 16 tokens an
    // expert took 122 / 161 us with biases, 108 / 139 with no epilogue; spread, 119 / 152.)
    park_partials<NA>(&acc[0][0][0][0], red);
    for (int jc = warp; jc < 2 * live; jc += kKs) {
      const int j = jc >> 1, cc = jc & 1, pc = base + 8 * j + 2 * t + cc;
      float h[4];
      float amax = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // rows g + 8 i: (mt, c) = (i / 2, 2 (i % 2) + cc)
        const int mt = i >> 1, c = 2 * (i & 1) + cc;
        float v[2];
#pragma unroll
        for (int m = 0; m < 2; ++m) v[m] = warp_sum<NA>(red, ((m * 2 + mt) * NT + j) * 4 + c) + bsh[m][g + 8 * i];
        h[i] = oai_swiglu(v[0], v[1], alpha, limit);
        amax = fmaxf(amax, fabsf(h[i]));
      }
      // The 32 rows of this column live in the 8 lanes with this t: max over g.
#pragma unroll
      for (int o = 4; o < kWarp; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      if (pc < cnt) {
        const float d = amax / 127.0f, id = q8_inv(d);
        int8_t* qrow = act_q + static_cast<int64_t>(off + pc) * n_ff + static_cast<int64_t>(rb) * kRows;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int8_t q = q8_code(h[i], id);
          const int at = mx_pos(g + 8 * i);
          qrow[at] = q;
          if constexpr (N == 0) qrow[aneg + at] = static_cast<int8_t>(-q);  // the twin the generic down loop reads
        }
        if (g == 0) act_d[static_cast<int64_t>(off + pc) * (n_ff / 32) + rb] = q8_stored_scale(d);
      }
    }
    if (base + 8 * live * S < cnt) __syncthreads();  // red is written again by the next pass
  }
}

// grid (n_embd / 32 * S, n_expert): block (x, e) computes down rows [32 rb, 32 rb + 32)
// of expert e, rb = x / S, for its share of e's slots (S: as in gate/up):
// o[sorted position, row] = down row . act (no bias: the combine adds it with the router
// weight).
template <int NT, int MINB, int N = 0, int P = 1, bool TL = false, int S = 1>
__global__ void __launch_bounds__(kKs* kWarp, MINB) moe_down_mma_kernel(DevW down, const int8_t* __restrict__ act_q,
                                                                  const float* __restrict__ act_d,
                                                                  const int32_t* __restrict__ counts,
                                                                  const int32_t* __restrict__ offsets, float* o,
                                                                  int64_t aneg, int pre) {
  static_assert(S == 1 || NT == 1, "split row blocks take one token tile a pass");
  constexpr int NA = 2 * NT * 4;
  __shared__ float red[kKs][NA][kWarp];  // every warp's partial sums
  const int e = blockIdx.y, rb = static_cast<int>(blockIdx.x) / S, h0 = static_cast<int>(blockIdx.x) % S;
  const int64_t n_embd = down.ne1;
  const int64_t r0 = e * n_embd + static_cast<int64_t>(rb) * kRows;
  if constexpr (TL) prefetch_first_tiles<N>({down.tiles}, r0, pre);
  pdl_wait();
  pdl_trigger();
  const int cnt = counts[e];
  if (8 * h0 >= cnt) return;
  const int off = offsets[e];
  const int n = static_cast<int>(down.n_in);
  const uint8_t* const wq[1] = {TL ? down.tiles : down.q};
  const uint8_t* const wsc[1] = {down.s};
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  for (int base = 8 * h0, live = 1; base < cnt; base += 8 * live * S) {
    live = N > 0 && cnt - base <= 8 ? 1 : NT;  // token tiles of this pass
    float acc[1][2][NT][4] = {};
    if constexpr (N > 0) {
      static_assert(NT <= 2, "k_loop_mx1: one or two token tiles");
      const int8_t* xr[NT];
      const float* xdr[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int64_t row = off + min(base + 8 * j + g, cnt - 1);
        xr[j] = act_q + row * N + 8 * t;
        xdr[j] = act_d + row * (N / 32);
      }
      k_loop_mx1<N, 1, NT, kKs, P, TL, 0, S == 1>(wq, wsc, r0, xr, xdr, live > 1, acc);
    } else {
      const Cols<NT> cols = make_cols<NT>(base, cnt, [&](int i) { return off + i; }, act_q, act_d, n, aneg);
      k_loop<kMX, 1, NT>(wq, wsc, r0, n, cols, acc);
    }
    if constexpr (NT == 1) {
      // One tile (x8 / x32): warp 0 writes it. (Spread over the warps as below: H200, same
      // base, x8 / x32 -1.1 / -2.6%.)
      reduce_warps<NA>(&acc[0][0][0][0], &red[0][0]);
      if (threadIdx.x < kWarp)
        write_tile<NT>(acc[0], o + static_cast<int64_t>(off) * n_embd, n_embd, nullptr,
                       static_cast<int64_t>(rb) * kRows, base, cnt);
      continue;
    }
    // Several tiles (x64, prefill's grouped passes): written by the warps a (token tile,
    // column parity) pair each, as in gate/up.
    park_partials<NA>(&acc[0][0][0][0], red);
    for (int jc = warp; jc < 2 * live; jc += kKs) {
      const int j = jc >> 1, cc = jc & 1, tc = base + 8 * j + 2 * t + cc;
      if (tc >= cnt) continue;
      float* y = o + static_cast<int64_t>(off + tc) * n_embd + static_cast<int64_t>(rb) * kRows;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int c = 2 * h + cc;
          y[c_row(g, mt, c)] = warp_sum<NA>(red, (mt * NT + j) * 4 + c);  // acc[0][mt][j][c]
        }
    }
    if (base + 8 * live * S < cnt) __syncthreads();  // red is written again by the next pass
  }
}

// Scratch areas of one call (carved from one buffer by moe_layout).
struct MoeMmaBufs {
  int64_t rows;   // sorted positions: n_slots packed, n_expert * cap as lists (MoeGroupBufs)
  int8_t* xq;     // (2, n_tok, n_embd) quantized tokens, MXFP4 order, then their negation
  float* xd;      // (n_tok, n_embd / 32)
  int8_t* act_q;  // (2, rows, n_ff) SwiGLU output by sorted position, MXFP4 order; negated (generic loop)
  float* act_d;   // (rows, n_ff / 32)
  float* o;       // (rows, n_embd) down output by sorted position (no bias, no weight)
};

// A forced K-step count (1 or 2) from the environment; 0: the default choice.
int env_steps(const char* name) {
  const int n = env_int(name);
  return n == 1 || n == 2 ? n : 0;
}

// K steps a warp of tiles a lean-loop block prefetches into L2 before its PDL wait
// (prefetch_first_tiles), from 16 tokens a call (below, many experts get no tokens and the
// prefetch is mostly wasted: x8 -1.1%). H100, same call, three rounds, x8 / x32 / x64 tok/s:
// none 1,762-1,764 / 5,256-5,257 / 8,172-8,174; one step in gate/up and down 1,761-1,762 /
// 5,284-5,285 / 8,191-8,193 (gate/up alone 5,277-5,279 / 8,186-8,192; two steps each
// 5,292-5,296 / 8,186-8,195); against the previous commit's build, three rounds: x32 /
// x64 5,242-5,247 / 8,190-8,199 -> 5,220-5,275 / 8,200-8,205. Measurement knobs:
// BRASS_CUDA_MOE_PRE_GU / _DN = steps (0: none), BRASS_CUDA_MOE_PRE_MIN = fewest tokens.
int pre_steps(const MoeP& a, bool gate_up) {
  static const int min_tok = env_count("BRASS_CUDA_MOE_PRE_MIN", 16);
  static const int gu = env_count("BRASS_CUDA_MOE_PRE_GU", 1), dn = env_count("BRASS_CUDA_MOE_PRE_DN", 1);
  return a.n_tok >= min_tok ? (gate_up ? gu : dn) : 0;
}

// S: blocks a row block (the kernels' split).
template <int NT, int MINB = 1, int N = 0, int P = 1, bool TL = false, int S = 1>
void launch_gate_up(const MoeP& a, const MoeMmaBufs& b, const MoeGroupBufs& grp, int n_expert, cudaStream_t st) {
  const int64_t n_embd = a.gate.n_in, n_ff = a.gate.ne1, xneg = a.n_tok * n_embd, aneg = b.rows * n_ff;
  launch_pdl(moe_gate_up_mma_kernel<NT, MINB, N, P, TL, S>,
             dim3(static_cast<unsigned>(n_ff / kRows * S), static_cast<unsigned>(n_expert)),
             dim3(kKs * kWarp), 0, st, a.gate, a.up, a.gate_bias, a.up_bias, static_cast<const int8_t*>(b.xq),
             static_cast<const float*>(b.xd), static_cast<const int32_t*>(grp.counts),
             static_cast<const int32_t*>(grp.offsets), static_cast<const int32_t*>(grp.perm), static_cast<int>(a.k),
             b.act_q, b.act_d, a.alpha, a.limit, xneg, aneg, pre_steps(a, true));
  BRASS_CUDA_LAUNCHED();
}
template <int NT, int MINB = 1, int N = 0, int P = 1, bool TL = false, int S = 1>
void launch_down(const MoeP& a, const MoeMmaBufs& b, const MoeGroupBufs& grp, int n_expert, cudaStream_t st) {
  const int64_t n_embd = a.gate.n_in, n_ff = a.gate.ne1, aneg = b.rows * n_ff;
  launch_pdl(moe_down_mma_kernel<NT, MINB, N, P, TL, S>,
             dim3(static_cast<unsigned>(n_embd / kRows * S), static_cast<unsigned>(n_expert)),
             dim3(kKs * kWarp), 0, st, a.down, static_cast<const int8_t*>(b.act_q), static_cast<const float*>(b.act_d),
             static_cast<const int32_t*>(grp.counts), static_cast<const int32_t*>(grp.offsets), b.o, aneg, pre_steps(a, false));
  BRASS_CUDA_LAUNCHED();
}
template <int NT, int MINB = 1, int N = 0>
void launch_typed(const MoeP& a, const MoeMmaBufs& b, const MoeGroupBufs& grp, int n_expert, cudaStream_t st) {
  launch_gate_up<NT, MINB, N>(a, b, grp, n_expert, st);
  launch_down<NT, MINB, N>(a, b, grp, n_expert, st);
}

}  // namespace

bool moe_mma_supported(const MoeP& a) {
  const DevW &g = a.gate, &u = a.up, &d = a.down;
  if (g.type != kMX || u.type != kMX || d.type != kMX) return false;
  const int64_t n_embd = g.n_in, n_ff = g.ne1;
  return n_embd % 64 == 0 && n_ff % 64 == 0 && u.n_in == n_embd && u.ne1 == n_ff && d.n_in == n_ff &&
         d.ne1 == n_embd && n_ff > 0 && g.rows % n_ff == 0 && g.rows / n_ff <= kMaxMmaExperts && n_embd <= (1 << 20);
}

namespace {

// Slots an expert's list holds when norm_router groups as lists (MoePrep::cap): every
// token, so no list overflows; only while the lists' rows stay within kMaxListRows (the
// sorted buffers grow from n_slots to n_expert * n_tok rows: 8192 rows of gpt-oss's
// 2880-wide experts are ~145 MB of scratch). Why lists: a packed grouping needs every
// token's picks first (a second ticket and one block's grouping at the end of
// norm_router); lists let each token group's last block place its own. H200, one build, x8
// / x32 / x64: 2,070 / 6,643 / 9,936-9,940 -> 2,089 / 6,707 / 10,014-10,017 tok/s.
// (MoeP::lists: CudaBackendOptions::moe_lists.)
constexpr int64_t kMaxListRows = 8192;
int64_t list_cap(const MoeP& a) {
  const int64_t n_expert = a.gate.rows / a.gate.ne1;
  return a.lists && n_expert * a.n_tok <= kMaxListRows ? a.n_tok : 0;
}

int64_t al256(int64_t v) { return (v + 255) / 256 * 256; }

// The scratch's layout: counts | grouping | xq | xd | act_q | act_d | o (256-byte aligned
// areas). The counts come first, kMaxMmaExperts of them whatever n_expert, so they are at
// the same place for every shape and no other area overlaps them: they are zero at rest.
struct MoeLayout {
  MoePrep prep;
  MoeMmaBufs bufs;
  int64_t bytes;
};
MoeLayout moe_layout(const MoeP& a, void* scratch) {
  const int64_t n_embd = a.gate.n_in, n_ff = a.gate.ne1, n_expert = a.gate.rows / a.gate.ne1, n_slots = a.n_tok * a.k;
  const int64_t cap = list_cap(a), rows = cap ? n_expert * cap : n_slots;
  uint8_t* const p0 = static_cast<uint8_t*>(scratch);
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    uint8_t* q = p0 ? p0 + at : nullptr;
    at += al256(bytes);
    return q;
  };
  MoeLayout l{};
  int32_t* counts = reinterpret_cast<int32_t*>(take(kMaxMmaExperts * 4));
  int32_t* gi = reinterpret_cast<int32_t*>(take((n_expert + 1 + 2 * rows + n_slots) * 4));
  if (gi) {  // (null while sizing)
    int32_t* const perm = gi + n_expert + 1;
    l.prep.grp = MoeGroupBufs{counts, gi, perm, perm + rows, perm + rows + n_slots};
  }
  l.prep.cap = cap;
  l.bufs.rows = rows;
  l.bufs.xq = l.prep.xq = reinterpret_cast<int8_t*>(take(2 * a.n_tok * n_embd));
  l.bufs.xd = l.prep.xd = reinterpret_cast<float*>(take(a.n_tok * (n_embd / 32) * 4));
  l.bufs.act_q = reinterpret_cast<int8_t*>(take(2 * rows * n_ff));
  l.bufs.act_d = reinterpret_cast<float*>(take(rows * (n_ff / 32) * 4));
  l.bufs.o = reinterpret_cast<float*>(take(rows * n_embd * 4));
  l.bytes = at;
  return l;
}

}  // namespace

int64_t moe_mma_scratch_bytes(const MoeP& a) { return moe_layout(a, nullptr).bytes; }

MoePrep moe_mma_prep(const MoeP& a, void* scratch) { return moe_layout(a, scratch).prep; }

bool launch_moe_mma(const MoeP& a, void* scratch, cudaStream_t st, const MoeTail* tail, bool prepared) {
  if (a.n_tok <= 0) return true;
  const int64_t n_embd = a.gate.n_in, n_ff = a.gate.ne1, n_expert = a.gate.rows / a.gate.ne1, n_slots = a.n_tok * a.k;
  const MoeLayout lay = moe_layout(a, scratch);
  const MoeGroupBufs& grp = lay.prep.grp;
  const MoeMmaBufs& b = lay.bufs;
  if (!prepared) {
    launch_moe_group(a.ids, n_slots, static_cast<int>(n_expert), grp, st);
    launch_quantize_rows_mma(kMX, a.x, a.n_tok, n_embd, b.xq, b.xd, st);
  }
  // Tokens per pass (8 per tile): the average load per expert, with room for the spread.
  const int64_t avg = (n_slots + n_expert - 1) / n_expert;
  // Up to 16 tokens per pass, the kernels are capped at 128 registers (4 blocks of 4 warps
  // per SM; uncapped the gate/up kernel takes 167 and 3 blocks fit): MoE per layer at 64
  // tokens 0.284 -> 0.252 ms on the H200 despite a 16-byte spill. Targets of 5, 6 or 8
  // blocks per SM for the one-tile kernels (gate/up and down apart too) were no faster at
  // 32 / 64 streams (bench/cuda_decode_notes.md, session 7). Measurement knobs:
  // BRASS_CUDA_MOE_MINB=1 (uncapped), BRASS_CUDA_MOE_NT=1|2|4 (token tiles per pass).
  static const bool capped = env_int("BRASS_CUDA_MOE_MINB") != 1;
  static const int force_nt = env_int("BRASS_CUDA_MOE_NT", 0);
  const int e = static_cast<int>(n_expert);
  // (One tile up to 10 tokens per expert: at 64 streams, ~8 per expert, NT 1 / 2 gave
  // 6,166 / 6,019 tok/s on the H200 once the MXFP4 decode went to two parts: the second
  // tile's registers cost more than the second pass of an expert with more than 8 tokens,
  // whose rows then come mostly from L2.)
  const int nt = force_nt ? force_nt : avg <= 10 ? 1 : 4;
  // gpt-oss's 2880 x 2880 experts on the leaner loop (k_loop_mx1, cuda_mma.cuh): 32 / 64
  // streams 4,203 -> 4,418 / 6,348 -> 6,712 tok/s on the H200. BRASS_CUDA_MOE_FAST=0: the
  // generic loop (measurement knob).
  static const bool fast = knob_on("BRASS_CUDA_MOE_FAST");
  // K steps in flight a warp in the lean loop (k_loop_mx1's P), where registers allow: the
  // gate/up (at its 128-register cap) takes 2, the down 1. H200, same
  // call, x8 / x32 tok/s: one step everywhere 1,721 / 5,196; two in the gate/up 1,746 /
  // 5,250; two in the down too: x32 5,155 (with split blocks, below, at x64: one in the
  // gate/up 8,855-8,867, two in the down 8,991-8,994 against 9,011-9,016 on the H100).
  // BRASS_CUDA_MOE_STEPS_GU / _DOWN = 1 or 2 force one choice (measurement knobs).
  static const int steps_gu = env_steps("BRASS_CUDA_MOE_STEPS_GU"), steps_dn = env_steps("BRASS_CUDA_MOE_STEPS_DOWN");
  const bool lean = nt == 1 && capped && fast && n_embd == kGptOssDim && n_ff == kGptOssDim;
  // The MMA tile copies (CudaBackendOptions::moe_tiles, DevW::tiles) when all three
  // matrices have them: the same loops, each K step's operands in three loads a matrix.
  // H100, same call, x8 / x32 / x64: 1,575 / 4,623 / 7,424 -> 1,727 / 5,128 / 8,074 tok/s.
  const bool tl = lean && a.gate.tiles && a.up.tiles && a.down.tiles;
  // From ~6 tokens an expert on average (64 streams: ~8, 40% of the experts above 8), two
  // blocks a row block, adjacent in launch order, each one tile a pass (token tiles h,
  // h + 2, ...): they read the rows from DRAM about once between them, each decoding them
  // for its own tokens. This replaced a kernel taking two tiles a pass (decoding the rows
  // once for 16 tokens): H100, same call, two rounds, x64 8,445-8,455 -> 9,016-9,021 tok/s
  // (x8 / x32 / pp512 unchanged). bench/cuda_moe_arith.cu, H100, a layer at 8 / 16 tokens
  // an expert: gate/up 132 / 157 us (two tiles) -> 112 / 160, down 78 / 97 -> 64 / 91.
  // BRASS_CUDA_MOE_SPLIT=1|2 forces one choice (measurement knob; 1: an expert's passes in
  // one block, its rows re-read for the second).
  static const int force_split = env_int("BRASS_CUDA_MOE_SPLIT", 0);
  const int split = force_split == 1 || force_split == 2 ? force_split : avg >= 6 ? 2 : 1;
  auto launch_lean = [&]<bool TL, int S>() {
    if (steps_gu == 1)
      launch_gate_up<1, 4, kGptOssDim, 1, TL, S>(a, b, grp, e, st);
    else
      launch_gate_up<1, 4, kGptOssDim, 2, TL, S>(a, b, grp, e, st);
    if (steps_dn == 2)
      launch_down<1, 4, kGptOssDim, 2, TL, S>(a, b, grp, e, st);
    else
      launch_down<1, 4, kGptOssDim, 1, TL, S>(a, b, grp, e, st);
  };
  auto launch_split = [&]<bool TL>() {
    if (split == 2)
      launch_lean.template operator()<TL, 2>();
    else
      launch_lean.template operator()<TL, 1>();
  };
  if (tl) {
    launch_split.template operator()<true>();
  } else if (lean) {
    launch_split.template operator()<false>();
  } else if (nt == 2)
    launch_typed<2, 4>(a, b, grp, e, st);
  else if (nt == 4)
    launch_typed<4>(a, b, grp, e, st);
  else if (capped)
    launch_typed<1, 4>(a, b, grp, e, st);
  else
    launch_typed<1>(a, b, grp, e, st);
  // The combine zeroes the counts (after down, their last reader): MoePrep's rest state.
  if (tail && launch_moe_combine_residual(b.o, grp.inv, a.ids, a.weights, a.down_bias, a.n_tok, a.k, n_embd, *tail,
                                          st, grp.counts, e))
    return true;
  launch_moe_combine(b.o, grp.inv, a.ids, a.weights, a.down_bias, a.out, a.n_tok, a.k, n_embd, st, grp.counts, e);
  return false;
}

}  // namespace brass::backend::cuda
