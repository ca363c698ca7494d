// Dense y = x W^T + b for a few tokens (2..64: batched decode) on int8 tensor cores, the
// weight (Q8_0 or MXFP4, split layout) read once per 8 NT tokens instead of once per token
// as the dp4a mat-vec does (cuda_q8.cu), and without the 16-bit copy of the whole matrix
// that the cuBLAS path makes per call (cuda_tc.cpp). Numerics: the q8x path's (the
// reference matmul on the Q8_0 round trip of x), summed in another order.
#include <algorithm>

#include "backend/cuda/cuda_mma.cuh"

namespace brass::backend::cuda {
namespace {

using namespace mma;

// Warps per block (splitting K): 8, so that a 2880-row matrix (90 blocks) still has ~6
// warps per SM streaming; 4 at 64 tokens per pass (the partial sums' shared memory).
template <int NT>
constexpr int ks_dense() { return NT >= 8 ? 4 : 8; }

// grid (rows / 32, ceil(n_tok / (8 NT))): block (x, y) computes rows [32 x, 32 x + 32) for
// tokens [8 NT y, 8 NT (y + 1)).
template <int TYPE, int NT>
__global__ void __launch_bounds__(ks_dense<NT>() * kWarp) matmul_mma_kernel(DevW w, const float* __restrict__ bias,
                                                                const int8_t* __restrict__ xq,
                                                                const float* __restrict__ xd, float* y, int n_tok) {
  constexpr int NA = 2 * NT * 4, KS = ks_dense<NT>();
  __shared__ float red[(KS - 1) * NA][kWarp];
  pdl_wait();
  pdl_trigger();
  const int n = static_cast<int>(w.n_in);
  const int lane = threadIdx.x % kWarp, g = lane >> 2, t = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int base = static_cast<int>(blockIdx.y) * 8 * NT;
  const Cols<NT> cols = make_cols<NT>(base, n_tok, [](int i) { return i; }, xq, xd, n);
  const uint8_t* const wq[1] = {w.q};
  const uint8_t* const wsc[1] = {w.s};
  float acc[1][2][NT][4] = {};
  k_loop<TYPE, 1, NT, KS>(wq, wsc, r0, n, cols, acc);
  reduce_warps<NA, KS>(&acc[0][0][0][0], red);
  if (threadIdx.x >= kWarp) return;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int tc = base + 8 * j + 2 * t + (c & 1);
        const int64_t r = r0 + c_row(g, mt, c);
        if (tc < n_tok) y[static_cast<int64_t>(tc) * w.rows + r] = acc[0][mt][j][c] + (bias ? bias[r] : 0.f);
      }
}

template <int TYPE>
__global__ void __launch_bounds__(256) quantize_rows_kernel(const float* __restrict__ x, int n, int8_t* xq, float* xd) {
  const int64_t r = blockIdx.x;
  pdl_wait();
  pdl_trigger();
  quantize_row_mma<TYPE>(x + r * n, n, xq + r * n, xd + r * (n / 32));
}

template <int TYPE, int NT>
void launch_nt(const MatmulP& a, const int8_t* xq, const float* xd, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>(a.w.rows / kRows), static_cast<unsigned>((a.n_tok + 8 * NT - 1) / (8 * NT)));
  launch_pdl(matmul_mma_kernel<TYPE, NT>, grid, dim3(ks_dense<NT>() * kWarp), 0, st, a.w, a.bias, xq, xd, a.y,
             static_cast<int>(a.n_tok));
  BRASS_CUDA_LAUNCHED();
}

template <int TYPE>
void launch_typed(const MatmulP& a, int8_t* xq, float* xd, cudaStream_t st) {
  launch_quantize_rows_mma(TYPE, a.x, a.n_tok, a.w.n_in, xq, xd, st);
  // Tokens per tile pass: up to 64, so a 64-stream step reads the weight once.
  if (a.n_tok <= 8)
    launch_nt<TYPE, 1>(a, xq, xd, st);
  else if (a.n_tok <= 16)
    launch_nt<TYPE, 2>(a, xq, xd, st);
  else if (a.n_tok <= 32)
    launch_nt<TYPE, 4>(a, xq, xd, st);
  else
    launch_nt<TYPE, 8>(a, xq, xd, st);
}

int64_t al256(int64_t v) { return (v + 255) / 256 * 256; }

}  // namespace

void launch_quantize_rows_mma(int type, const float* x, int64_t n_rows, int64_t n, int8_t* xq, float* xd,
                              cudaStream_t st) {
  if (n_rows <= 0) return;
  const dim3 grid(static_cast<unsigned>(n_rows));
  if (type == kMX)
    launch_pdl(quantize_rows_kernel<kMX>, grid, dim3(256), 0, st, x, static_cast<int>(n), xq, xd);
  else
    launch_pdl(quantize_rows_kernel<kQ8>, grid, dim3(256), 0, st, x, static_cast<int>(n), xq, xd);
  BRASS_CUDA_LAUNCHED();
}

bool matmul_mma_supported(const DevW& w) {
  if (w.type != kQ8 && w.type != kMX) return false;
  return w.n_in % (w.type == kMX ? 64 : 32) == 0 && w.rows % kRows == 0 && w.ne1 == w.rows && w.n_in <= (1 << 20);
}

int64_t matmul_mma_scratch_bytes(int64_t n_tok, int64_t n_in) { return al256(n_tok * n_in) + n_tok * (n_in / 32) * 4; }

void launch_matmul_mma(const MatmulP& a, void* scratch, cudaStream_t st) {
  if (a.n_tok <= 0) return;
  int8_t* xq = static_cast<int8_t*>(scratch);
  float* xd = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + al256(a.n_tok * a.w.n_in));
  if (a.w.type == kQ8)
    launch_typed<kQ8>(a, xq, xd, st);
  else
    launch_typed<kMX>(a, xq, xd, st);
}

}  // namespace brass::backend::cuda
