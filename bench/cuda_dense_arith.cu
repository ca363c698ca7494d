// cuda_dense_arith: the batched dense few-token calls (q/k/v, wo) in isolation. In a
// 64-stream step each of the 48 calls takes ~18-20 us, while its weights read cold in the
// kernel's own pattern take ~9 us (bench/cuda_dense_pattern.cu): is the rest inside the
// kernel (its K-split cluster sum, its chunk barriers, the two 32-token passes over the
// same rows) or in the chain around it (PDL hand-over, the to_half launch)? This times the
// backend's matmul_h16_wide_kernel (cuda_matmul_mma.cu, included here) alone, cold (the
// weights rotate through copies that together overflow L2), at the model's shapes, token
// counts and K splits, against a plain read of the same bytes.
// Build: nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
//        -DFMT_CONSTEVAL= -Isrc -Xlinker --unresolved-symbols=ignore-all bench/cuda_dense_arith.cu -o /tmp/densea
// (The backend's host functions are never called: no PDL attribute here.)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_matmul_mma.cu"
#include "cuda_cold_read.cuh"

namespace dense_arith {  // (named: two anonymous namespaces confuse nvcc's stub generator)

using namespace brass::backend::cuda;
using namespace brass::backend::cuda::wide;

constexpr int kN = 2880, kCopies = 8;

// One dense call's weights: Q8_0 split layout (all rows' quants, then their f16 scales).
struct Shape {
  const char* name;
  int n_in;
  int rows[3];  // up to three matrices side by side (q / k / v)
  int mats;
  int64_t quant_bytes() const {
    int64_t r = 0;
    for (int j = 0; j < mats; ++j) r += int64_t(rows[j]) * n_in;
    return r;
  }
  int64_t bytes() const { return quant_bytes() + quant_bytes() / 32 * 2; }
};

// The cluster launch without the backend's PDL switch (a host function not linked here).
template <class... A>
cudaError_t launch_cluster(void (*kernel)(A...), dim3 grid, int ks, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kWideWarps * kWarp);
  cudaLaunchAttribute at;
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = 1;
  at.val.clusterDim.y = 1;
  at.val.clusterDim.z = static_cast<unsigned>(ks);
  cfg.attrs = &at;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

}  // namespace dense_arith

using namespace dense_arith;

int main() {
  const Shape shapes[] = {{"q/k/v (4096 + 512 + 512 rows x 2880)", kN, {4096, 512, 512}, 3},
                          {"wo (2880 rows x 4096)", 4096, {2880, 0, 0}, 1}};
  size_t most = 0;
  for (const Shape& s : shapes) most = std::max<size_t>(most, s.bytes());
  ColdProbe pr(most * kCopies);
  if (!pr.ok()) return 1;
  {
    std::mt19937 rng(5);
    std::vector<uint8_t> h(most * kCopies);
    for (auto& b : h) b = static_cast<uint8_t>(rng());  // quants (each shape's scales are set below)
    cudaMemcpy(pr.buf, h.data(), h.size(), cudaMemcpyHostToDevice);
  }
  constexpr int kMaxTok = 64;
  __half* xh = nullptr;
  float *y = nullptr, *bias = nullptr;
  cudaMalloc(&xh, size_t(kMaxTok) * 4096 * sizeof(__half));
  cudaMalloc(&y, size_t(kMaxTok) * 5120 * sizeof(float));
  cudaMalloc(&bias, 5120 * sizeof(float));
  cudaMemset(bias, 0, 5120 * sizeof(float));
  {
    std::mt19937 rng(9);
    std::vector<__half> x(size_t(kMaxTok) * 4096);
    for (auto& v : x) v = __float2half(static_cast<float>(static_cast<int>(rng() % 2001) - 1000) * 1e-3f);
    cudaMemcpy(xh, x.data(), x.size() * sizeof(__half), cudaMemcpyHostToDevice);
  }
  std::printf("dense few-token calls, cold, %d SMs\n", pr.sms);
  for (const Shape& s : shapes) {
    const int64_t qb = s.quant_bytes(), bytes = s.bytes();
    {  // scales: f16 0.01 for every block of every copy
      std::vector<__half> sc(qb / 32, __float2half(0.01f));
      for (int c = 0; c < kCopies; ++c)
        cudaMemcpy(pr.buf + c * bytes + qb, sc.data(), sc.size() * sizeof(__half), cudaMemcpyHostToDevice);
    }
    auto parts = [&](const uint8_t* base) {
      Parts ps{};
      int64_t at = 0, end = 0;
      for (int j = 0; j < 3; ++j) {
        const int jj = j < s.mats ? j : s.mats - 1;
        DevW w;
        w.q = base + at;
        w.s = base + qb + at / 16;  // the matrix's f16 scales: 2 bytes per 32 quants
        w.n_in = s.n_in;
        w.rows = s.rows[jj];
        w.ne1 = s.rows[jj];
        w.type = kQ8;
        w.vec = true;
        ps.w[j] = w;
        ps.bias[j] = bias;
        ps.y[j] = y;
        if (j < s.mats) {
          end += s.rows[j] / kRows;
          at += int64_t(s.rows[j]) * s.n_in;
        }
        ps.end[j] = static_cast<int>(end);
      }
      return ps;
    };
    std::printf("== %s: %.1f MB\n", s.name, bytes / 1e6);
    pr.plain_layers(64, bytes, kCopies);
    const int tiles = static_cast<int>((qb / s.n_in) / kRows), gx = (tiles + kWideWarps - 1) / kWideWarps;
    for (int n_tok : {8, 32, 64})
      for (int ks : {1, 2, 4, 5, 8}) {
        constexpr int NT = 4;  // 32 tokens a pass (8: NT 1 in the backend; the shape's cost is what counts)
        const int gy = (n_tok + 8 * NT - 1) / (8 * NT);
        char name[96];
        std::snprintf(name, sizeof name, "wide kernel, %d tok (%d pass%s), K split %d", n_tok, gy,
                      gy > 1 ? "es" : "", ks);
        pr.timeit(name, 64, bytes / 1e6, [&](int r) {
          const cudaError_t e = launch_cluster(matmul_h16_wide_kernel<NT, false>, dim3(gy, gx, ks), ks,
                                               parts(pr.buf + (r % kCopies) * bytes),
                                               static_cast<const __half*>(xh), n_tok, RopeEpi{});
          if (e != cudaSuccess) std::printf("launch: %s\n", cudaGetErrorString(e));
        });
      }
  }
  return 0;
}
