// The output head of one decode token: y = x W^T (+ bias) for a big Q8_0 matrix (gpt-oss:
// 201,088 x 2,880, 615 MB), optionally with the greedy pick (argmax, cuda_common.cuh's
// order) fused into the same launch.
//
// Why a kernel of its own: the streaming q8x kernel (cuda_q8.cu) gives each warp one row
// pair at a time, a lane every 32nd 16-byte chunk: 180 chunks a row are 5.6 a lane, so a
// row pair costs two dependent rounds of loads (4 unrolled steps, then the ragged rest),
// and the argmax after it re-reads the 804 KB of logits in a launch of its own (H200,
// CUPTI trace: head 164 us, 3.75 TB/s, + argmax 8.2 us). Here the grid is persistent
// (blocks to fill the SMs once, warps walking groups of 8 consecutive rows with the
// grid's stride, so the whole GPU sweeps the matrix front to back), each warp's first
// loads go out before the PDL wait (the weights are static), and a lane issues a batch of
// chunks' loads (with their scales) before it computes on any of them, two batches in
// turn: the next one's loads go out before this one's dot products. Two walks of a group:
// - flat (head_flat_kernel, rows of at least 512 columns; the default): each load of the
//   warp reads 512 contiguous bytes of the group's rows, as a plain copy reads;
// - 4 lanes a row (head_q8_kernel; shorter rows, or BRASS_CUDA_HEAD_FLAT=0): each load
//   reads 64 contiguous bytes of each of the 8 rows. On an H100 it streamed slower than
//   the old kernel (227 against 223 us; the flat walk 215: BENCHMARKS.md, session 19).
// With the pick, a row's finishing lane keeps the best (value, row) it wrote; the block's
// best goes to a partial and the last block to finish picks (argmax_finish): no second
// launch.
//
// Numerics: the q8x twin (the reference matmul on the Q8_0 round trip of x, as
// quantize_x_smem does it); per row the chunks are summed in another order than
// matmul_q8x_kernel's, so the two differ by float rounding. The model sends every output
// head through Backend::output_head, which takes this kernel for one row with or without
// the pick, so a greedy decode step and a forward() of the same token give the same
// logits bit for bit.
#include "backend/cuda/cuda_common.cuh"

namespace brass::backend::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kGroup = 8;      // rows a warp takes at once (4 lanes a row)
constexpr int kMinBlocks = 3;  // blocks an SM (register cap 85): head_q8_kernel
// The flat walk's batch and blocks an SM: batches of 3 chunks a lane in 4 blocks an SM
// (62 registers) instead of 5 in 3 (80 registers, 4 bytes spilled). H200, session 36:
// tg128 858-860 -> 860-862 (one call, two rounds), against the tree before it 859-864 ->
// 861-862 (three rounds): within noise, not worse, no spill. Larger batches in fewer
// warps lost (8 x 2, 6 x 2, 10 x 2: the head 155 -> 164-172 us a token; 4 x 4 spills).
constexpr int kFlatBatch = 3, kFlatBlocks = 4;

template <int B>
struct Batch {
  int4 q[B];
  unsigned short s[B];  // the chunk's block scale (f16 bits)
};

// The integer dot of one 16-byte chunk of quants with its 16 activations, scaled by the
// chunk's weight block scale (f16 bits) and activation block scale.
__device__ __forceinline__ float chunk_dot(int4 q, int4 a, unsigned short ws, float xs) {
  int d = __dp4a(q.x, a.x, 0);
  d = __dp4a(q.y, a.y, d);
  d = __dp4a(q.z, a.z, d);
  d = __dp4a(q.w, a.w, d);
  return static_cast<float>(d) * (f16_bits_to_f32(ws) * xs);
}

// Row `row`'s finished sum: y (with its bias) stored, and with PICK a candidate of best.
template <bool PICK>
__device__ __forceinline__ void put_row(const HeadP& p, int64_t row, float sum, ArgBest& best) {
  if (row >= p.w.rows) return;
  const float v = sum + (p.bias ? p.bias[row] : 0.f);
  p.y[row] = v;
  if constexpr (PICK) best = arg_better(best, ArgBest{v, static_cast<int>(row)});
}

// Batch b of a lane's chunks of row r (cr chunks of 16 quants): chunks j + 4 (B b + u).
template <int B>
__device__ __forceinline__ void load_batch(Batch<B>& bt, const DevW& w, int64_t r, bool live, int j, int b, int cr) {
  const int8_t* q = reinterpret_cast<const int8_t*>(w.q) + r * w.n_in;
  const unsigned short* s = reinterpret_cast<const unsigned short*>(w.s) + r * (w.n_in / 32);
#pragma unroll
  for (int u = 0; u < B; ++u) {
    const int c = j + 4 * (B * b + u);
    const bool ok = live && c < cr;
    bt.q[u] = ok ? __ldg(reinterpret_cast<const int4*>(q + 16 * c)) : make_int4(0, 0, 0, 0);
    bt.s[u] = ok ? __ldg(s + (c >> 1)) : static_cast<unsigned short>(0);
  }
}

template <int B>
__device__ __forceinline__ float dot_batch(const Batch<B>& bt, const int8_t* xq, const float* xd, int j, int b,
                                           int cr) {
  float acc = 0.f;
#pragma unroll
  for (int u = 0; u < B; ++u) {
    const int c = j + 4 * (B * b + u);
    const int cc = c < cr ? c : 0;  // past the row's end q and s are 0: any x in bounds
    acc += chunk_dot(bt.q[u], *reinterpret_cast<const int4*>(xq + 16 * cc), bt.s[u], xd[cc >> 1]);
  }
  return acc;
}

// A warp's walk of steps (group g, batch b of a group's nb): groups g, g + stride, ... below
// groups, two batches in turn, each step's loads issued before the previous step's work
// (a warp always has loads in flight). buf[0] holds step (g, 0) on entry; load(bt, g, b)
// fills a buffer, work(bt, g, b) consumes it (warp-uniform calls).
template <int B, class Load, class Work>
__device__ __forceinline__ void walk_steps(Batch<B> (&buf)[2], int64_t g, int64_t groups, int64_t stride, int nb,
                                           Load load, Work work) {
  int b = 0, bn = 0;
  int64_t gn = g;
  auto advance = [&](int64_t& gg, int& bb) {
    if (++bb == nb) { bb = 0; gg += stride; }
  };
  advance(gn, bn);
  while (g < groups) {  // unrolled by two: the buffers alternate without register moves
    if (gn < groups) load(buf[1], gn, bn);
    work(buf[0], g, b);
    g = gn; b = bn;
    advance(gn, bn);
    if (g >= groups) break;
    if (gn < groups) load(buf[0], gn, bn);
    work(buf[1], g, b);
    g = gn; b = bn;
    advance(gn, bn);
  }
}

// The final RMSNorm folded in (p.norm; head_norm_supported): float4s a thread of the row.
constexpr int kNormVec = 3;

// The start both walks share: the warp's first batch (static weights) is written before
// the PDL wait (ptxas issues its loads after the wait all the same: cuda_common.cuh); after
// it the block quantizes x into shared memory (xq, xd). With p.norm, x is the residual:
// every block norms it (residual_inv_rms, f4_scale: the router's and q/k/v's arithmetic)
// and quantizes the normed row from its registers (store_xn_q8, quantize_x_smem's bits);
// block 0 writes it to p.xn. That replaces the model's rms_norm launch before the head.
template <class FirstLoad>
__device__ __forceinline__ void head_begin(const HeadP& p, int n, int8_t* xq, float* xd, FirstLoad&& first_load) {
  __shared__ float red[kWarps];
  first_load();
  if (!p.norm) {
    pdl_wait();
    pdl_trigger();
    quantize_x_smem(p.x, n, xq, xd);
    __syncthreads();
    return;
  }
  const int n4 = n / 4;
  float4 nw[kNormVec];
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {  // static: before the wait
    const int j = static_cast<int>(threadIdx.x) + i * kThreads;
    nw[i] = j < n4 ? __ldg(reinterpret_cast<const float4*>(p.norm) + j) : make_float4(0, 0, 0, 0);
  }
  pdl_wait();
  pdl_trigger();
  float4 v[kNormVec];
  const float inv = residual_inv_rms<kNormVec, kThreads>(reinterpret_cast<const float4*>(p.x), nullptr, n4, p.eps, v, red);
#pragma unroll
  for (int i = 0; i < kNormVec; ++i) {  // n % 32 == 0: a 32-group's 8 threads are all live or none
    const int j = static_cast<int>(threadIdx.x) + i * kThreads;
    store_xn_q8<false>(f4_scale(v[i], inv, nw[i]), j, j < n4, blockIdx.x == 0 ? p.xn : nullptr, xq, xd);
  }
  __syncthreads();
}

// grid: persistent (<= groups); warp w of block b takes groups b * kWarps + w + k * stride.
// Batches of B chunks a lane (walk_steps).
template <bool PICK, int B>
__global__ void __launch_bounds__(kThreads, kMinBlocks) head_q8_kernel(HeadP p, ArgBest* parts, unsigned* ticket) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ ArgBest sh[kWarp];
  const DevW& w = p.w;
  const int n = static_cast<int>(w.n_in), cr = n / 16;
  const int nb = (cr / 4 + B - 1) / B;  // batches a lane (cr % 4 == 0: n % 64 == 0)
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + n);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, j = lane & 3;
  const int64_t groups = (w.rows + kGroup - 1) / kGroup, stride = static_cast<int64_t>(gridDim.x) * kWarps;
  auto row_of = [&](int64_t g) { return g * kGroup + (lane >> 2); };
  auto load = [&](Batch<B>& bt, int64_t g, int b) {
    const int64_t r = row_of(g);
    load_batch<B>(bt, w, r, g < groups && r < w.rows, j, b, cr);
  };
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  Batch<B> buf[2];
  head_begin(p, n, xq, xd, [&] { load(buf[0], g, 0); });
  ArgBest best{-INFINITY, -1};
  float acc = 0.f;
  // The end of group g (warp-uniform): the row's 4 lanes summed, stored, and picked from.
  auto finish = [&](int64_t gg) {
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    if (j == 0) put_row<PICK>(p, row_of(gg), acc, best);
    acc = 0.f;
  };
  walk_steps<B>(buf, g, groups, stride, nb, load, [&](const Batch<B>& bt, int64_t gg, int bb) {
    acc += dot_batch<B>(bt, xq, xd, j, bb, cr);
    if (bb == nb - 1) finish(gg);
  });
  if constexpr (PICK) argmax_finish(best, parts, gridDim.x, blockIdx.x, ticket, p.out, p.pos, p.history, sh);
}

// The flat walk (rows of at least 32 chunks, n >= 512): a group's 8 rows are one run of
// 8 cr contiguous chunks (the split layout keeps a matrix's rows back to back, quants and
// scales alike), and instruction i of the warp reads chunks 32 i .. 32 i + 31 of it: 512
// contiguous bytes a load, as a plain copy reads. A 32-chunk step holds the end of at
// most one row (cr >= 32): lanes past it add into the next row's sum, and after the step
// the warp sums the finished row (warp_sum) and lane 0 stores it. Batches of B steps, two
// in turn as in head_q8_kernel.
template <int B>
__device__ __forceinline__ void load_flat(Batch<B>& bt, const DevW& w, int64_t g, int b, int64_t total, int lane) {
  const int8_t* q = reinterpret_cast<const int8_t*>(w.q);
  const unsigned short* s = reinterpret_cast<const unsigned short*>(w.s);
#pragma unroll
  for (int u = 0; u < B; ++u) {
    const int64_t f = g * (kGroup * (w.n_in / 16)) + 32 * (B * b + u) + lane;  // matrix chunk
    const bool ok = f < total && 32 * (B * b + u) < kGroup * (w.n_in / 16);
    bt.q[u] = ok ? __ldg(reinterpret_cast<const int4*>(q + 16 * f)) : make_int4(0, 0, 0, 0);
    bt.s[u] = ok ? __ldg(s + (f >> 1)) : static_cast<unsigned short>(0);
  }
}

template <bool PICK, int B>
__global__ void __launch_bounds__(kThreads, kFlatBlocks) head_flat_kernel(HeadP p, ArgBest* parts, unsigned* ticket) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ ArgBest sh[kWarp];
  const DevW& w = p.w;
  const int n = static_cast<int>(w.n_in), cr = n / 16, gc = kGroup * cr;  // chunks a row / a group
  const int nb = (gc / 32 + B - 1) / B;  // batches a group (gc % 32 == 0: cr % 4 == 0)
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* xd = reinterpret_cast<float*>(smem + n);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t groups = (w.rows + kGroup - 1) / kGroup, stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t total = w.rows * cr;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  auto load = [&](Batch<B>& bt, int64_t gg, int bb) { load_flat<B>(bt, w, gg, bb, total, lane); };
  Batch<B> buf[2];
  head_begin(p, n, xq, xd, [&] { load(buf[0], g, 0); });
  ArgBest best{-INFINITY, -1};
  float cur = 0.f, next = 0.f;  // the sums of the group's unfinished row r and of r + 1
  int r = 0;                     // (warp-uniform)
  auto dot = [&](const Batch<B>& bt, int64_t gg, int bb) {
#pragma unroll
    for (int u = 0; u < B; ++u) {
      const int i = B * bb + u;  // the step: chunks 32 i .. of the group
      if (32 * i >= gc) break;
      const int end = (r + 1) * cr;  // row r's chunks end here
      const bool nx = 32 * i + lane >= end;
      const int cc = 32 * i + lane - r * cr - (nx ? cr : 0);
      const float v = chunk_dot(bt.q[u], *reinterpret_cast<const int4*>(xq + 16 * cc), bt.s[u], xd[cc >> 1]);
      if (nx) next += v; else cur += v;
      if (32 * (i + 1) >= end) {  // row r is complete
        const float sum = warp_sum(cur);
        if (lane == 0) put_row<PICK>(p, gg * kGroup + r, sum, best);
        cur = next;
        next = 0.f;
        r = r + 1 == kGroup ? 0 : r + 1;
      }
    }
  };
  walk_steps<B>(buf, g, groups, stride, nb, load, dot);
  if constexpr (PICK) argmax_finish(best, parts, gridDim.x, blockIdx.x, ticket, p.out, p.pos, p.history, sh);
}

size_t head_smem(int64_t n) { return static_cast<size_t>(n + n / 32 * 4); }

template <bool PICK>
using HeadKernel = void (*)(HeadP, ArgBest*, unsigned*);
// BRASS_CUDA_HEAD_FLAT=0: 4 lanes a row (head_q8_kernel) also where the flat walk applies.
bool head_flat_on() {
  static const bool on = knob_on("BRASS_CUDA_HEAD_FLAT");
  return on;
}
template <bool PICK>
HeadKernel<PICK> head_kernel(int64_t n) {
  if (n >= 512 && head_flat_on()) return head_flat_kernel<PICK, kFlatBatch>;
  return head_q8_kernel<PICK, 5>;
}

// Blocks a launch: as many as fit the SMs at once (the walk is persistent), at most one
// a group of warps. The occupancy of each walk once (n: a representative row length).
template <bool PICK>
int head_blocks(int64_t groups, int64_t n_in) {
  auto fit = [](int64_t n) {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, head_kernel<PICK>(n), kThreads, head_smem(n)) != cudaSuccess)
      b = 1;
    return b < 1 ? 1 : b;
  };
  static const int flat = fit(4096), rows4 = fit(256);
  const int64_t want = static_cast<int64_t>(head_kernel<PICK>(n_in) == head_kernel<PICK>(4096) ? flat : rows4) *
                       sm_count();
  const int64_t need = (groups + kWarps - 1) / kWarps;
  return static_cast<int>(want < need ? want : need);
}

}  // namespace

// BRASS_CUDA_HEAD=0: one-token matmuls of big matrices on the streaming q8x kernel and the
// greedy pick as its own argmax launch (measurement knob).
bool head_on() {
  static const bool on = knob_on("BRASS_CUDA_HEAD");
  return on;
}

bool head_supported(const DevW& w, int64_t n_tok) {
  return head_on() && n_tok == 1 && w.type == kQ8 && w.n_in % 64 == 0 && head_smem(w.n_in) <= 40 * 1024 &&
         w.rows < (int64_t(1) << 31);
}

// BRASS_CUDA_HEAD_NORM=0: the model's final norm as its own launch before the head. H200,
// session 46 (one build, three rounds, knob off -> on): tg128 914.3-917.9 -> 915.9-919.8,
// @ d4096 851.7-852.5 -> 853.6-854.1, ahead in every round; trace: head + rms_norm 152.3 ->
// head 150.9 us a token. (Both of a warp's first batches before the wait as well: 64
// registers with a 40-byte spill, tg128 -0.3%; dropped.)
bool head_norm_supported(const DevW& w) {
  static const bool on = knob_on("BRASS_CUDA_HEAD_NORM");
  return on && w.n_in <= 4 * kNormVec * kThreads;  // n_in % 64 == 0 (head_supported)
}

int head_parts(const DevW& w) { return head_blocks<true>((w.rows + kGroup - 1) / kGroup, w.n_in); }

void launch_head(const HeadP& p, void* parts, unsigned* ticket, cudaStream_t st) {
  const int64_t groups = (p.w.rows + kGroup - 1) / kGroup;
  const size_t sm = head_smem(p.w.n_in);
  if (p.out) {
    const dim3 grid(static_cast<unsigned>(head_blocks<true>(groups, p.w.n_in)));
    launch_pdl(head_kernel<true>(p.w.n_in), grid, dim3(kThreads), sm, st, p, static_cast<ArgBest*>(parts), ticket);
  } else {
    const dim3 grid(static_cast<unsigned>(head_blocks<false>(groups, p.w.n_in)));
    launch_pdl(head_kernel<false>(p.w.n_in), grid, dim3(kThreads), sm, st, p, static_cast<ArgBest*>(nullptr),
               static_cast<unsigned*>(nullptr));
  }
  BRASS_CUDA_LAUNCHED();
}

}  // namespace brass::backend::cuda
