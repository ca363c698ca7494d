// TensorCores: the many-token (prefill) paths of the CUDA backend on tensor cores, through
// cuBLAS GEMMs (bf16/f16 operands, f32 accumulation and output) after on-the-fly
// dequantization of the weights (cuda_gemm.cu says which 16-bit type and why).
// - matmul: y = x W^T (+ bias) for n_tok >= min_tok_dense: W dequantized once per call
//   into scratch (Q8_0 -> f16, MXFP4 -> bf16; F16/BF16 used in place), x rounded to the
//   same type, one GEMM. Capturable (the cuBLAS workspace is ours).
// - moe: slots grouped by expert on the GPU; the group sizes come back to the host (one
//   small copy + sync per call, so never while a graph is being captured); per expert one
//   GEMM for gate|up (the two matrices dequantized side by side), SwiGLU, one GEMM for down,
//   then the router-weighted combine per token in j order. Experts are processed in groups
//   whose dequantized matrices fit kDequantBudget bytes; experts with no tokens are skipped.
// Each entry point returns false (doing nothing) when the op is outside its scope; the
// caller then uses the mat-vec kernels. Numerics differ from the f32/int8 kernels only by
// the 16-bit rounding of activations (and of Q8_0 weights to f16): the parity tests
// compare with the reference op on the rounded inputs.
#pragma once

#include <cublas_v2.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_scratch.h"

namespace brass::backend::cuda {

struct TcOptions {
  bool enabled = true;
  int64_t min_tok_dense = 16;        // dense matmul: tokens per call
  int64_t min_slots_per_expert = 256; // moe: n_tok * k >= this * n_expert
};

class TensorCores {
 public:
  TensorCores(cudaStream_t st, TcOptions o);
  ~TensorCores();
  TensorCores(const TensorCores&) = delete;
  TensorCores& operator=(const TensorCores&) = delete;

  bool matmul(const MatmulP& a);
  // q / k / v of attention (three matmuls of one input): the weights dequantized one under
  // the other, the input converted once, one GEMM, its columns split into the three
  // outputs with their biases. Same numerics as three matmul calls (f32 summation order aside).
  bool qkv(const MatmulP (&m)[3]);
  bool moe(const MoeP& a);
  bool moe_applies(const MoeP& a) const;  // moe's shape checks (it also declines in a capture)
  const TcOptions& options() const { return opt_; }

 private:
  void gemm(bool bf16, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb,
            float* c, int64_t ldc);

  cudaStream_t st_;
  TcOptions opt_;
  cublasHandle_t h_ = nullptr;
  Scratch ws_, wdq_, xh_, groups_, h_buf_, act_, o_buf_;
  int32_t* counts_host_ = nullptr;  // pinned (kMaxExperts + 1)
};

}  // namespace brass::backend::cuda
