// The output head of one decode token: y = x W^T (+ bias) for a big Q8_0 matrix (gpt-oss:
// 201,088 x 2,880, 615 MB), optionally with the greedy pick (argmax, cuda_common.cuh's
// order) fused into the same launch.
//
// Why a kernel of its own: the streaming q8x kernel (cuda_q8.cu) gives each warp one row
// pair at a time, a lane every 32nd 16-byte chunk: 180 chunks a row are 5.6 a lane, so a
// row pair costs two dependent rounds of loads (4 unrolled steps, then the ragged rest),
// and the argmax after it re-reads the 804 KB of logits in a launch of its own (H200,
// CUPTI trace: head 164 us, 3.75 TB/s, + argmax 8.2 us). Here a warp takes 8 consecutive
// rows (a group), 4 lanes a row: lane j of a row reads its chunks j, j + 4, ..., so every
// load instruction of the warp reads 8 rows x 64 contiguous bytes (whole sectors) and a
// row's sum needs two shuffles. A lane issues a batch of chunks' loads (with their
// scales) before it computes on any of them (by default two batches of 5 in turn: the
// next one's loads go out before this one's dot products). The grid is persistent
// (blocks to fill the SMs once, warps walking groups with the grid's stride, so the
// whole GPU sweeps the matrix front to back), and each warp's first batch loads before
// the PDL wait (the weights are static).
// With the pick, a row's lane 0 keeps the best (value, row) it wrote; the block's best goes
// to a partial and the last block to finish picks (argmax_finish): no second launch.
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
constexpr int kMinBlocks = 3;  // blocks an SM (register cap 85)

template <int B>
struct Batch {
  int4 q[B];
  unsigned short s[B];  // the chunk's block scale (f16 bits)
};

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
    const int4 a = *reinterpret_cast<const int4*>(xq + 16 * cc);
    int d = __dp4a(bt.q[u].x, a.x, 0);
    d = __dp4a(bt.q[u].y, a.y, d);
    d = __dp4a(bt.q[u].z, a.z, d);
    d = __dp4a(bt.q[u].w, a.w, d);
    acc += static_cast<float>(d) * (f16_bits_to_f32(bt.s[u]) * xd[cc >> 1]);
  }
  return acc;
}

// grid: persistent (<= groups); warp w of block b takes groups b * kWarps + w + k * stride.
// A warp's work is a walk of steps (group, batch of B chunks a lane). DB: two batches in
// turn, the next step's loads issued before this step's dot products (a warp always has
// loads in flight); else one batch, loaded and then used. Per row the same sum either way.
template <bool PICK, int B, bool DB>
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
  int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  int b = 0;
  Batch<B> buf[DB ? 2 : 1];
  load(buf[0], g, 0);  // before the wait: the weights are static
  pdl_wait();
  pdl_trigger();
  quantize_x_smem(p.x, n, xq, xd);
  __syncthreads();
  ArgBest best{-INFINITY, -1};
  float acc = 0.f;
  // The end of group g (warp-uniform): the row's 4 lanes summed, stored, and picked from.
  auto finish = [&](int64_t gg) {
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    const int64_t r = row_of(gg);
    if (j == 0 && r < w.rows) {
      const float v = acc + (p.bias ? p.bias[r] : 0.f);
      p.y[r] = v;
      if constexpr (PICK) best = arg_better(best, ArgBest{v, static_cast<int>(r)});
    }
    acc = 0.f;
  };
  auto advance = [&](int64_t& gg, int& bb) {
    if (++bb == nb) { bb = 0; gg += stride; }
  };
  if constexpr (DB) {
    int64_t gn = g;
    int bn = b;
    advance(gn, bn);
    // Unrolled by two so the buffers alternate without register moves.
    while (g < groups) {
      if (gn < groups) load(buf[1], gn, bn);
      acc += dot_batch<B>(buf[0], xq, xd, j, b, cr);
      if (b == nb - 1) finish(g);
      g = gn; b = bn;
      advance(gn, bn);
      if (g >= groups) break;
      if (gn < groups) load(buf[0], gn, bn);
      acc += dot_batch<B>(buf[DB ? 1 : 0], xq, xd, j, b, cr);
      if (b == nb - 1) finish(g);
      g = gn; b = bn;
      advance(gn, bn);
    }
  } else {
    for (; g < groups; g += stride) {
      for (b = 0; b < nb; ++b) {
        if (b > 0) load(buf[0], g, b);
        acc += dot_batch<B>(buf[0], xq, xd, j, b, cr);
      }
      const int64_t gn = g + stride;
      if (gn < groups) load(buf[0], gn, 0);  // the next group's first batch before this one's store
      finish(g);
    }
  }
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
__global__ void __launch_bounds__(kThreads, kMinBlocks) head_flat_kernel(HeadP p, ArgBest* parts, unsigned* ticket) {
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
  int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  int b = 0;
  Batch<B> buf[2];
  load_flat<B>(buf[0], w, g, 0, total, lane);  // before the wait: the weights are static
  pdl_wait();
  pdl_trigger();
  quantize_x_smem(p.x, n, xq, xd);
  __syncthreads();
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
      const int4 a = *reinterpret_cast<const int4*>(xq + 16 * cc);
      int d = __dp4a(bt.q[u].x, a.x, 0);
      d = __dp4a(bt.q[u].y, a.y, d);
      d = __dp4a(bt.q[u].z, a.z, d);
      d = __dp4a(bt.q[u].w, a.w, d);
      const float v = static_cast<float>(d) * (f16_bits_to_f32(bt.s[u]) * xd[cc >> 1]);
      if (nx) next += v; else cur += v;
      if (32 * (i + 1) >= end) {  // row r is complete
        const float sum = warp_sum(cur);
        const int64_t row = gg * kGroup + r;
        if (lane == 0 && row < w.rows) {
          const float y = sum + (p.bias ? p.bias[row] : 0.f);
          p.y[row] = y;
          if constexpr (PICK) best = arg_better(best, ArgBest{y, static_cast<int>(row)});
        }
        cur = next;
        next = 0.f;
        r = r + 1 == kGroup ? 0 : r + 1;
      }
    }
  };
  auto advance = [&](int64_t& gg, int& bb) {
    if (++bb == nb) { bb = 0; gg += stride; }
  };
  int64_t gn = g;
  int bn = b;
  advance(gn, bn);
  while (g < groups) {  // unrolled by two: the buffers alternate without register moves
    if (gn < groups) load_flat<B>(buf[1], w, gn, bn, total, lane);
    dot(buf[0], g, b);
    g = gn; b = bn;
    advance(gn, bn);
    if (g >= groups) break;
    if (gn < groups) load_flat<B>(buf[0], w, gn, bn, total, lane);
    dot(buf[1], g, b);
    g = gn; b = bn;
    advance(gn, bn);
  }
  if constexpr (PICK) argmax_finish(best, parts, gridDim.x, blockIdx.x, ticket, p.out, p.pos, p.history, sh);
}

size_t head_smem(int64_t n) { return static_cast<size_t>(n + n / 32 * 4); }

// BRASS_CUDA_HEAD_DB=0: one batch of 9 chunks a lane at a time instead of two of 5 in turn.
bool head_db_on() {
  static const bool on = knob_on("BRASS_CUDA_HEAD_DB");
  return on;
}

template <bool PICK>
using HeadKernel = void (*)(HeadP, ArgBest*, unsigned*);
// BRASS_CUDA_HEAD_FLAT=0: 4 lanes a row (head_q8_kernel) also where the flat walk applies.
bool head_flat_on() {
  static const bool on = knob_on("BRASS_CUDA_HEAD_FLAT");
  return on;
}
template <bool PICK>
HeadKernel<PICK> head_kernel(int64_t n) {
  if (n >= 512 && head_flat_on()) return head_flat_kernel<PICK, 5>;
  return head_db_on() ? head_q8_kernel<PICK, 5, true> : head_q8_kernel<PICK, 9, false>;
}

template <bool PICK>
int head_blocks(int64_t groups) {
  static const int per_sm = [] {  // (every variant is built for kMinBlocks)
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, head_kernel<PICK>(4096), kThreads, head_smem(4096)) !=
        cudaSuccess)
      b = 1;
    return b < 1 ? 1 : b;
  }();
  const int64_t want = static_cast<int64_t>(per_sm) * sm_count();
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

int head_parts(const DevW& w) { return head_blocks<true>((w.rows + kGroup - 1) / kGroup); }

void launch_head(const HeadP& p, void* parts, unsigned* ticket, cudaStream_t st) {
  const int64_t groups = (p.w.rows + kGroup - 1) / kGroup;
  const size_t sm = head_smem(p.w.n_in);
  if (p.out) {
    const dim3 grid(static_cast<unsigned>(head_blocks<true>(groups)));
    launch_pdl(head_kernel<true>(p.w.n_in), grid, dim3(kThreads), sm, st, p, static_cast<ArgBest*>(parts), ticket);
  } else {
    const dim3 grid(static_cast<unsigned>(head_blocks<false>(groups)));
    launch_pdl(head_kernel<false>(p.w.n_in), grid, dim3(kThreads), sm, st, p, static_cast<ArgBest*>(nullptr),
               static_cast<unsigned*>(nullptr));
  }
  BRASS_CUDA_LAUNCHED();
}

}  // namespace brass::backend::cuda
