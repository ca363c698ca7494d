// Token sampling pieces shared by host and device code (plain C++, no fmt, no backend.h):
// the per-row sampling parameters (SampleParams, read from backend memory by the sample
// op), the order-preserving key of a logit, the fixed-point probability mass used by
// top-p, and the race noise. Every function here is the ONE definition the host
// reference (backend/sampling.cpp, used by runtime::Sampler) and the CUDA kernel
// (backend/cuda/cuda_sample.cu) both call, so they compute the same values.
//
// The draw is an exponential race (Gumbel-max): token = argmax over the kept set of
//   score_i = s_i - log(E_i),   s_i = logit_i * (1 / T),   E_i ~ Exp(1) i.i.d.
// (ties: lower id). P(i wins) = exp(s_i) / sum_kept exp(s_j): an exact draw from the
// renormalized kept distribution, with no sort and no running sum. E_i comes from a
// counter-based hash of (seed, draw counter, token id), so any token's noise can be
// computed independently, in any order, on any device.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define BRASS_SAMPLE_HD __host__ __device__ __forceinline__
#else
#define BRASS_SAMPLE_HD inline
#endif

namespace brass::backend {

// One row's sampling parameters (POD; an array of these lives in backend memory).
struct SampleParams {
  float temperature = 1.0f;  // <= 0 (or NaN): greedy argmax (ties: lower id)
  int32_t top_k = 0;         // <= 0 or >= n: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  uint64_t seed = 0;
  uint64_t counter = 0;      // the draw counter: one sequence's draws 0, 1, 2, ...
};
static_assert(sizeof(SampleParams) == 32, "SampleParams is shared with device code");

namespace sample {

// splitmix64's finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix.
BRASS_SAMPLE_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// The per-draw stream id: distinct counters of one seed give distinct streams.
BRASS_SAMPLE_HD uint64_t stream(uint64_t seed, uint64_t counter) { return mix64(mix64(seed) + counter); }
// 64 random bits for one token of one draw.
BRASS_SAMPLE_HD uint64_t token_bits(uint64_t stream_id, int64_t token) {
  return mix64(stream_id + (static_cast<uint64_t>(token) + 1) * 0x9e3779b97f4a7c15ull);
}

// V in (0, 1) from the top 32 bits: (u + 1/2) * 2^-32 rounded to float, clamped below 1.
BRASS_SAMPLE_HD float uniform_open(uint64_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits >> 32);
  const float v = (static_cast<float>(u) + 0.5f) * 2.3283064365386963e-10f;  // 2^-32
  return v < 0.99999994f ? v : 0.99999994f;  // 0x1.fffffep-1: the largest float below 1
}
// E ~ Exp(1) as -log(1 - V): small E (the race's winners) come from small V, where a
// float keeps V's full 32-bit resolution (-log(V) would quantize them at 2^-24).
// Range [1.16e-10, 16.6].
BRASS_SAMPLE_HD float exp1(uint64_t bits) { return -log1pf(-uniform_open(bits)); }
// The largest possible Gumbel term -log(E) (E >= 1.16e-10: 22.9), rounded up: a token with
// s_i + kMaxNoise < the best score seen so far cannot win and may be skipped (exact).
inline constexpr float kMaxNoise = 24.0f;

// s = logit * inv_t with one rounding (no fused multiply-add into what follows).
BRASS_SAMPLE_HD float scale(float logit, float inv_t) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(logit, inv_t);
#else
  return logit * inv_t;
#endif
}
// The race score of token i with scaled logit s.
BRASS_SAMPLE_HD float score(float s, uint64_t stream_id, int64_t token) { return s - logf(exp1(token_bits(stream_id, token))); }

// Order-preserving key: key(a) > key(b) iff a > b for non-NaN floats (-0 is taken as +0).
// NaN logits are never kept (callers skip them).
BRASS_SAMPLE_HD uint32_t key(float x) {
  if (x == 0.0f) x = 0.0f;
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(x);
#else
  std::memcpy(&u, &x, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Top-p works on fixed-point masses: w = exp(s - s_max) in (0, 1] times 2^40, truncated.
// Integer sums are exact and order-independent (the GPU's parallel sums equal the host's
// serial ones); the lost mass (< 2^-40 per token) is below 2e-7 of the total at 200k tokens.
BRASS_SAMPLE_HD uint64_t mass(float w) { return static_cast<uint64_t>(w * 1099511627776.0f); }
// The top-p cut: the smallest prefix (scaled logit descending, then lower id) whose mass
// `cum` reaches p of the total: (double)cum >= (double)p * (double)total.
BRASS_SAMPLE_HD bool reaches(uint64_t cum, double target) { return static_cast<double>(cum) >= target; }
BRASS_SAMPLE_HD double top_p_target(float top_p, uint64_t total) {
  return static_cast<double>(top_p) * static_cast<double>(total);
}

}  // namespace sample
}  // namespace brass::backend
