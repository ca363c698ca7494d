// The output head's calls of 33..64 tokens (batched decode at 48..64 streams) with Hopper's
// warpgroup MMA (wgmma, sm_90a), reading the head's tile copy (kQ8TileBytes): all 64 token
// columns in one pass, so each Q8_0 weight fragment is loaded and dequantized once a call.
// The mma.sync wide kernel (cuda_matmul_mma.cu) takes 32 tokens a pass: at 64 tokens it
// runs two passes over the same rows (the second from L2), each decoding the fragments and
// issuing 8 MMAs a warp per 16 columns of K on activations each warp reads from shared
// memory. Here a warpgroup's MMA reads the activations from shared memory itself, and two
// wgmma (two 64-row halves of the warpgroup's 128 rows) replace 16 mma.sync. H200, same
// call: x48 / x64 7,119-7,129 / 8,743-8,749 -> 7,196-7,200 / 8,805-8,806 tok/s. On the
// split layout (rows, not tiles) it was no faster than the wide kernel, nor for q / k / v
// and wo, which stay there (BENCHMARKS.md, session 31).
// Numerics: the tensor-core path's (f16(q d) weights, f16 activations, f32 sums), as the
// wide kernel's; the test finds the same bits.
//
// Layout and mapping:
// - Block: 8 warps (two warpgroups) x 32 rows = 256 rows, the wide kernel's blocks and
//   grid (its K split in clusters too: wide_finish, unused by the head); a warp's rows are tile rows g + 8 i (i < 4), the
//   lane's weights of a 64-column chunk the 16 bytes 16 t .. 16 t + 15 of each (WideW).
//   wgmma m64n64k16 half mt of a warpgroup: warp w's A rows 16 w .. 16 w + 15 are its tile
//   rows 16 mt .. 16 mt + 15, so D is laid out as the mma.sync C fragments of 8 token tiles
//   (acc[mt][j][c]: rows c_row(g, mt, c), token 8 j + 2 t + (c & 1)).
// - K order: the A fragment's slots (row g: k 2t, 2t + 1 in register 0, 2t + 8, 2t + 9 in
//   register 2) of k16 step s (4 a chunk) take word s of the lane's 16 bytes (bytes 0, 1 ->
//   2t.., bytes 2, 3 -> 2t + 8..): natural column 16 t + 4 s + 2 p + e of the chunk is K
//   slot 8 p + 2 t + e of step s. The activations are written in that order by
//   to_half_wg_kernel, so a chunk's B of step s is 16 contiguous halves a token.
// - Shared memory, a stage (64 tokens x 64 columns, 8 KB): the K-major no-swizzle layout of
//   wgmma's B: "core matrices" of 8 tokens x 8 halves (16 bytes a token, 128 contiguous
//   bytes); piece p (8 halves, K slots 8 (p % 2) .. of step p / 2) of token n at byte
//   1024 p + 16 n: the 8-token groups 128 bytes apart (SBO), the two K halves of a step 1024
//   apart (LBO). A warp's 32 copies of one piece fill 512 contiguous bytes.
// - Three stages in a cp.async ring (one barrier a chunk), weights two chunks ahead in
//   registers: the wide kernel's pipeline. The copies are made visible to the tensor core's
//   reads (the async proxy) by fence.proxy.async before the barrier; each k16 step's two
//   wgmma are waited for before the lane's A registers are rewritten.
#include <algorithm>

#include "backend/cuda/cuda_wide.cuh"

namespace brass::backend::cuda {
namespace wide {
namespace {

constexpr int kWgTok = 64;                                 // token columns (wgmma N)
constexpr int kWgStage = kWgTok * kWideChunk * 2;          // bytes a stage (8 KB)
constexpr int kWgRed = kWideWarps * 2 * 8 * 4 * kWarp * 4;  // a K split's partials (64 KB, over the stages)
constexpr int kWgSmem = std::max(kWideStages * kWgStage, kWgRed) + kWideWarps * kWarp * 4;
constexpr uint32_t kWgLbo = 1024, kWgSbo = 128;  // a stage's descriptor offsets (K halves, 8-token groups)

// wgmma's shared-memory matrix descriptor, no swizzle: start, leading (K) and stride (M/N)
// byte offsets, each in 16-byte units.
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr >> 4) & 0x3FFFu) | static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16 |
         static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BRASS_WGMMA 1
#endif

__device__ __forceinline__ void wg_fence() {
#ifdef BRASS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#ifdef BRASS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits for every wgmma of the warpgroup; a holds the A registers the last ones read (kept
// live until here, so nothing reuses them while the MMA may still read them).
__device__ __forceinline__ void wg_wait_all(const uint32_t (&a)[2][4]) {
#ifdef BRASS_WGMMA
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
    asm volatile("" ::"r"(a[mt][0]), "r"(a[mt][1]), "r"(a[mt][2]), "r"(a[mt][3]) : "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// d (64 rows x 64 tokens, this thread's fragment) += A (registers) x B (descriptor).
__device__ __forceinline__ void wgmma_f16_m64n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc) {
#ifdef BRASS_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]),
        "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
        "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
#else
  __trap();  // the compute_90 (no "a") PTX pass: the host launches this only on sm_90
#endif
}

// Every accumulator register as an operand of an empty volatile asm: the compiler keeps
// their values where the wgmma left them across this point.
__device__ __forceinline__ void wg_fence_acc(float (&acc)[2][8][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(acc[mt][j][c])::"memory");
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int s) { return s == 0 ? v.x : s == 1 ? v.y : s == 2 ? v.z : v.w; }

// One chunk: the lane's weights b against the stage at shared address `stage`, a k16 step
// at a time: dequantized, issued (both 64-row halves) and waited for. (Two or four steps
// a wait hold 8 or 24 more registers of A fragments: at 128 registers they spilled and
// lost, x64 -1 / -11% on the H100; uncapped, one block an SM, no gain.)
__device__ __forceinline__ void wg_chunk(const WideW& b, uint32_t stage, float (&acc)[2][8][4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    uint32_t a[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const __half2 dl = __half2half2(b.d[2 * mt]), dh = __half2half2(b.d[2 * mt + 1]);
      q8_half2(word_of(b.q[2 * mt], s), dl, a[mt][0], a[mt][2]);
      q8_half2(word_of(b.q[2 * mt + 1], s), dh, a[mt][1], a[mt][3]);
    }
    wg_fence();
    wg_fence_acc(acc);
    const uint64_t desc = wg_desc(stage + 2048u * s, kWgLbo, kWgSbo);
    wgmma_f16_m64n64(acc[0], a[0], desc);
    wgmma_f16_m64n64(acc[1], a[1], desc);
    wg_commit();
    wg_wait_all(a);
    wg_fence_acc(acc);
  }
}

// The greedy picks' first step (no K split): per token, the block's best row of the values
// write_tile stored (acc + bias; arg_better's order: NaN never wins, ties to the lower row)
// into parts[token * gridDim.y + blockIdx.y]. A warp's best of its 32 rows of a token
// column sits in the 8 lanes of one t (rows g + 8 i); the 8 warps' meet in shared memory
// (over the stages, once every warp is past its last chunk).
__device__ __forceinline__ void wg_pick_parts(const float (&acc)[2][8][4], const Parts& ps, int tile, int n_tok,
                                              ArgBest* parts, uint8_t* smem) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  ArgBest* sh = reinterpret_cast<ArgBest*>(smem);  // [kWideWarps][kWgTok]
  const bool live = tile < ps.end[2];
  const Parts::One o = ps.at(live ? tile : 0);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      ArgBest b{-INFINITY, -1};
      if (live)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int c = 2 * h + p;
            const int64_t r = o.r0 + c_row(g, mt, c);
            b = arg_better(b, ArgBest{acc[mt][j][c] + (o.bias ? o.bias[r] : 0.f), static_cast<int>(r)});
          }
#pragma unroll
      for (int off = 4; off < kWarp; off <<= 1)
        b = arg_better(b, ArgBest{__shfl_xor_sync(0xffffffffu, b.v, off), __shfl_xor_sync(0xffffffffu, b.i, off)});
      if (g == 0) sh[warp * kWgTok + 8 * j + 2 * t + p] = b;
    }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < n_tok) {
    ArgBest b = sh[threadIdx.x];
    for (int w = 1; w < kWideWarps; ++w) b = arg_better(b, sh[w * kWgTok + threadIdx.x]);
    parts[threadIdx.x * gridDim.y + blockIdx.y] = b;
  }
}

// out[t] = the best of token t's n_parts block bests (0 where there is none: an all-NaN
// row, as argmax_row); a block per token.
__global__ void wg_pick_rows_kernel(const ArgBest* __restrict__ parts, int n_parts, int32_t* out) {
  pdl_wait();
  pdl_trigger();
  __shared__ ArgBest sh[kWideWarps];
  const int t = blockIdx.x, warp = threadIdx.x / kWarp;
  ArgBest b{-INFINITY, -1};
  for (int k = threadIdx.x; k < n_parts; k += blockDim.x) b = arg_better(b, parts[static_cast<int64_t>(t) * n_parts + k]);
  b = warp_best(b);
  if (threadIdx.x % kWarp == 0) sh[warp] = b;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kWideWarps; ++w) b = arg_better(b, sh[w]);
  out[t] = b.i < 0 ? 0 : b.i;
}

// grid (1, ceil(row tiles / 8), ksplit), clusters (1, 1, ksplit), kWgSmem bytes of dynamic
// shared memory: block (0, y, z) computes row tiles [8 y, 8 y + 8) for all n_tok <= 64
// tokens over the z-th of ksplit ranges of chunks. xh: (n_tok, n) f16 activations in
// to_half_wg_kernel's order; n % 64 == 0; matrix 0's tile copy (kQ8TileBytes) in ps.w[0].tiles.
// parts (ksplit 1, or null): the greedy picks' block bests (wg_pick_parts). With the picks
// compiled in, ptxas spills 52 bytes here instead of 72, and the calls without picks ran
// faster too: H200, same call, x48 / x64 8,552-8,557 / 9,990-9,999 -> 8,576-8,583 /
// 10,020-10,052 tok/s (BENCHMARKS.md, session 35). Where the spills sit was not looked
// at (no cuobjdump on the development machine): `SASS_AFTER=matmul_h16_wg bash
// bench/cuda_device_run.sh build sass` is the next step before touching this kernel.
__global__ void __launch_bounds__(kWideWarps * kWarp, 2)
    matmul_h16_wg_kernel(Parts ps, const __half* __restrict__ xh, int n_tok, ArgBest* parts) {
  constexpr int NB = 2;  // weight buffers (chunks in flight a warp)
  extern __shared__ __align__(128) uint8_t smem[];
  float(*red)[2 * 8 * 4][kWarp] = reinterpret_cast<float(*)[2 * 8 * 4][kWarp]>(smem);  // over the stages
  float(*bsh)[kWarp] = reinterpret_cast<float(*)[kWarp]>(smem + kWgSmem - kWideWarps * kWarp * 4);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  const int tile = static_cast<int>(blockIdx.y) * kWideWarps + warp;
  const bool live = tile < ps.end[2];
  const Parts::One m = ps.at(live ? tile : 0);
  const int n = static_cast<int>(ps.w[0].n_in), nch = n / kWideChunk;
  const int ksplit = static_cast<int>(gridDim.z), z = static_cast<int>(blockIdx.z);
  const int c0 = z * nch / ksplit, c1 = (z + 1) * nch / ksplit;
  // The weights from the head's tile copy (kQ8TileBytes: a warp's chunk is one 2,176-byte
  // tile). Chunk c's into b; zeros past the block's range or on a dead warp (which still
  // takes part in its warpgroup's wgmma: its rows are never stored).
  const uint8_t* tq = m.w.tiles + (m.r0 / kRows) * nch * kQ8TileBytes + 16 * lane;
  auto load_w = [&](int c, WideW& b) {
    if (live && c < c1) {
      const uint8_t* tl = tq + c * kQ8TileBytes;
#pragma unroll
      for (int i = 0; i < 4; ++i) b.q[i] = __ldg(reinterpret_cast<const uint4*>(tl + 512 * i));
      const uint2 d = __ldg(reinterpret_cast<const uint2*>(tl - 16 * lane + 2048 + 8 * (2 * g + (t >> 1))));
      b.d[0] = __ushort_as_half(static_cast<unsigned short>(d.x));
      b.d[1] = __ushort_as_half(static_cast<unsigned short>(d.x >> 16));
      b.d[2] = __ushort_as_half(static_cast<unsigned short>(d.y));
      b.d[3] = __ushort_as_half(static_cast<unsigned short>(d.y >> 16));
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        b.q[i] = make_uint4(0, 0, 0, 0);
        b.d[i] = __ushort_as_half(0);
      }
    }
  };
  // Chunk c's activations into stage c % 3: a thread copies pieces threadIdx.x and
  // threadIdx.x + 256 (token id % 64, piece id / 64); tokens >= n_tok are not copied
  // (their columns of D are never stored). One commit a chunk, empty past the last.
  auto load_x = [&](int c) {
    if (c < c1) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int id = static_cast<int>(threadIdx.x) + u * kWideWarps * kWarp, tok = id % kWgTok, pc = id / kWgTok;
        if (tok < n_tok)
          cp_async16(smem + (c % kWideStages) * kWgStage + 1024 * pc + 16 * tok,
                     xh + static_cast<int64_t>(tok) * n + kWideChunk * c + 8 * pc);
      }
    }
    cp_async_commit();
  };
  float acc[2][8][4] = {};
  auto chunk = [&](int c, WideW& b) {
    cp_async_wait_group<1>();  // this thread's copies of chunk c have landed (c + 1's may pend)
    fence_proxy_async();       // ... and are visible to the tensor core's reads
    __syncthreads();           // everyone's; every warpgroup is done with chunk c - 1's stage
    load_x(c + 2);
    wg_chunk(b, sbase + (c % kWideStages) * kWgStage, acc);
  };
  // NB chunks' weights in registers; each buffer asks for its next chunk (NB ahead) as soon
  // as it has been computed.
  WideW w[NB];
#pragma unroll
  for (int u = 0; u < NB; ++u) load_w(c0 + u, w[u]);
  const float bias_mine = ksplit > 1 && live && m.bias ? __ldg(m.bias + m.r0 + lane) : 0.f;
  pdl_wait();
  pdl_trigger();
  load_x(c0);
  load_x(c0 + 1);
#pragma unroll 1
  for (int c = c0; c < c1; c += NB) {
#pragma unroll
    for (int u = 0; u < NB; ++u)
      if (c + u < c1) {  // uniform over the block: the barriers match
        chunk(c + u, w[u]);
        load_w(c + u + NB, w[u]);  // the buffer's next chunk, NB ahead
      }
  }
  if (ksplit > 1) __syncthreads();  // red overlays the stages
  wide_finish<8>(acc, red, bsh, bias_mine, ps, tile, 0, n_tok);
  if (parts) wg_pick_parts(acc, ps, tile, n_tok, parts, smem);
}

// dst: x's rows (n_rows, n) in f16, each 64-column chunk in the wgmma K order above (a
// float4 of natural columns 16 t + 4 s .. + 3 -> slots 16 s + 2 t, + 1 and 16 s + 8 + 2 t,
// + 1 of the chunk). A PDL launch releasing its dependent at once (as to_half_kernel).
__global__ void to_half_wg_kernel(const float* __restrict__ x, __half* dst, int64_t n_rows, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.y; i < n_rows; i += gridDim.y)
    for (int64_t c = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; c < n;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x * 4) {
      const float4 v = *reinterpret_cast<const float4*>(x + i * n + c);
      const int cc = static_cast<int>(c % kWideChunk), tq = cc >> 4, s = (cc >> 2) & 3;
      __half* o = dst + i * n + (c - cc) + 16 * s + 2 * tq;
      *reinterpret_cast<__half2*>(o) = __floats2half2_rn(v.x, v.y);
      *reinterpret_cast<__half2*>(o + 8) = __floats2half2_rn(v.z, v.w);
    }
}

}  // namespace

bool wg_usable(int64_t n_tok, int64_t n_in) {
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0;
    if (!knob_on("BRASS_CUDA_MMA_WG") || cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major != 9 || minor != 0) return false;  // the sm_90a code runs on compute capability 9.0 only
    return cudaFuncSetAttribute(matmul_h16_wg_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kWgSmem) ==
           cudaSuccess;
  }();
  return ok && n_tok > 32 && n_tok <= kWgTok && n_in % kWideChunk == 0;
}

void launch_h16_wg(const Parts& ps, int64_t n_tok, int64_t tiles, int ksplit, const float* x, __half* xh,
                   cudaStream_t st, const PickEpi* pick) {
  const int64_t n = ps.w[0].n_in;
  const dim3 g(static_cast<unsigned>(std::min<int64_t>((n / 4 + 255) / 256 + 1, 16)), static_cast<unsigned>(n_tok));
  launch_pdl(to_half_wg_kernel, g, dim3(256), 0, st, x, xh, n_tok, n);
  BRASS_CUDA_LAUNCHED();
  const dim3 grid(1, static_cast<unsigned>((tiles + kWideWarps - 1) / kWideWarps), static_cast<unsigned>(ksplit));
  ArgBest* parts = pick && ksplit == 1 ? static_cast<ArgBest*>(pick->parts) : nullptr;
  launch_pdl_cluster(matmul_h16_wg_kernel, grid, dim3(kWideWarps * kWarp), dim3(1, 1, grid.z), kWgSmem, st, ps, xh,
                     static_cast<int>(n_tok), parts);
  BRASS_CUDA_LAUNCHED();
  if (!parts) return;
  launch_pdl(wg_pick_rows_kernel, dim3(static_cast<unsigned>(n_tok)), dim3(kWideWarps * kWarp), 0, st,
             static_cast<const ArgBest*>(parts), static_cast<int>(grid.y), pick->out);
  BRASS_CUDA_LAUNCHED();
}

int64_t wg_pick_parts_count(int64_t n_tok, int64_t tiles) { return n_tok * ((tiles + kWideWarps - 1) / kWideWarps); }

}  // namespace wide
}  // namespace brass::backend::cuda
