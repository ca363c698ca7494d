// One decode token: the attention's output projection (wo) fused with the head of the MoE
// block (residual add, RMSNorm, router logits, top-k): one kernel instead of the
// preloading mat-vec and norm_router (cuda_q8_pre.cu).
// grid (ceil(n_embd / 8)), warp w of block b owns residual row r = 8 b + w:
// - before the PDL wait: its wo row (registers), y[r], norm[r] and the bias; the block's
//   slice of the router (8 columns) into shared memory;
// - after it: s = y[r] + (wo_r . attn + bo_r) (the composed path's bits: matvec_pre's
//   y = dot + bias, then norm_router's residual add), written back to y; the block's
//   partials (per expert e: the sum over its rows of s * norm[r] * router[e][r]; and the
//   sum of s^2) are added in fixed point to 64-bit accumulators (integer adds: the same
//   bits in any order, so every run gives the same logits; 16 copies, block b adding to
//   copy b % 16: 360 atomics on one address took ~1.3 us), and the block draws a ticket;
// - the last block reads the accumulators, so that inv = 1 / sqrt(mean(s^2) + eps) and
//   logit_e = inv * sum_r s norm[r] router[e][r] + bias_e (= xn . router_e, xn = s * inv *
//   norm), picks the top k, writes xn and its int8 copy for gate/up, and zeroes the
//   accumulators and the ticket (a captured graph replays).
// x: the one-token decode attention writes its output quantized too (AttnParams::out_q),
// which the blocks copy (xq_in, 4.6 KB) instead of each reading 16 KB of f32 and
// quantizing it after the wait (5.9 MB of L2 reads at once over 360 blocks): the same
// bits. H200, one build beside b8befe3, three rounds: tg128 894.8-898.5 -> 903.8-907.7
// tok/s, @ d4096 845.9-847.7 -> 851.9-852.4 (session 42; BRASS_CUDA_ATTN_Q8=0 turns it off).
// Why: the router's rows then load before the wait, in slices beside wo's, and the chain
// loses a kernel boundary (norm_router started only as wo ended, and waited ~2 us for its
// 368 KB of rows after its own wait; H200 probe, session 37).
// Numerics: y as the composed path; the logits and inv are sums in another order (the
// router's tests bound them), each block's partial rounded to 2^-32 (logits) or 2^-16
// (squares) on the way; xn = (s * inv) * norm as norm_router. Fixed point bounds the sums
// (|logit partial sums| < 2^31, sum of squares < 2^47): beyond them, and for NaN, the
// logits are garbage, as the input is.
#include "backend/cuda/cuda_probe.cuh"
#include "backend/cuda/cuda_rowfrag.cuh"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kCols = kWarp + 1;  // a block's partials: 32 experts' sums, then the sum of squares
constexpr int kXnThreads = kThreads - kWarp, kXnVec = 4;  // the last block's warps 1..7: n_embd <= 3584
constexpr float kLogitFix = 4294967296.0f, kSquareFix = 65536.0f;  // 2^32, 2^16
// Copies of the sums: block b adds to copy b % 16, fewer atomics a line to drain before the
// last block's ticket and reads. H200, tg128 (session 50, three rounds, with the router
// bias loaded early): 8 copies 916.8-919.3, 16 920.0-922.8; 4 lost (914.6-918.1), and 32 /
// 64 summed by the last block through shared-memory atomics lost 3% / 6% (its chain is the
// layer's: every cycle of it counts).
constexpr int kAccGroups = 16;

// The kernel's parameters: only what it reads (a launch with MoeBlockP's 456 bytes started
// its blocks ~1.2 us later after the trigger than wo's mat-vec, H200 probe).
struct WoRouterK {
  DevW wo;
  const float* wo_bias; const float* x; float* y; const float* norm; const float* router; const float* router_bias;
  const int8_t* xq_in;  // null, or x already quantized by the attention: xq [n] | xd [n / 32] (Q8_0 wo)
  float* logits; float* xn; int32_t* ids; float* weights;
  float eps;
  int n_expert, k;
};

int wo_blocks(int64_t n_embd) { return static_cast<int>((n_embd + kWarps - 1) / kWarps); }
// xq [n] | xd [n / 32]
__host__ __device__ __forceinline__ size_t wo_xq_smem(int64_t n) { return static_cast<size_t>(n + n / 8); }

// acc: kAccGroups x kCols zeroed 64-bit accumulators, ticket: a zeroed counter (both left zeroed).
template <int TYPE, int C, bool MXO>
__global__ void __launch_bounds__(kThreads, 3) wo_router_kernel(WoRouterK p, int8_t* xq, float* xd,
                                                                unsigned long long* acc, unsigned* ticket) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ __align__(16) float rsl[kWarp][kWarps];  // router[e][8 b + w]: the block's slice
  __shared__ float red[kWarps][kCols];
  __shared__ float lg[kCols];
  __shared__ bool last;
  const int n = static_cast<int>(p.wo.n_in), n_embd = static_cast<int>(p.wo.rows);
  const int ne = static_cast<int>(p.n_expert);
  int8_t* sxq = reinterpret_cast<int8_t*>(smem);
  float* sxd = reinterpret_cast<float*>(smem + n);
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp;
  const int r = static_cast<int>(blockIdx.x) * kWarps + warp;
  const bool live = r < n_embd;
  RowFrag<C> f;
  BRASS_PROBE_ENTRY(0);
  float yr = 0.f, nr = 0.f, br = 0.f;
  // the router bias for the last block's warp 0, loaded here rather than after its barrier
  // (one L2 round trip fewer on the layer's chain: +0.2% tg128, session 50)
  const float rb = tid < ne && p.router_bias ? __ldg(p.router_bias + tid) : 0.f;
  // static (y: written three kernels back, complete before this one launched); the
  // router's slice as 32-byte runs (one a thread pair), not a column a warp
  if (tid < 2 * ne)
    cp_async16(&rsl[tid / 2][4 * (tid % 2)],
               p.router + int64_t(tid / 2) * n_embd + blockIdx.x * kWarps + 4 * (tid % 2));
  if (live) {
    frag_load<TYPE, C>(f, p.wo, r, lane);
    yr = __ldcg(p.y + r);
    nr = __ldg(p.norm + r);
    br = p.wo_bias ? __ldg(p.wo_bias + r) : 0.f;
  }
  BRASS_PROBE_MARK(0, 0);
  pdl_wait_fenced();
  pdl_trigger();
  BRASS_PROBE_MARK(0, 1);
  if (TYPE == kQ8 && p.xq_in) {  // the attention's int8 copy: its bytes are smem's layout
    copy_to_smem<2, int4, true>(reinterpret_cast<int4*>(smem), reinterpret_cast<const int4*>(p.xq_in),
                                static_cast<int>(wo_xq_smem(n) / 16));
  } else {
    quantize_x_smem<TYPE == kMX>(p.x, n, sxq, sxd);
  }
  __syncthreads();
  float s = 0.f;
  if (live) {
    s = yr + (warp_sum(frag_dot<TYPE, C>(f, sxq, sxd, frag_chunks<TYPE>(n), lane)) + br);
    if (lane == 0) p.y[r] = s;
  }
  cp_async_wait_all();  // the router's slice (a barrier before it is read)
  if (lane == 0) red[warp][kWarp] = s * s;
  __syncthreads();
  red[warp][lane] = live && lane < ne ? s * nr * rsl[lane][warp] : 0.f;
  __syncthreads();
  if (tid < kCols && (tid < ne || tid == kWarp)) {
    float t = 0.f;
    for (int w = 0; w < kWarps; ++w) t += red[w][tid];
    const long long v = __float2ll_rn(t * (tid == kWarp ? kSquareFix : kLogitFix));
    atomicAdd(acc + (blockIdx.x % kAccGroups) * kCols + tid, static_cast<unsigned long long>(v));  // signed sums
  }
  BRASS_PROBE_MARK(0, 2);
  // One ticket per block (the release is cumulative over the barrier: the sums and y).
  __syncthreads();
  if (tid == 0) last = ticket_acq_rel(ticket) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  BRASS_PROBE_MARK(0, 3);
  // Warp 0 (and thread 32: the sum of squares) reads the sums, then picks; warps 1..7
  // meanwhile norm and quantize the residual rows (kXnVec float4s a thread). All the loads
  // in flight at once (L2: other blocks wrote them, so no L1).
  const int n4 = n_embd / 4;
  float4 v[kXnVec], nw[kXnVec];
  if (warp > 0) {
#pragma unroll
    for (int i = 0; i < kXnVec; ++i) {
      const int j = min(tid - kWarp + i * kXnThreads, n4 - 1);
      v[i] = __ldcg(reinterpret_cast<const float4*>(p.y) + j);
      nw[i] = __ldg(reinterpret_cast<const float4*>(p.norm) + j);
    }
  }
  if (tid < kCols) {
    unsigned long long a[kAccGroups], t = 0;
#pragma unroll
    for (int g = 0; g < kAccGroups; ++g) a[g] = __ldcg(acc + g * kCols + tid);
#pragma unroll
    for (int g = 0; g < kAccGroups; ++g) {
      t += a[g];
      acc[g * kCols + tid] = 0ull;
    }
    lg[tid] = static_cast<float>(static_cast<double>(static_cast<long long>(t)) / (tid == kWarp ? kSquareFix : kLogitFix));
  }
  __syncthreads();
  const float inv = 1.0f / sqrtf(lg[kWarp] / static_cast<float>(n_embd) + p.eps);
  if (warp == 0) {  // the logits are lanes < ne of warp 0 (lg[kWarp] stays)
    if (lane < ne) {
      const float l = __fadd_rn(__fmul_rn(lg[lane], inv), rb);  // unfused, as before (the same bits)
      lg[lane] = l;
      if (p.logits) p.logits[lane] = l;
    }
    __syncwarp();
    pick_experts(lg, ne, p.k, p.ids, p.weights, lane);
  } else {
#pragma unroll
    for (int i = 0; i < kXnVec; ++i) {
      const int j = tid - kWarp + i * kXnThreads;
      store_xn_q8<MXO>(f4_scale(v[i], inv, nw[i]), j, j < n4, p.xn, xq, xd);
    }
  }
  if (tid == 0) *ticket = 0u;
  BRASS_PROBE_MARK(0, 4);
}

template <int TYPE, int C>
void wo_router_c(const WoRouterK& p, int8_t* xq, float* xd, unsigned long long* acc, unsigned* ticket, bool mxo,
                 cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>(wo_blocks(p.wo.rows)));
  const size_t sm = wo_xq_smem(p.wo.n_in);
  if (mxo) launch_pdl(wo_router_kernel<TYPE, C, true>, grid, dim3(kThreads), sm, st, p, xq, xd, acc, ticket);
  else launch_pdl(wo_router_kernel<TYPE, C, false>, grid, dim3(kThreads), sm, st, p, xq, xd, acc, ticket);
}
template <int TYPE>  // (wo_router_fits: the fragment size is one of these)
void wo_router_t(const WoRouterK& p, int8_t* xq, float* xd, unsigned long long* acc, unsigned* ticket, bool mxo,
                 cudaStream_t st) {
  switch (frag_size(frag_chunks<TYPE>(p.wo.n_in))) {
    case 1: wo_router_c<TYPE, 1>(p, xq, xd, acc, ticket, mxo, st); break;
    case 3: wo_router_c<TYPE, 3>(p, xq, xd, acc, ticket, mxo, st); break;
    case 6: wo_router_c<TYPE, 6>(p, xq, xd, acc, ticket, mxo, st); break;
    default: wo_router_c<TYPE, 8>(p, xq, xd, acc, ticket, mxo, st); break;
  }
}

}  // namespace

bool wo_router_fits(const MoeBlockP& p) {  // beyond launch_moe_block's checks (router F32, n_embd % 32, ...)
  static const bool on = knob_on("BRASS_CUDA_WO_ROUTER");
  const DevW& w = p.wo;
  return on && p.wo_x && (w.type == kQ8 || w.type == kMX) && w.n_in % 32 == 0 && w.rows == p.router.n_in &&
         w.rows <= 4 * kXnVec * kXnThreads && p.n_expert <= kWarp &&
         reinterpret_cast<uintptr_t>(p.router.q) % 16 == 0 &&
         frag_size(w.type == kQ8 ? frag_chunks<kQ8>(w.n_in) : frag_chunks<kMX>(w.n_in)) != 0 &&
         wo_xq_smem(w.n_in) <= 40 * 1024;
}
int wo_router_accs() { return kAccGroups * kCols; }
// A Q8_0 wo (its x in natural order) whose int8 x copies as whole int4s.
bool wo_router_takes_xq(const MoeBlockP& p) { return p.wo.type == kQ8 && wo_xq_smem(p.wo.n_in) % 16 == 0; }

void launch_wo_router(const MoeBlockP& p, int8_t* xq, float* xd, unsigned long long* acc, unsigned* ticket, bool mxo,
                      cudaStream_t st) {
  const WoRouterK k{p.wo,
                    p.wo_bias,
                    p.wo_x,
                    p.y,
                    p.norm,
                    reinterpret_cast<const float*>(p.router.q),
                    p.router_bias,
                    wo_router_takes_xq(p) ? p.wo_xq : nullptr,
                    p.logits,
                    p.xn,
                    const_cast<int32_t*>(p.moe.ids),
                    const_cast<float*>(p.moe.weights),
                    p.eps,
                    static_cast<int>(p.n_expert),
                    static_cast<int>(p.moe.k)};
  if (p.wo.type == kQ8) wo_router_t<kQ8>(k, xq, xd, acc, ticket, mxo, st);
  else wo_router_t<kMX>(k, xq, xd, acc, ticket, mxo, st);
  BRASS_CUDA_LAUNCHED();
}

#ifdef BRASS_PROBE
// wo_router's marks (kernel 0, norm_router's: the two never run in one process of the
// probe stage), appended to the CSV of probe_dump.
void probe_dump_wo(const char* path) { probe_write(path, false); }
#endif

}  // namespace brass::backend::cuda
