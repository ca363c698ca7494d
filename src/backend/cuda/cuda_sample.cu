// Token sampling on the device (SampleArgs; the definition is backend/sampling.h, whose
// host function sample_row is the reference): one block of 1024 threads per row, no host
// sync, per-row parameters read from device memory (capturable; a replay reads new seeds
// and counters). Kept set by thresholds instead of sorts:
//   - top-k: exact radix select (4 passes of 8 bits) on the order-preserving key of the
//     logit (sample::key) with count histograms; ties at the k-th key by a second select
//     on the ids (lowest first). Up to kCap survivors are then compacted into shared memory
//     and every later pass runs there.
//   - top-p: radix select on the key with fixed-point mass histograms (sample::mass: integer
//     sums, exact and order-independent, so the cut equals the host's serial one). Before
//     that, tokens of mass < (total - p total) / n are dropped when the rest fits in shared
//     memory: their whole mass is below (1 - p) of the total, so the cut cannot lie among them.
//   - min-p: w_i = expf(s_i - s_max) >= min_p, per token.
//   - the race: one argmax pass of s_i - log(E_i) over the kept tokens; a token whose s_i
//     plus the largest possible noise is below the thread's best so far is skipped (exact).
// Pure temperature sampling is that last pass alone over the row. Histogram updates are
// aggregated per warp (__match_any_sync): logits crowd a few key buckets.
#include <climits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/sample_noise.h"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kCap = 4096;  // compacted candidates (id + logit in shared memory)

struct Shared {
  int32_t ids[kCap];
  float xs[kCap];
  unsigned long long hist_m[256];
  uint32_t hist[256];
  float red_f[32];
  int red_i[32];
  unsigned long long red_u[32];
  int n_compact;
  int overflow;
  int sel_ok, sel_digit;
  uint32_t sel_cnt;
  unsigned long long sel_above;
};

// The current candidate set: the whole row (NaNs and, with has_k, tokens outside the
// top-k threshold excluded) or the compacted list in shared memory.
struct Cands {
  const float* x;
  int n;
  bool compact;
  int cnt;
  bool has_k;
  uint32_t kkey;
  int kid;
};

// f(id, v) for every slot; id < 0: not a candidate. Every thread runs the same number of
// iterations (warp-synchronous callers use __match_any_sync / shuffles inside f).
template <class F>
__device__ __forceinline__ void for_cands(const Shared& sh, const Cands& c, F&& f) {
  const int len = c.compact ? c.cnt : c.n;
  for (int base = 0; base < len; base += kThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    int id = -1;
    float v = 0.0f;
    if (j < len) {
      if (c.compact) {
        id = sh.ids[j];
        v = sh.xs[j];
      } else {
        v = c.x[j];
        id = j;
        if (v != v) {
          id = -1;
        } else if (c.has_k) {
          const uint32_t k = sample::key(v);
          if (!(k > c.kkey || (k == c.kkey && j <= c.kid))) id = -1;
        }
      }
    }
    f(id, v);
  }
}

__device__ __forceinline__ bool better(float av, int ai, float bv, int bi) {
  if (ai < 0) return false;
  if (bi < 0) return true;
  return av > bv || (av == bv && ai < bi);
}

// Block argmax of (v, id) (ties: lower id; id < 0: empty); every thread gets the result.
__device__ void block_best(Shared& sh, float& v, int& id) {
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (better(ov, oi, v, id)) { v = ov; id = oi; }
  }
  if (lane == 0) { sh.red_f[w] = v; sh.red_i[w] = id; }
  __syncthreads();
  if (w == 0) {
    v = sh.red_f[lane];
    id = sh.red_i[lane];
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, id, o);
      if (better(ov, oi, v, id)) { v = ov; id = oi; }
    }
    if (lane == 0) { sh.red_f[0] = v; sh.red_i[0] = id; }
  }
  __syncthreads();
  v = sh.red_f[0];
  id = sh.red_i[0];
  __syncthreads();
}

// Block reduction of u64 (op: 0 sum, 1 max); every thread gets the result.
__device__ unsigned long long block_reduce_u64(Shared& sh, unsigned long long x, int op) {
  const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long y = __shfl_xor_sync(0xffffffffu, x, o);
    x = op == 0 ? x + y : (y > x ? y : x);
  }
  if (lane == 0) sh.red_u[w] = x;
  __syncthreads();
  if (w == 0) {
    x = sh.red_u[lane];
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long y = __shfl_xor_sync(0xffffffffu, x, o);
      x = op == 0 ? x + y : (y > x ? y : x);
    }
    if (lane == 0) sh.red_u[0] = x;
  }
  __syncthreads();
  x = sh.red_u[0];
  __syncthreads();
  return x;
}

__device__ __forceinline__ float key_to_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Radix select, descending, over the candidates for which kf(id, v, &key) holds: the key of
// the element of rank `rank` (0-based) and how many keys are strictly greater (*above) or
// equal (*equal). false when there are at most `rank` such elements.
template <class KeyF>
__device__ bool select_rank(Shared& sh, const Cands& c, KeyF kf, uint32_t rank, uint32_t* out_key, uint32_t* above,
                            uint32_t* equal) {
  uint32_t prefix = 0, mask = 0, ab = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    for_cands(sh, c, [&](int id, float v) {
      uint32_t k = 0;
      int d = 256;
      if (id >= 0 && kf(id, v, &k) && (k & mask) == prefix) d = static_cast<int>((k >> shift) & 255u);
      const unsigned peers = __match_any_sync(0xffffffffu, d);
      if (d < 256 && static_cast<int>(threadIdx.x % kWarp) == __ffs(peers) - 1) atomicAdd(&sh.hist[d], __popc(peers));
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t cum = ab;
      int d = 255;
      for (; d >= 0; --d) {
        if (cum + sh.hist[d] > rank) break;
        cum += sh.hist[d];
      }
      sh.sel_ok = d >= 0;
      sh.sel_digit = d;
      sh.sel_above = cum;
      sh.sel_cnt = d >= 0 ? sh.hist[d] : 0;
    }
    __syncthreads();
    if (!sh.sel_ok) return false;
    prefix |= static_cast<uint32_t>(sh.sel_digit) << shift;
    mask |= 255u << shift;
    ab = static_cast<uint32_t>(sh.sel_above);
    *equal = sh.sel_cnt;
  }
  *out_key = prefix;
  *above = ab;
  return true;
}

// Id of rank `rank` (lowest first) among the candidates whose key is `k`.
__device__ int select_tied_id(Shared& sh, const Cands& c, uint32_t k, uint32_t rank) {
  uint32_t inv = 0, ab = 0, eq = 0;
  const bool ok = select_rank(
      sh, c,
      [&](int id, float v, uint32_t* out) {
        if (sample::key(v) != k) return false;
        *out = ~static_cast<uint32_t>(id);  // descending ~id = ascending id
        return true;
      },
      rank, &inv, &ab, &eq);
  return ok ? static_cast<int>(~inv) : INT_MAX;
}

// Top-p radix select on masses: the key of the token where the cumulative mass (key
// descending) first reaches target, the mass strictly above it and the count at that key.
__device__ void select_mass(Shared& sh, const Cands& c, float inv_t, float s_max, double target, uint32_t* out_key,
                            unsigned long long* above, uint32_t* equal) {
  uint32_t prefix = 0, mask = 0;
  unsigned long long ab = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) {
      sh.hist[i] = 0;
      sh.hist_m[i] = 0;
    }
    __syncthreads();
    for_cands(sh, c, [&](int id, float v) {
      int d = 256;
      unsigned long long m = 0;
      if (id >= 0) {
        const uint32_t k = sample::key(v);
        if ((k & mask) == prefix) {
          d = static_cast<int>((k >> shift) & 255u);
          m = sample::mass(expf(sample::scale(v, inv_t) - s_max));
        }
      }
      const unsigned peers = __match_any_sync(0xffffffffu, d);
      if (d < 256) {
        atomicAdd(&sh.hist_m[d], m);
        if (static_cast<int>(threadIdx.x % kWarp) == __ffs(peers) - 1) atomicAdd(&sh.hist[d], __popc(peers));
      }
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long cum = ab;
      int d = 255, last = -1;
      for (; d >= 0; --d) {
        if (sh.hist[d] == 0) continue;
        last = d;
        if (sample::reaches(cum + sh.hist_m[d], target)) break;
        cum += sh.hist_m[d];
      }
      if (d < 0) {  // not reached (only a target above the total): the last non-empty bucket
        d = last < 0 ? 0 : last;
        cum -= last < 0 ? 0 : sh.hist_m[d];
      }
      sh.sel_digit = d;
      sh.sel_above = cum;
      sh.sel_cnt = sh.hist[d];
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.sel_digit) << shift;
    mask |= 255u << shift;
    ab = sh.sel_above;
    *equal = sh.sel_cnt;
    __syncthreads();
  }
  *out_key = prefix;
  *above = ab;
}

// Move the candidates with keep(id, v) into shared memory; false (nothing changed) when
// more than kCap.
template <class KeepF>
__device__ bool compact(Shared& sh, Cands& c, KeepF keep) {
  if (threadIdx.x == 0) {
    sh.n_compact = 0;
    sh.overflow = 0;
  }
  __syncthreads();
  for_cands(sh, c, [&](int id, float v) {
    if (id >= 0 && keep(id, v)) {
      const int slot = atomicAdd(&sh.n_compact, 1);
      if (slot < kCap) {
        sh.ids[slot] = id;
        sh.xs[slot] = v;
      }
    }
  });
  __syncthreads();
  const bool ok = sh.n_compact <= kCap;
  if (ok) {
    c.compact = true;
    c.cnt = sh.n_compact;
  }
  __syncthreads();
  return ok;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleP a) {
  pdl_trigger();  // launched normally: dependents may start prefetching
  __shared__ Shared sh;
  const int64_t row = blockIdx.x;
  const SampleParams p = a.params[row];
  const float* x = a.x + row * a.n;
  const int n = static_cast<int>(a.n);
  Cands c{x, n, false, 0, false, 0u, INT_MAX};

  if (!(p.temperature > 0.0f)) {  // greedy
    float bv = 0.0f;
    int bi = -1;
    for_cands(sh, c, [&](int id, float v) {
      if (better(v, id, bv, bi)) { bv = v; bi = id; }
    });
    block_best(sh, bv, bi);
    if (threadIdx.x == 0) a.out[row] = bi < 0 ? 0 : bi;
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  const uint64_t st = sample::stream(p.seed, p.counter);
  const bool top_p = p.top_p < 1.0f, min_p = p.min_p > 0.0f;

  // 1. top-k threshold (off when k >= the number of non-NaN logits).
  if (p.top_k > 0 && p.top_k < n) {
    uint32_t kk = 0, ab = 0, eq = 0;
    auto by_key = [](int, float v, uint32_t* k) {
      *k = sample::key(v);
      return true;
    };
    if (select_rank(sh, c, by_key, static_cast<uint32_t>(p.top_k - 1), &kk, &ab, &eq)) {
      const uint32_t need = static_cast<uint32_t>(p.top_k) - ab;  // tokens of key kk kept, lowest ids first
      const int kid = need >= eq ? INT_MAX : select_tied_id(sh, c, kk, need - 1);
      c.has_k = true;
      c.kkey = kk;
      c.kid = kid;
      if (p.top_k <= kCap) compact(sh, c, [](int, float) { return true; });
    }
  }

  uint32_t pkey = 0;
  int pid = INT_MAX;
  float s_max = 0.0f;
  if (top_p || min_p) {
    unsigned long long mk = 0;
    for_cands(sh, c, [&](int id, float v) {
      if (id >= 0) mk = max(mk, static_cast<unsigned long long>(sample::key(v)));
    });
    mk = block_reduce_u64(sh, mk, 1);
    s_max = sample::scale(key_to_float(static_cast<uint32_t>(mk)), inv_t);
  }
  // 3. top-p threshold: (pkey, pid) is the last kept token.
  if (top_p) {
    unsigned long long tot = 0;
    for_cands(sh, c, [&](int id, float v) {
      if (id >= 0) tot += sample::mass(expf(sample::scale(v, inv_t) - s_max));
    });
    tot = block_reduce_u64(sh, tot, 0);
    const double target = sample::top_p_target(p.top_p, tot);
    if (!c.compact && target > 0.0) {
      const unsigned long long need = static_cast<unsigned long long>(ceil(target));
      const unsigned long long tau = tot > need ? (tot - need) / static_cast<unsigned long long>(n) : 0;
      if (tau > 0)
        compact(sh, c, [&](int, float v) { return sample::mass(expf(sample::scale(v, inv_t) - s_max)) >= tau; });
    }
    unsigned long long above = 0;
    uint32_t eq = 0;
    select_mass(sh, c, inv_t, s_max, target, &pkey, &above, &eq);
    // Tied tokens at pkey (equal masses): the fewest, lowest ids first, that reach the target.
    const unsigned long long me = sample::mass(expf(sample::scale(key_to_float(pkey), inv_t) - s_max));
    uint32_t lo = 1, hi = eq > 0 ? eq : 1;
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      if (sample::reaches(above + mid * me, target)) hi = mid; else lo = mid + 1;
    }
    pid = lo >= eq ? INT_MAX : select_tied_id(sh, c, pkey, lo - 1);
  }

  // 5. the race over the kept tokens.
  float best = 0.0f;
  int best_id = -1;
  for_cands(sh, c, [&](int id, float v) {
    if (id < 0) return;
    const float s = sample::scale(v, inv_t);
    if (best_id >= 0 && s + sample::kMaxNoise < best) return;
    if (top_p) {
      const uint32_t k = sample::key(v);
      if (!(k > pkey || (k == pkey && id <= pid))) return;
    }
    if (min_p && !(expf(s - s_max) >= p.min_p)) return;
    const float sc = sample::score(s, st, id);
    if (better(sc, id, best, best_id)) { best = sc; best_id = id; }
  });
  block_best(sh, best, best_id);
  if (threadIdx.x == 0) a.out[row] = best_id < 0 ? 0 : best_id;
}

}  // namespace

void launch_sample(const SampleP& a, cudaStream_t st) {
  if (a.n_rows <= 0 || a.n <= 0) return;
  sample_kernel<<<static_cast<unsigned>(a.n_rows), kThreads, 0, st>>>(a);
  BRASS_CUDA_LAUNCHED();
}

}  // namespace brass::backend::cuda
