// The body of the SIMD kernels, included once per level by simd_avx2.cpp and
// simd_avx512.cpp with BRASS_SIMD_VNNI set to 0 or 1 and BRASS_SIMD_NS naming the
// (anonymous-namespace-enclosed) namespace. 256-bit vectors throughout; the only
// difference between the levels is the int8 dot primitive and, for Q8_0, how signed
// weights meet the unsigned operand:
//   VNNI:  vpdpbusd(acc, w_u8, x_s8) with w_u8 = w + offset (Q8_0: w ^ 0x80 = w + 128;
//          MXFP4: a LUT of the doubled E2M1 values + 12), and acc starting at the lane
//          bias -offset * sum(x) precomputed when the activations were quantized.
//   AVX2:  vpmaddubsw + vpmaddwd. vpmaddubsw saturates int16 pair sums, so Q8_0 uses
//          |w| and sign(x, w) (pair sums <= 2 * 128 * 127 < 32767; x is never -128),
//          and MXFP4 uses the +12 LUT (pair sums <= 2 * 24 * 127).
// No std:: templates in here (see simd_kernels.h). Include <immintrin.h> first.
//
// Tiles: R weight rows x T tokens of f32 accumulators (8 lanes each, one lane group per
// 4 int8 products); each weight block is decoded once per tile and dotted with T
// tokens. Per (row, token) the sequence of operations is the same in every tile shape.

namespace BRASS_SIMD_NS {

using i64 = int64_t;

constexpr int kQK = 32;
constexpr int kMaxR = 4;
constexpr int kMaxT = 4;

// ---- small helpers ----

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane sums of u8 x s8 products, 4 per int32 lane, added to acc.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if BRASS_SIMD_VNNI
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}

// 2^(e - 128) for every E8M0 byte (ggml's halved scale for the doubled E2M1 table;
// e < 2 are subnormals), as a table so the kernel broadcasts it straight from memory.
// constexpr, so it is constant-initialized: a run-time constructor in this file would be
// compiled with this file's -m flags and run at start-up on any processor.
struct E8m0Table {
  float v[256];
  constexpr E8m0Table() : v() {
    float p = 1.0f;  // 2^(e - 128), from e = 128 outwards; exact (powers of two, subnormals too)
    for (int e = 128; e < 256; ++e) {
      v[e] = p;
      if (e < 255) p *= 2.0f;
    }
    p = 0.5f;
    for (int e = 127; e >= 0; --e) {
      v[e] = p;
      if (e > 0) p *= 0.5f;
    }
  }
};
constexpr E8m0Table kE8m0;

inline float f16_scale(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Unsigned offset the kernels add to weights of type t (the activation lane bias is
// -offset * sum of the lane's 4 x values).
inline int weight_offset(DType t) {
  if (t == DType::MXFP4) return 12;
  return BRASS_SIMD_VNNI ? 128 : 0;  // Q8_0: VNNI shifts, AVX2 uses the sign trick
}

// Block totals of 4 rows' lane sums: [sum d0, sum d1, sum d2, sum d3].
inline __m128i reduce4(__m256i d0, __m256i d1, __m256i d2, __m256i d3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_hadd_epi32(d2, d3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline int32_t reduce1(__m256i d) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(d), _mm256_extracti128_si256(d, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// ---- activation quantization ----

void quantize_row(DType wtype, const float* x, i64 n, int8_t* q, float* d, int32_t* nb, int32_t* nbt) {
  const int off = weight_offset(wtype);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (i64 b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
    __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign_mask, v0), _mm256_andnot_ps(sign_mask, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign_mask, v2), _mm256_andnot_ps(sign_mask, v3)));
    const float amax = hmax(m);
    const float db = amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    const __m256 vid = _mm256_set1_ps(id);
    // round to nearest even; |x * id| <= 127 (+ rounding of id), clamp keeps -128 out
    const __m256 lim = _mm256_set1_ps(127.0f);
    auto cv = [&](__m256 v) {
      v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v, vid), _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
      return _mm256_cvtps_epi32(v);
    };
    const __m256i i0 = cv(v0), i1 = cv(v1), i2 = cv(v2), i3 = cv(v3);
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, perm);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQK), p);
    if (off != 0) {
      const __m256i s4 = _mm256_mullo_epi32(dot_u8s8(_mm256_setzero_si256(), _mm256_set1_epi8(1), p),
                                            _mm256_set1_epi32(-off));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(nb + b * 8), s4);
      nbt[b] = reduce1(s4);
    }
  }
}

// ---- weight block decoding (one block of 32 as 32 unsigned / signed bytes) ----

struct Mxfp4 {
  static constexpr i64 kBlockBytes = 17;
  __m256i lut, shifts, mask;
  Mxfp4()
      : lut(_mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                             12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0)),
        shifts(_mm256_setr_epi64x(0, 0, 4, 4)),
        mask(_mm256_set1_epi8(0x0f)) {}
  // Elements 0..15 are the low nibbles of qs, 16..31 the high nibbles: broadcast the
  // 16 bytes to both halves, shift the upper half right by 4, look up. With VBMI,
  // vpermb indexes the 32-entry table (the 16 values twice) with the low 5 bits of each
  // byte, so the bits above the nibble need no masking; vpshufb needs the mask (bit 7
  // zeroes the byte).
  __m256i decode(const uint8_t* p) const {
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 1));
    const __m256i sh = _mm256_srlv_epi64(_mm256_broadcastsi128_si256(qs), shifts);
#if BRASS_SIMD_VNNI
    return _mm256_maskz_permutexvar_epi8(~0u, sh, lut);  // (maskz: GCC 12 warns on the plain form)
#else
    return _mm256_shuffle_epi8(lut, _mm256_and_si256(sh, mask));
#endif
  }
  static float scale(const uint8_t* p) { return kE8m0.v[p[0]]; }
  static const float* scale_ptr(const uint8_t* p) { return &kE8m0.v[p[0]]; }
  // product of the decoded weights with x, into acc (acc holds the lane bias)
  static __m256i dot(__m256i acc, __m256i w, __m256i x) { return dot_u8s8(acc, w, x); }
};

struct Q8 {
  static constexpr i64 kBlockBytes = 34;
  __m256i flip;
  Q8() : flip(_mm256_set1_epi8(static_cast<char>(0x80))) {}
  __m256i decode(const uint8_t* p) const {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
#if BRASS_SIMD_VNNI
    return _mm256_xor_si256(w, flip);  // w + 128 as u8
#else
    return w;  // signed; dot() applies the sign trick
#endif
  }
  static float scale(const uint8_t* p) { return f16_scale(p); }
  const float* scale_ptr(const uint8_t* p) const { return nullptr; }
  static __m256i dot(__m256i acc, __m256i w, __m256i x) {
#if BRASS_SIMD_VNNI
    return dot_u8s8(acc, w, x);
#else
    return dot_u8s8(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
#endif
  }
};

// Every (row, token) result is computed with the same f32 operations whatever tile it
// falls in: per block b the exact int32 total s_b of the 32 products (offset-corrected),
// then acc = fma(float(s_b), f32(ws_b * dx_b), acc) for b ascending, then acc + bias.
// (|s_b| < 2^21, so float(s_b) is exact.) That makes results independent of batch shape
// and thread count, and lets the prefill kernel below use a different layout.

// R (4 or 1) rows starting at w (row stride rb) x T tokens, all nblk blocks.
template <class F, int R, int T>
void tile(const F& f, const uint8_t* w, i64 rb, i64 nblk, const QActRow* x, float* const* y, i64 r,
          const float* bias, bool use_nb) {
  static_assert(R == 4 || R == 1, "tile rows");
  __m128 acc[T];  // R == 4: one lane per row; R == 1: lane 0
  for (int t = 0; t < T; ++t) acc[t] = _mm_setzero_ps();
  for (i64 b = 0; b < nblk; ++b) {
    // The next R rows (contiguous after these) stream in while this tile computes: R
    // rows of ~24-48 cache lines are too short for the hardware stream prefetchers,
    // and the decode mat-vec stalled on DRAM without this. Prefetching past the
    // matrix end is harmless (prefetches do not fault).
    if (g_prefetch_rows > 0) {
      const char* pf = reinterpret_cast<const char*>(w + g_prefetch_rows * rb + b * R * F::kBlockBytes);
      for (i64 o = 0; o < R * F::kBlockBytes; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
    }
    __m256i wv[R];
    for (int i = 0; i < R; ++i) wv[i] = f.decode(w + i * rb + b * F::kBlockBytes);
    // the 4 scales built in registers (a 4-float array store + vector load would miss
    // store-to-load forwarding every block)
    __m128 ws;
    if constexpr (R == 4) {
      const uint8_t* p = w + b * F::kBlockBytes;
      ws = _mm_setr_ps(F::scale(p), F::scale(p + rb), F::scale(p + 2 * rb), F::scale(p + 3 * rb));
    } else {
      ws = _mm_set_ss(F::scale(w + b * F::kBlockBytes));
    }
    for (int t = 0; t < T; ++t) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t].q + b * kQK));
      const __m256i nbv = use_nb ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t].nb + b * 8))
                                 : _mm256_setzero_si256();
      const __m128 dx = _mm_broadcast_ss(x[t].d + b);
      if constexpr (R == 4) {
        const __m128i sb = reduce4(F::dot(nbv, wv[0], xv), F::dot(nbv, wv[1], xv), F::dot(nbv, wv[2], xv),
                                   F::dot(nbv, wv[3], xv));
        acc[t] = _mm_fmadd_ps(_mm_cvtepi32_ps(sb), _mm_mul_ps(ws, dx), acc[t]);
      } else {
        const __m128 sf = _mm_cvtsi32_ss(_mm_setzero_ps(), reduce1(F::dot(nbv, wv[0], xv)));
        acc[t] = _mm_fmadd_ss(sf, _mm_mul_ss(ws, dx), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    if constexpr (R == 4) {
      const __m128 v = bias ? _mm_add_ps(acc[t], _mm_loadu_ps(bias + r)) : acc[t];
      _mm_storeu_ps(y[t] + r, v);
    } else {
      y[t][r] = _mm_cvtss_f32(acc[t]) + (bias ? bias[r] : 0.0f);
    }
  }
}

template <class F, int R>
void tile_t(const F& f, int T, const uint8_t* w, i64 rb, i64 nblk, const QActRow* x, float* const* y, i64 r,
            const float* bias, bool use_nb) {
  switch (T) {
    case 1: tile<F, R, 1>(f, w, rb, nblk, x, y, r, bias, use_nb); break;
    case 2: tile<F, R, 2>(f, w, rb, nblk, x, y, r, bias, use_nb); break;
    case 3: tile<F, R, 3>(f, w, rb, nblk, x, y, r, bias, use_nb); break;
    case 4: tile<F, R, 4>(f, w, rb, nblk, x, y, r, bias, use_nb); break;
    default: break;
  }
}

#if BRASS_SIMD_VNNI
// Prefill (many tokens): 8 rows are decoded once into an interleaved buffer where the
// 32-byte vector k of block b holds bytes 4k..4k+3 of each of the 8 rows, so one
// vpdpbusd against x's dword k broadcast advances all 8 rows' block totals at once and
// the f32 scale/accumulate work is shared by 8 rows (4 vector ops per row-block-token
// in tile() become ~1.4 here). Same per-(row, token) arithmetic as tile().
constexpr i64 kMaxInterleavedBlocks = 256;  // n_in <= 8192

inline void transpose8x8_epi32(__m256i r[8]) {
  const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
  r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
  r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
  r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
  r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
  r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
  r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
  r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
  r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

inline __m256i bcast_dword(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// NT tokens against the 8 interleaved rows (one W load per NT vpdpbusd).
template <int NT>
inline void interleaved_tokens(const uint8_t* __restrict wbuf, const float* __restrict wsb, i64 nblk,
                               const QActRow* x, float* const* y, i64 r, const float* bias, __m256 bv) {
  __m256 acc[NT];
  for (int j = 0; j < NT; ++j) acc[j] = _mm256_setzero_ps();
  for (i64 b = 0; b < nblk; ++b) {
    __m256i a[NT];
    for (int j = 0; j < NT; ++j) a[j] = _mm256_set1_epi32(x[j].nbt[b]);
    const uint8_t* wb = wbuf + b * 256;
    for (int k = 0; k < 8; ++k) {
      const __m256i wk = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + k * 32));
      for (int j = 0; j < NT; ++j) a[j] = _mm256_dpbusd_epi32(a[j], wk, bcast_dword(x[j].q + b * kQK + 4 * k));
    }
    const __m256 ws = _mm256_load_ps(wsb + b * 8);
    for (int j = 0; j < NT; ++j)
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a[j]), _mm256_mul_ps(ws, _mm256_broadcast_ss(x[j].d + b)), acc[j]);
  }
  for (int j = 0; j < NT; ++j) _mm256_storeu_ps(y[j] + r, bias ? _mm256_add_ps(acc[j], bv) : acc[j]);
}

template <class F>
void tile8_interleaved(const F& f, const uint8_t* w, i64 rb, i64 nblk, const QActRow* x, i64 n_tok,
                       float* const* y, i64 r, const float* bias) {
  // On the stack (72 KiB): a thread_local buffer costs a __tls_get_addr call in PIC code,
  // which GCC re-issued inside the loops (spills and vzeroupper around it).
  alignas(32) uint8_t wbuf[kMaxInterleavedBlocks * 256];
  alignas(32) float wsb[kMaxInterleavedBlocks * 8];
  for (i64 b = 0; b < nblk; ++b) {
    __m256i rows[8];
    for (int i = 0; i < 8; ++i) {
      const uint8_t* p = w + i * rb + b * F::kBlockBytes;
      rows[i] = f.decode(p);
      wsb[b * 8 + i] = F::scale(p);
    }
    transpose8x8_epi32(rows);
    for (int k = 0; k < 8; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(wbuf + (b * 8 + k) * 32), rows[k]);
  }
  const __m256 bv = bias ? _mm256_loadu_ps(bias + r) : _mm256_setzero_ps();
  i64 t = 0;
  for (; t + 4 <= n_tok; t += 4) interleaved_tokens<4>(wbuf, wsb, nblk, x + t, y + t, r, bias, bv);
  for (; t < n_tok; ++t) interleaved_tokens<1>(wbuf, wsb, nblk, x + t, y + t, r, bias, bv);
}
constexpr i64 kInterleaveMinTokens = 4;
#endif

template <class F>
void qgemm_f(const QGemmArgs& a) {
  const F f;
  const i64 nblk = a.n_in / kQK;
  const bool use_nb = weight_offset(a.type) != 0;
  i64 r_start = a.r0;
#if BRASS_SIMD_VNNI
  if (a.n_tok >= kInterleaveMinTokens && nblk <= kMaxInterleavedBlocks) {
    for (; r_start + 8 <= a.r1; r_start += 8)
      tile8_interleaved(f, a.w + r_start * a.row_bytes, a.row_bytes, nblk, a.x, a.n_tok, a.y, r_start, a.bias);
  }
#endif
  for (i64 t0 = 0; t0 < a.n_tok; t0 += kMaxT) {
    const int T = static_cast<int>(a.n_tok - t0 < kMaxT ? a.n_tok - t0 : kMaxT);
    i64 r = r_start;
    for (; r + kMaxR <= a.r1; r += kMaxR)
      tile_t<F, kMaxR>(f, T, a.w + r * a.row_bytes, a.row_bytes, nblk, a.x + t0, a.y + t0, r, a.bias, use_nb);
    for (; r < a.r1; ++r)
      tile_t<F, 1>(f, T, a.w + r * a.row_bytes, a.row_bytes, nblk, a.x + t0, a.y + t0, r, a.bias, use_nb);
  }
}

void qgemm(const QGemmArgs& a) {
  if (a.type == DType::MXFP4)
    qgemm_f<Mxfp4>(a);
  else
    qgemm_f<Q8>(a);
}

// f32 dot with 4 independent 8-lane accumulators; fixed order for any n.
float dot_f32(const float* a, const float* b, i64 n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  i64 i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32(float a, const float* x, float* y, i64 n) {
  const __m256 va = _mm256_set1_ps(a);
  i64 i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace BRASS_SIMD_NS
