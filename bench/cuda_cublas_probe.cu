// What a plain 16-bit cuBLAS GEMM reaches on batched decode's dense shapes, cold: y(n_tok,
// rows) = x W^T with W f16 (a different matrix each call, 24 of them as one step's layers,
// so nothing is served from L2), for gpt-oss-20b's q/k/v (5,120 x 2,880), wo (2,880 x
// 4,096) and output head (201,088 x 2,880) at 8..128 tokens. The yardstick for brass's own
// dense MMA kernels, which read the Q8_0 weights (17/32 of the f16 bytes): the last column
// is the rate brass would need on Q8_0 bytes to match cuBLAS's time.
// Build and run on the device: `bash bench/cuda_device_run.sh cublas` (no model needed).
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                    \
  do {                                                                                           \
    if (auto e_ = (x); e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)
#define CB(x)                                                                    \
  do {                                                                           \
    if (auto s_ = (x); s_ != CUBLAS_STATUS_SUCCESS) {                            \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, \
                   static_cast<int>(s_));                                        \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

int main() {
  cublasHandle_t h;
  CB(cublasCreate(&h));
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  CB(cublasSetStream(h, st));
  void* ws = nullptr;
  CK(cudaMalloc(&ws, 32 << 20));
  CB(cublasSetWorkspace(h, ws, 32 << 20));
  struct Shape {
    const char* name;
    int rows, k, n_mat;
  };
  const Shape shapes[] = {{"qkv", 5120, 2880, 24}, {"wo", 2880, 4096, 24}, {"head", 201088, 2880, 1}};
  constexpr int kMaxTok = 128;
  std::printf("shape n_tok       us   GB/s (f16 bytes)   GB/s on Q8_0 bytes\n");
  for (const Shape& s : shapes) {
    const size_t wbytes = static_cast<size_t>(s.rows) * s.k * 2;
    std::vector<__half*> w(s.n_mat);
    for (auto& p : w) {
      CK(cudaMalloc(&p, wbytes));
      CK(cudaMemset(p, 0x11, wbytes));  // 0x1111: a small normal f16 (values do not matter)
    }
    __half* x = nullptr;
    float* y = nullptr;
    CK(cudaMalloc(&x, static_cast<size_t>(kMaxTok) * s.k * 2));
    CK(cudaMemset(x, 0x11, static_cast<size_t>(kMaxTok) * s.k * 2));
    CK(cudaMalloc(&y, static_cast<size_t>(kMaxTok) * s.rows * 4));
    for (int n : {8, 16, 32, 64, 128}) {
      const float one = 1.f, zero = 0.f;
      auto run = [&](int i) {
        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.rows, n, s.k, &one, w[i % s.n_mat], CUDA_R_16F, s.k, x,
                        CUDA_R_16F, s.k, &zero, y, CUDA_R_32F, s.rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      for (int i = 0; i < 2 * s.n_mat; ++i) run(i);  // warm-up (heuristics, clocks)
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      const int iters = s.n_mat == 1 ? 20 : 10 * s.n_mat;
      CK(cudaEventRecord(a, st));
      for (int i = 0; i < iters; ++i) run(i);
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float ms = 0.f;
      CK(cudaEventElapsedTime(&ms, a, b));
      const double us = 1000.0 * ms / iters;
      std::printf("%-5s %5d %8.2f %18.0f %20.0f\n", s.name, n, us, wbytes / us / 1e3, wbytes * 17.0 / 32 / us / 1e3);
      CK(cudaEventDestroy(a));
      CK(cudaEventDestroy(b));
    }
    for (auto p : w) CK(cudaFree(p));
    CK(cudaFree(x));
    CK(cudaFree(y));
  }
  CK(cudaDeviceSynchronize());
  CB(cublasDestroy(h));
  return 0;
}
