// The GPU's address translation as a one-token kernel meets it: a single thread chases
// pointers through N nodes a page stride apart (2 MB, 64 KB, 4 KB) in a 16 GB
// allocation, after a warm-up pass, and prints the average cycles a dependent L2-hit
// load. A TLB that cannot hold N pages would show as a step in the cycles against N.
// H200 (session 49): 282 cycles at 4 pages, 288-300 at every N from 8 to 8,192 and every
// stride (up to 16 GB of 2 MB pages): no step beyond ~17 cycles, so the ~1,600 pages a
// decode token of the 20b touches are not a translation cost (warming the experts' pages
// before gate/up, a prefetch a page, changed nothing either). Stage `tlb` of
// bench/cuda_device_run.sh.
#include <cstdint>
#include <cstdio>
#include <vector>
#include <random>
#include <algorithm>
#include <cuda_runtime.h>
__global__ void chase(const uint64_t* base, int steps, uint64_t* out, long long* cyc) {
  uint64_t p = 0;
  for (int i = 0; i < steps; ++i) p = __ldcg(base + p);
  long long t0 = clock64();
  for (int i = 0; i < steps; ++i) p = __ldcg(base + p);
  long long t1 = clock64();
  out[0] = p;
  cyc[0] = t1 - t0;
}
int main() {
  const size_t bytes = size_t(16) << 30;
  uint64_t* d;
  if (cudaMalloc(&d, bytes) != cudaSuccess) { printf("malloc failed\n"); return 1; }
  uint64_t* out; long long* cyc;
  cudaMalloc(&out, 8); cudaMalloc(&cyc, 8);
  std::mt19937 rng(1);
  for (size_t stride : {size_t(2) << 20, size_t(64) << 10, size_t(4) << 10}) {
    for (int n : {4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}) {
      if (stride * n > bytes) continue;
      std::vector<int> perm(n);
      for (int i = 0; i < n; ++i) perm[i] = i;
      std::shuffle(perm.begin() + 1, perm.end(), rng);
      // node i at element (perm[i] * stride + (perm[i] % 64) * 128) / 8, points to node i + 1
      auto at = [&](int k) { return (size_t(perm[k]) * stride + size_t(perm[k] % 64) * 128) / 8; };
      for (int k = 0; k < n; ++k) {
        uint64_t nxt = at((k + 1) % n);
        cudaMemcpy(d + at(k), &nxt, 8, cudaMemcpyHostToDevice);
      }
      const int steps = std::max(4 * n, 2048);
      chase<<<1, 1>>>(d, steps, out, cyc);
      long long c = 0;
      cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost);
      printf("stride %7zu KB  pages %5d  %7.1f cycles/load\n", stride >> 10, n, double(c) / steps);
    }
  }
  return 0;
}
