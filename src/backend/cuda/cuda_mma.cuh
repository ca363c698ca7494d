// Int8 tensor-core (mma.sync m16n8k32 s8) building blocks for "few tokens, read each
// weight byte once" kernels (the grouped MoE, cuda_moe_mma.cu; dense matmuls of 2..64
// tokens, cuda_matmul_mma.cu): weights stay in their device layout (Q8_0 / MXFP4 split,
// cuda_common.cuh) and feed the A operand directly; activations are quantized per 32 as
// quant::quantize_row(Q8_0) does (the q8x numerics: a block's integer dot is exact, then
// scaled by the two block scales in f32), so the q8x CPU twins apply.
//
// Fragment mapping (PTX ISA, mma.m16n8k32 .s8): thread (g = lane / 4, t = lane % 4) holds
// A words {row g, k 4t..4t+3}, {row g+8, ...}, {row g, k 16+4t..}, {row g+8, 16+4t..}, B
// words {k 4t.., col g}, {k 16+4t.., col g}, C {row g, cols 2t, 2t+1}, {row g+8, ...}.
// - MXFP4: word t of a block (bytes 4t..4t+3) holds elements 4t..4t+3 (low nibbles) and
//   16+4t.. (high); decoded with the nibbles as byte-permute selectors (mx_pos_part / mx_neg_part) it
//   gives elements in cuda_common.cuh's MXFP4 order (mx_pos), so activations stored in
//   that order supply B as the 8 bytes at 8t of their 32-group. One K step = a pair of
//   blocks (32 bytes of a row).
// - Q8_0: words t and t + 4 of a block are A's k 4t.. and 16+4t..; activations stored in
//   "MMA order" (q8_mma_pos: the two words a thread needs side by side) supply B as the 8
//   bytes at 8t. One K step = one block (32 bytes of a row).
// Each lane loads the two words it needs of a row (t and t + 4: bytes 4t and 16 + 4t), a
// quad covering the row's 32 bytes in two 16-byte halves. (It loaded 8 contiguous bytes
// and swapped words in a two-round quad shuffle: 2% slower at 32 streams on the H200, the
// shuffles and selects competing with the MXFP4 decode for the integer pipe.)
#pragma once

#include "backend/cuda/cuda_common.cuh"

namespace brass::backend::cuda::mma {

constexpr int kKs = 4;     // warps per block; they split the K dimension
constexpr int kRows = 32;  // weight rows per block (two m16 tiles)

// K steps of a row of n elements (one step: 32 elements for Q8_0, a pair of blocks for MXFP4).
template <int TYPE>
__host__ __device__ constexpr int k_steps(int n) { return TYPE == kMX ? n / 64 : n / 32; }

__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same with C = (c0, c0, c0, c0) and D = c.
__device__ __forceinline__ void mma_s8_from(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1, int c0) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c0));
}

// MXFP4 codes as two unsigned int8 parts, w = P - N (doubled E2M1 magnitudes): the
// positive codes' magnitudes (mx_pos_part, selectors = the code nibbles in v's low 16 bits;
// a negative code's selector has bit 3 set and reads a sign byte of 0) and the negative
// codes' (mx_neg_part of ~v: complemented selectors into the reversed table). The MMA
// loop multiplies P with the activations and N with their negated twin into one int32
// accumulator: 3 integer ops per 4 codes instead of 6 for the signed bytes P - N computed
// in-register as ((P | 0x80..) - N) ^ 0x80.. (the MoE loop at 64 streams was bound by the
// integer pipe: 58% of its instructions, the pipe 68% busy).
__device__ __forceinline__ uint32_t mx_pos_part(uint32_t v) { return prmt(0x03020100u, 0x0C080604u, v); }
__device__ __forceinline__ uint32_t mx_neg_part(uint32_t nv) { return prmt(0x0406080Cu, 0x00010203u, nv); }
// The signed bytes P - N of four codes in one register (for tiles of several token columns,
// where the second MMA and the negated activations' registers cost more than the decode).
__device__ __forceinline__ uint32_t mx_signed(uint32_t v) {
  return ((mx_pos_part(v) | 0x80808080u) - mx_neg_part(~v)) ^ 0x80808080u;
}

// Read-only loads that do not allocate in L1: streamed weights, read once a block, that
// would otherwise evict the activations other blocks of the SM read again.
__device__ __forceinline__ uint4 ldg_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ldg_stream8(const void* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// -v of four signed bytes in [-127, 127]: ~v + 1 a byte, its low seven bits added apart so
// no carry crosses into the next byte, then the top bit (LOP3, IADD, LOP3).
__device__ __forceinline__ uint32_t neg_s8x4(uint32_t v) {
  return ((~v & 0x7F7F7F7Fu) + 0x01010101u) ^ (~v & 0x80808080u);
}

// The two-part decode of a lane's MXFP4 K-step half: codes lo / hi (its words of rows g /
// g + 8) as the A fragments of the positive codes' magnitudes (p) and of the negative
// codes' (n); the MMA loops multiply p with the activations and n with their negated twin
// into one int32 accumulator (w = P - N).
struct MxPN {
  uint32_t p[4], n[4];
};
__device__ __forceinline__ MxPN mx_pn(uint32_t lo, uint32_t hi) {
  const uint32_t nlo = ~lo, nhi = ~hi;
  return {{mx_pos_part(lo), mx_pos_part(hi), mx_pos_part(lo >> 16), mx_pos_part(hi >> 16)},
          {mx_neg_part(nlo), mx_neg_part(nhi), mx_neg_part(nlo >> 16), mx_neg_part(nhi >> 16)}};
}


// Position of element e (0..31) of a Q8_0-activation group in MMA order: words (e / 4) and
// (e / 4 + 4) of the natural order side by side.
__device__ __forceinline__ int q8_mma_pos(int e) { return 8 * ((e & 15) >> 2) + 4 * (e >> 4) + (e & 3); }

// Token columns of one pass: tile j's B column g and C columns 2t, 2t + 1.
template <int NT>
struct Cols {
  const int8_t* b[NT];    // B source row + 8t (quantized activations), null: no column
  int64_t neg;            // MXFP4: elements from b[j] to its negated twin (-q, same layout)
  const float* s[NT][2];  // scale rows of C columns 2t, 2t + 1, null: no column
};

// One K step's operands of a warp.
template <int TYPE, int NM, int NT>
struct Stage {
  static constexpr int kBlk = TYPE == kMX ? 2 : 1;  // 32-element blocks per K step
  uint2 wv[NM][4];  // per row: (word t, word t + 4) of the K step's 32 bytes
  uint32_t ex[NM][4];  // per row: the scale bits as loaded (MXFP4: two E8M0 bytes; Q8_0: f16)
  uint2 bv[NT][kBlk];
  uint2 bn[TYPE == kMX ? NT : 1][kBlk];  // MXFP4: the negated activations
  float xs[NT][kBlk][2];
};

// The columns of one pass, [base, base + 8 NT) of n_cols: column i's activations are row
// row_of(i) of xq (n int8 per row, this lane's 8 bytes at 8t) and xd (n / 32 scales).
template <int NT, class RowOf>
__device__ __forceinline__ Cols<NT> make_cols(int base, int n_cols, RowOf row_of, const int8_t* xq, const float* xd,
                                              int n, int64_t neg = 0) {
  const int lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  Cols<NT> cols;
  cols.neg = neg;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int ib = base + 8 * j + g;
    cols.b[j] = ib < n_cols ? xq + static_cast<int64_t>(row_of(ib)) * n + 8 * t : nullptr;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int ic = base + 8 * j + 2 * t + c;
      cols.s[j][c] = ic < n_cols ? xd + static_cast<int64_t>(row_of(ic)) * (n / 32) : nullptr;
    }
  }
  return cols;
}

// acc (a C fragment: rows g / g + 8, columns 2t / 2t + 1) += the block's integer dot c
// scaled by its row scales (ws0, ws1) and column scales xs.
__device__ __forceinline__ void scale_acc(float (&acc)[4], const int (&c)[4], float ws0, float ws1, const float (&xs)[2]) {
  acc[0] += static_cast<float>(c[0]) * (ws0 * xs[0]);
  acc[1] += static_cast<float>(c[1]) * (ws0 * xs[1]);
  acc[2] += static_cast<float>(c[2]) * (ws1 * xs[0]);
  acc[3] += static_cast<float>(c[3]) * (ws1 * xs[1]);
}
// The same from C already as floats (mx1_step's ABL variants; the production loops keep
// the form above, whose instruction order ptxas was measured with).
__device__ __forceinline__ void scale_acc(float (&acc)[4], const float (&cf)[4], float ws0, float ws1,
                                          const float (&xs)[2]) {
  acc[0] += cf[0] * (ws0 * xs[0]);
  acc[1] += cf[1] * (ws0 * xs[1]);
  acc[2] += cf[2] * (ws1 * xs[0]);
  acc[3] += cf[3] * (ws1 * xs[1]);
}

// The per-warp K loop: rows r0 + g + 8 i (i < 4) of NM matrices (quants wq[m], scales
// wsc[m]; same row indices), K steps p = p0 + warp, p0 + warp + KS, ... < p1 (a K step:
// 32 elements for Q8_0, 64 for MXFP4); acc[m][mt][j][c] accumulates C fragment c of
// m-tile mt (rows g + 16 mt, g + 8 + 16 mt), token tile j.
// PN (MXFP4): the two-part decode (one token tile: 64 streams 6,029 -> 6,166 tok/s on the
// H200) or the signed bytes (several tiles: with two parts the 4-tile MoE kernel took 237
// registers and pp512, which runs it, fell 13,645 -> 12,755 tok/s).
template <int TYPE, int NM, int NT, int KS = kKs, bool PN = (NT == 1)>
__device__ __forceinline__ void k_loop(const uint8_t* const (&wq)[NM], const uint8_t* const (&wsc)[NM], int64_t r0,
                                       int n, const Cols<NT>& cols, float (&acc)[NM][2][NT][4], int p0 = 0,
                                       int p1 = 1 << 30) {
  static_assert(TYPE == kMX || TYPE == kQ8, "int8 MMA: MXFP4 or Q8_0 weights");
  using St = Stage<TYPE, NM, NT>;
  constexpr int kBlk = St::kBlk;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  const int nb = n / 32, steps = nb / kBlk;
  const int64_t rb = TYPE == kMX ? n / 2 : n;  // quant bytes per row
  const uint8_t* q[NM];
  const uint8_t* s[NM];
#pragma unroll
  for (int m = 0; m < NM; ++m) {
    q[m] = wq[m] + (r0 + g) * rb + 4 * t;
    s[m] = wsc[m] + (r0 + g) * nb * (TYPE == kMX ? 1 : 2);
  }
  const int64_t rstride = 8 * rb, sstride = static_cast<int64_t>(8) * nb * (TYPE == kMX ? 1 : 2);
  // Weights (and their raw scale bits, converted in compute) and the activations of step p.
  auto load_w = [&](int p, St& st) {
#pragma unroll
    for (int m = 0; m < NM; ++m)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        st.wv[m][i].x = __ldg(reinterpret_cast<const uint32_t*>(q[m] + i * rstride + 32 * p));
        st.wv[m][i].y = __ldg(reinterpret_cast<const uint32_t*>(q[m] + i * rstride + 32 * p + 16));
        if constexpr (TYPE == kMX)
          st.ex[m][i] = __ldg(reinterpret_cast<const uint16_t*>(s[m] + i * sstride + 2 * p));
        else
          st.ex[m][i] = __ldg(reinterpret_cast<const uint16_t*>(s[m] + i * sstride) + p);
      }
  };
  auto load_x = [&](int p, St& st) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int blk = 0; blk < kBlk; ++blk) {
        const int b = kBlk * p + blk;
        st.bv[j][blk] = cols.b[j] ? __ldg(reinterpret_cast<const uint2*>(cols.b[j] + 32 * b)) : make_uint2(0, 0);
        if constexpr (TYPE == kMX && PN)
          st.bn[j][blk] =
              cols.b[j] ? __ldg(reinterpret_cast<const uint2*>(cols.b[j] + cols.neg + 32 * b)) : make_uint2(0, 0);
#pragma unroll
        for (int c = 0; c < 2; ++c) st.xs[j][blk][c] = cols.s[j][c] ? __ldg(cols.s[j][c] + b) : 0.f;
      }
  };
  auto compute = [&](const St& st) {
#pragma unroll
    for (int m = 0; m < NM; ++m) {
      uint32_t wa[4], wb[4];
      float ws[4][kBlk];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wa[i] = st.wv[m][i].x;
        wb[i] = st.wv[m][i].y;
        if constexpr (TYPE == kMX) {
          ws[i][0] = e8m0_half(static_cast<uint8_t>(st.ex[m][i]));
          ws[i][kBlk - 1] = e8m0_half(static_cast<uint8_t>(st.ex[m][i] >> 8));
        } else {
          ws[i][0] = __half2float(__ushort_as_half(static_cast<unsigned short>(st.ex[m][i])));
        }
      }
#pragma unroll
      for (int blk = 0; blk < kBlk; ++blk)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const float ws0 = ws[2 * mt][blk], ws1 = ws[2 * mt + 1][blk];
          if constexpr (TYPE == kMX && !PN) {
            const uint32_t lo = blk ? wb[2 * mt] : wa[2 * mt], hi = blk ? wb[2 * mt + 1] : wa[2 * mt + 1];
            const uint32_t a0 = mx_signed(lo), a1 = mx_signed(hi), a2 = mx_signed(lo >> 16), a3 = mx_signed(hi >> 16);
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              int c[4] = {0, 0, 0, 0};
              mma_s8(c, a0, a1, a2, a3, st.bv[j][blk].x, st.bv[j][blk].y);
              scale_acc(acc[m][mt][j], c, ws0, ws1, st.xs[j][blk]);
            }
          } else if constexpr (TYPE == kMX) {
            const uint32_t lo = blk ? wb[2 * mt] : wa[2 * mt], hi = blk ? wb[2 * mt + 1] : wa[2 * mt + 1];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              int c[4] = {0, 0, 0, 0};
              const MxPN d = mx_pn(lo, hi);  // P times the activations, N times their negated twin
              mma_s8(c, d.p[0], d.p[1], d.p[2], d.p[3], st.bv[j][blk].x, st.bv[j][blk].y);
              mma_s8(c, d.n[0], d.n[1], d.n[2], d.n[3], st.bn[j][blk].x, st.bn[j][blk].y);
              scale_acc(acc[m][mt][j], c, ws0, ws1, st.xs[j][blk]);
            }
          } else {
#pragma unroll
            for (int j = 0; j < NT; ++j) {
              int c[4] = {0, 0, 0, 0};
              mma_s8(c, wa[2 * mt], wa[2 * mt + 1], wb[2 * mt], wb[2 * mt + 1], st.bv[j][blk].x, st.bv[j][blk].y);
              scale_acc(acc[m][mt][j], c, ws0, ws1, st.xs[j][blk]);
            }
          }
        }
    }
  };
  // (Measured on the H200: loading step p + KS into a second Stage while step p computes
  // made the MoE slower, 0.26 -> 0.33 ms per layer at 64 tokens, and the dense kernel no
  // faster: the extra registers cost more occupancy than the overlap gained. Neither did a
  // 4-stage cp.async ring of the weights in shared memory (no registers held, ~48 KB in
  // flight per SM): MoE 0.263 -> 0.285 ms, output head at 64 tokens 0.76 -> 0.75 ms. The
  // loop is bound by its instructions per weight byte (the per-block int32 -> f32 scaling
  // of every C fragment, the MXFP4 decode), not by bytes in flight. Session 7, after the
  // two-part decode: only the weights loaded one step ahead, two stages in turn, NT 1:
  // 4,308 / 6,297 -> 4,007 / 5,897 tok/s at 32 / 64 streams; more resident blocks (5-8 per
  // SM) no better either.)
  const int pe = min(p1, steps);
#pragma unroll 1
  for (int p = p0 + warp; p < pe; p += KS) {
    St st;
    load_w(p, st);
    load_x(p, st);
    compute(st);
  }
}

// One K step (64 elements) of the grouped MoE's lean loop below, from the operands a lane
// holds: wv[m][i] its words t, t + 4 of row g + 8 i of matrix m; ex[m][i] the row's
// two E8M0 bytes (block 2p in bits 0..7); bv / bn its column's activations of blocks 2p,
// 2p + 1 and their negation; own: its column's two block scales. The same sums as
// k_loop<kMX, NM, 1> (two-part decode), with fewer integer-pipe instructions, the pipe that
// bound that loop (ncu at 32 streams: ALU 60% busy, 264 ALU instructions a K step of a
// warp, of which ~90 the E8M0 conversion and 64-bit address arithmetic):
// - the E8M0 byte becomes 2^(E-127) as float bits max(E << 23, 2^-127's bits), exact for
//   every E; the 0.5 of the doubled code magnitudes goes into the activation scale;
// - the C columns' scales (columns 2t, 2t + 1) come by shuffle from the lanes that hold
//   those columns as B.
// NT = 2: two token tiles share each K step's decode (an expert of 9..16 tokens at 64
// streams: one pass over its rows instead of two, the second of which re-read them from
// L2 and decoded them again); tile 1 computes only when `two` (warp-uniform). Measured on
// the H200 at 64 streams: +0.1% over one tile a pass (7,655 vs 7,649 tok/s); the loop's
// rewrite for it (decode before the scales, the negated activations at a fixed offset
// instead of their own pointer) gave x8 / x32 / x64 +1.0 / +1.5 / +1.6% by itself.
// ABL (bench/cuda_moe_arith.cu only; production uses 0): parts of the step left out to see
// what the loop's time is made of (the sums are then wrong): 1 the MXFP4 decode (raw words
// as A), 2 the per-block scaling (the int32 C bits added as floats), 4 the N-part MMA, 8
// the int -> float conversion alone (C bits as floats, still scaled); 16: the signed-byte
// decode (mx_signed) and one MMA a tile instead of the two parts (right sums); 32: the
// int -> float by the MMA (C starts at 1.5 * 2^23's bits, one FADD after; right sums); 64:
// the E8M0 -> float as one shift (as from scales stored as bf16 bits; wrong sums).
template <int NM, int NT = 1, int ABL = 0>
__device__ __forceinline__ void mx1_step(const uint2 (&wv)[NM][4], const uint32_t (&ex)[NM][4],
                                         const uint2 (&bv)[NT][2], const uint2 (&bn)[NT][2], const float2 (&own)[NT],
                                         bool two, float (&acc)[NM][2][NT][4]) {
  const int t = threadIdx.x & 3;
  const int src0 = 8 * t, src1 = 8 * t + 4;  // lanes holding B columns 2t and 2t + 1
  float xs[NT][2][2];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    xs[j][0][0] = __shfl_sync(0xffffffffu, own[j].x, src0) * 0.5f;
    xs[j][0][1] = __shfl_sync(0xffffffffu, own[j].x, src1) * 0.5f;
    xs[j][1][0] = __shfl_sync(0xffffffffu, own[j].y, src0) * 0.5f;
    xs[j][1][1] = __shfl_sync(0xffffffffu, own[j].y, src1) * 0.5f;
  }
#pragma unroll
  for (int m = 0; m < NM; ++m)
#pragma unroll
    for (int blk = 0; blk < 2; ++blk)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint32_t lo = blk ? wv[m][2 * mt].y : wv[m][2 * mt].x;
        const uint32_t hi = blk ? wv[m][2 * mt + 1].y : wv[m][2 * mt + 1].x;
        // decoded once for every tile
        const MxPN d = (ABL & 1) ? MxPN{{lo, hi, lo, hi}, {hi, lo, hi, lo}} : mx_pn(lo, hi);
        float w[2];  // rows g + 16 mt, g + 8 + 16 mt: 2^(E - 127)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t e = ex[m][2 * mt + h];
          if constexpr (ABL & 64) {
            w[h] = __uint_as_float(blk ? e & 0xFFFF0000u : e << 16);
          } else {
            const uint32_t bits = (blk ? e << 15 : e << 23) & 0x7F800000u;
            w[h] = __uint_as_float(max(bits, 0x00400000u));
          }
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j > 0 && !two) break;
          int c[4] = {0, 0, 0, 0};
          if constexpr (ABL & 32) {
            constexpr int kMagic = 0x4B400000;  // 1.5 * 2^23: its bits + n are the float 1.5 * 2^23 + n
            mma_s8_from(c, d.p[0], d.p[1], d.p[2], d.p[3], bv[j][blk].x, bv[j][blk].y, kMagic);
            mma_s8(c, d.n[0], d.n[1], d.n[2], d.n[3], bn[j][blk].x, bn[j][blk].y);
            float cf[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) cf[i] = __int_as_float(c[i]) - 12582912.0f;
            scale_acc(acc[m][mt][j], cf, w[0], w[1], xs[j][blk]);
            continue;
          }
          if constexpr (ABL & 16) {
            mma_s8(c, mx_signed(lo), mx_signed(hi), mx_signed(lo >> 16), mx_signed(hi >> 16), bv[j][blk].x,
                   bv[j][blk].y);
          } else {
            mma_s8(c, d.p[0], d.p[1], d.p[2], d.p[3], bv[j][blk].x, bv[j][blk].y);
            if constexpr (!(ABL & 4)) mma_s8(c, d.n[0], d.n[1], d.n[2], d.n[3], bn[j][blk].x, bn[j][blk].y);
          }
          if constexpr (ABL & 8) {
            float cf[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) cf[i] = __int_as_float(c[i]);
            scale_acc(acc[m][mt][j], cf, w[0], w[1], xs[j][blk]);
          } else if constexpr (ABL & 2) {
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][mt][j][i] += __int_as_float(c[i]);
          } else {
            scale_acc(acc[m][mt][j], c, w[0], w[1], xs[j][blk]);
          }
        }
      }
}

// The grouped MoE's K loop for NT (1 or 2) token tiles of NM MXFP4 matrices whose rows are
// N elements long (N known at compile time, gpt-oss: 2880, so row strides are immediates
// and each matrix needs one pointer). Every column points at a real token row (a missing
// column repeats another; its sums are computed and never stored), so nothing is checked
// for null. xrow[j]: this lane's column row of tile j + 8t; xdrow[j]: the column's N / 32
// scales; tile 1 only when `two`. Warp w takes K steps w, w + KS, ...
// The N part's negated activations are computed from the loaded ones (neg_s8x4, 3 integer
// ops a word) instead of read from their twin in memory: the twin was a third of a K step's
// L2 reads at 8 tokens (ncu, H100, x64 gate/up: 500 MB of L2 reads for 284 MB from DRAM, L2
// 79% busy). Same sums; H100, same call, x8 / x32 / x64 1,807-1,809 / 5,597-5,599 /
// 9,023-9,024 -> 1,830-1,831 / 5,704-5,705 / 9,146-9,150 tok/s, and ptxas no longer
// spills in the gate/up kernels.
// With P = 1 the loop keeps one K step's loads in flight a warp (about 2 KB for gate/up),
// too few to cover DRAM latency with 16 warps an SM (ncu at 32 streams: long-scoreboard
// stalls most of the time). Three ways to keep more in flight measured slower at 32
// streams on the H200 (4,406-4,421 tok/s without): a cp.async ring of every operand, 2 or
// 3 stages a warp (it hid the latency but cost more integer and shared-memory instructions
// than it saved), 4,279 / 4,264; a bulk L2 prefetch of each block's whole rows at its
// start, 4,130; each lane asking L2 for one row's bytes 1 or 2 steps ahead
// (prefetch.global.L2), 3,124 / 3,225. What did pay (session 18, +1 to +1.5%): P = 2, the
// loads of two K steps issued before computing the first, in registers, in the kernels
// that have the registers to spare (cuda_moe_mma.cu picks per kernel). Session 27 (H100)
// found the real limit in the loads' shape: each warp load here touches 8 rows' half
// sectors, and even without arithmetic that pattern reads a layer's gate + up at ~69% of
// a plain copy (bench/cuda_moe_pattern.cu); a ping-pong variant (the next step's loads
// before this step computes) lost 1-15% and a 4-stage ring a third.
// TL: wq[m] is matrix m's tile copy (DevW::tiles: a step's operands in two 16-byte loads
// and one 8-byte load a lane, 1,088 contiguous bytes a warp), wsc unused: x8 / x32 / x64
// +10 / +11 / +9% on the H100. NA1 (TL): the tiles' loads do not allocate in L1
// (ldg_stream16): H100, same call, x8 / x32 1,828 / 5,718-5,719 -> 1,852-1,858 /
// 5,741-5,754 tok/s; x64, whose split blocks re-read the rows, 9,162-9,168 -> 9,148-9,150
// (so there the kernels keep plain loads).
template <int N, int NM, int NT = 1, int KS = kKs, int P = 1, bool TL = false, int ABL = 0, bool NA1 = false>
__device__ __forceinline__ void k_loop_mx1(const uint8_t* const (&wq)[NM], const uint8_t* const (&wsc)[NM], int64_t r0,
                                           const int8_t* const (&xrow)[NT], const float* const (&xdrow)[NT],
                                           bool two, float (&acc)[NM][2][NT][4]) {
  static_assert(N % 64 == 0, "MXFP4 K steps of 64");
  static_assert(P == 1 || P == 2, "one or two K steps a pass");
  constexpr int kRb = N / 2, kNb = N / 32, kSteps = N / 64;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  const uint8_t* q[NM];
  const uint8_t* s[NM];
#pragma unroll
  for (int m = 0; m < NM; ++m) {
    if constexpr (TL) {
      q[m] = wq[m] + ((r0 / 32) * kSteps + warp) * kMxTileBytes + 16 * lane;
      s[m] = wq[m] + ((r0 / 32) * kSteps + warp) * kMxTileBytes + 1024 + 8 * g;
    } else {
      q[m] = wq[m] + (r0 + g) * kRb + 4 * t + 32 * warp;
      s[m] = wsc[m] + (r0 + g) * kNb + 2 * warp;
    }
  }
  const int8_t* xp[NT];
  const float* xd[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    xp[j] = xrow[j] + 64 * warp;
    xd[j] = xdrow[j] + 2 * warp;
  }
  // One K step's operands (step u of the pass: u KS steps past the pointers).
  struct Step {
    uint2 wv[NM][4];
    uint32_t ex[NM][4];
    uint2 bv[NT][2], bn[NT][2];
    float2 own[NT];
  };
  // Bytes a warp's pointers move a K step.
  constexpr int64_t kQStep = TL ? KS * kMxTileBytes : 32 * KS, kSStep = TL ? KS * kMxTileBytes : 2 * KS;
  auto load = [&](Step& st, int u) {
#pragma unroll
    for (int m = 0; m < NM; ++m) {
      if constexpr (TL) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint8_t* at = q[m] + u * kQStep + 512 * h;
          const uint4 v = NA1 ? ldg_stream16(at) : __ldg(reinterpret_cast<const uint4*>(at));
          st.wv[m][2 * h] = make_uint2(v.x, v.y);
          st.wv[m][2 * h + 1] = make_uint2(v.z, v.w);
        }
        // (mx1_step uses a pair's low 16 bits only)
        const uint2 e = NA1 ? ldg_stream8(s[m] + u * kSStep) : __ldg(reinterpret_cast<const uint2*>(s[m] + u * kSStep));
        st.ex[m][0] = e.x;
        st.ex[m][1] = e.x >> 16;
        st.ex[m][2] = e.y;
        st.ex[m][3] = e.y >> 16;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint8_t* qi = q[m] + u * 32 * KS + i * 8 * kRb;
          st.wv[m][i].x = __ldg(reinterpret_cast<const uint32_t*>(qi));
          st.wv[m][i].y = __ldg(reinterpret_cast<const uint32_t*>(qi + 16));
          st.ex[m][i] = __ldg(reinterpret_cast<const uint16_t*>(s[m] + u * 2 * KS + i * 8 * kNb));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (j > 0 && !two) {
        st.own[j] = st.own[0];
        break;
      }
#pragma unroll
      for (int blk = 0; blk < 2; ++blk) {
        st.bv[j][blk] = __ldg(reinterpret_cast<const uint2*>(xp[j] + u * 64 * KS + 32 * blk));
      }
      st.own[j] = __ldg(reinterpret_cast<const float2*>(xd[j] + u * 2 * KS));
    }
  };
  auto negate = [&](Step& st) {  // (after the loads of both steps are out)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int blk = 0; blk < 2; ++blk)
        st.bn[j][blk] = make_uint2(neg_s8x4(st.bv[j][blk].x), neg_s8x4(st.bv[j][blk].y));
  };
#pragma unroll 1
  for (int p = warp; p < kSteps; p += P * KS) {
    Step s0, s1;
    load(s0, 0);
    const bool second = P > 1 && p + KS < kSteps;  // warp-uniform
    if (second) load(s1, 1);
#pragma unroll
    for (int m = 0; m < NM; ++m) {
      q[m] += P * kQStep;
      s[m] += P * kSStep;
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      xp[j] += P * 64 * KS;
      xd[j] += P * 2 * KS;
    }
    negate(s0);
    mx1_step<NM, NT, ABL>(s0.wv, s0.ex, s0.bv, s0.bn, s0.own, two, acc);
    if (second) {
      negate(s1);
      mx1_step<NM, NT, ABL>(s1.wv, s1.ex, s1.bv, s1.bn, s1.own, two, acc);
    }
  }
}

// Warps 1.. add their partial sums (NA floats per lane) into warp 0's registers.
template <int NA, int KS = kKs>
__device__ __forceinline__ void reduce_warps(float* acc, float (*red)[kWarp]) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (warp > 0)
#pragma unroll
    for (int i = 0; i < NA; ++i) red[(warp - 1) * NA + i][lane] = acc[i];
  __syncthreads();
  if (warp == 0)
#pragma unroll
    for (int w = 0; w < KS - 1; ++w)
#pragma unroll
      for (int i = 0; i < NA; ++i) acc[i] += red[w * NA + i][lane];
  __syncthreads();
}

// The spread form of reduce_warps (the grouped MoE's epilogues, whose work is split over
// the warps): every warp parks its NA partial sums in red[warp], then a barrier;
// warp_sum(red, i) is then element i of the lane's tile, summed in warp order (the same
// sum as reduce_warps). red is free again after another barrier.
template <int NA>
__device__ __forceinline__ void park_partials(const float* acc, float (*red)[NA][kWarp]) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
#pragma unroll
  for (int i = 0; i < NA; ++i) red[warp][i][lane] = acc[i];
  __syncthreads();
}
template <int NA, int KS = kKs>
__device__ __forceinline__ float warp_sum(const float (*red)[NA][kWarp], int i) {
  const int lane = threadIdx.x % kWarp;
  float v = red[0][i][lane];
#pragma unroll
  for (int w = 1; w < KS; ++w) v += red[w][i][lane];
  return v;
}

// After the K loop of a dense tile (block (x, y, z) of a grid split over K in gridDim.z
// ranges): the block's warps are summed into warp 0 (reduce_warps); with a K split, warp
// 0 leaves that partial (NA floats per lane) in part[tile] (ksplit, NA, 32), tile y *
// gridDim.x + x, and the last block of the tile to finish (a ticket per tile) adds the
// ksplit partials in split order (deterministic: the same sum whichever block comes last)
// and resets the ticket. Returns true for the threads that hold the tile's final sums
// (warp 0 of the last block).
template <int NA, int KS>
__device__ __forceinline__ bool finish_split_tile(float* acc, float (*red)[kWarp], float* part, unsigned* tickets) {
  reduce_warps<NA, KS>(acc, red);
  const int ksplit = static_cast<int>(gridDim.z), lane = threadIdx.x % kWarp;
  if (threadIdx.x >= kWarp) return false;
  if (ksplit == 1) return true;
  const int64_t tile = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  float* const tile_part = part + tile * ksplit * NA * kWarp;
#pragma unroll
  for (int i = 0; i < NA; ++i) tile_part[(static_cast<int64_t>(blockIdx.z) * NA + i) * kWarp + lane] = acc[i];
  __threadfence();  // the partial is visible before the ticket is taken
  __syncwarp();
  unsigned ticket = 0;
  if (lane == 0) ticket = atomicAdd(&tickets[tile], 1u);
  if (__shfl_sync(~0u, ticket, 0) != static_cast<unsigned>(ksplit - 1)) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < NA; ++i) acc[i] = 0.f;
  for (int s = 0; s < ksplit; ++s)
#pragma unroll
    for (int i = 0; i < NA; ++i) acc[i] += __ldcg(tile_part + (static_cast<int64_t>(s) * NA + i) * kWarp + lane);
  if (lane == 0) tickets[tile] = 0;
  return true;
}

// Row (within the block's 32) of a thread's C fragment c in m-tile mt.
__device__ __forceinline__ int c_row(int g, int mt, int c) { return g + 8 * (c >> 1) + 16 * mt; }

// y[token, r] = tile sum (+ bias) for the C fragments of a thread (token tiles j < NT of 8
// from `base`, rows r0 + c_row; y has `rows` floats per token).
template <int NT>
__device__ __forceinline__ void write_tile(const float (&acc)[2][NT][4], float* y, int64_t rows,
                                           const float* __restrict__ bias, int64_t r0, int base, int n_tok) {
  const int lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int tc = base + 8 * j + 2 * t + (c & 1);
        const int64_t r = r0 + c_row(g, mt, c);
        if (tc < n_tok) y[static_cast<int64_t>(tc) * rows + r] = acc[mt][j][c] + (bias ? bias[r] : 0.f);
      }
}

// One warp: group gi (32 floats at x + 32 gi) -> xq (int8, MXFP4 order for MX weights,
// MMA order for Q8_0) + xd[gi], d = amax / 127 rounded to f16 as quantize_row(Q8_0).
// neg > 0 (MXFP4 order): also -q at xq + neg (the twin the MMA loop's N part reads).
template <int TYPE>
__device__ __forceinline__ void quantize_group_mma(const float* __restrict__ x, int64_t gi, int8_t* xq, float* xd,
                                                   int64_t neg = 0) {
  const int lane = threadIdx.x % kWarp;
  const float v = x[gi * 32 + lane];
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const int8_t q = q8_code(v, q8_inv(d));
  const int64_t at = gi * 32 + (TYPE == kMX ? mx_pos(lane) : q8_mma_pos(lane));
  xq[at] = q;
  if (neg) xq[neg + at] = static_cast<int8_t>(-q);
  if (lane == 0) xd[gi] = q8_stored_scale(d);
}

}  // namespace brass::backend::cuda::mma
