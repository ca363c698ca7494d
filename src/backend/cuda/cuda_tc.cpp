// TensorCores (cuda_tc.h): host side of the cuBLAS paths.
#include "backend/cuda/cuda_tc.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace brass::backend::cuda {
namespace {

constexpr int64_t kMaxExperts = 1024;
constexpr int64_t kWorkspace = int64_t{32} << 20;
// Dequantized expert matrices live at most this many bytes at once (a group of experts).
constexpr int64_t kDequantBudget = int64_t{1600} << 20;
// A dense weight is dequantized per call only up to this size (larger: mat-vec path).
constexpr int64_t kDenseDequantMax = int64_t{2} << 30;

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuBLAS error %d in %s\n", static_cast<int>(s), what);
    std::abort();
  }
}

bool half_type(int t) { return t == kQ8 || t == kMX || t == kF16 || t == kBF16; }
bool is_bf16(int t) { return t == kMX || t == kBF16; }

}  // namespace

TensorCores::TensorCores(cudaStream_t st, TcOptions o) : st_(st), opt_(o) {
  for (Scratch* sc : {&ws_, &wdq_, &xh_, &groups_, &h_buf_, &act_, &o_buf_}) sc->stream = st_;
  check_cublas(cublasCreate(&h_), "cublasCreate");
  check_cublas(cublasSetStream(h_, st_), "cublasSetStream");
  // Our own workspace: required for stream capture, and it keeps cuBLAS from allocating.
  check_cublas(cublasSetWorkspace(h_, ws_.get(kWorkspace), kWorkspace), "cublasSetWorkspace");
  check_cublas(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  BRASS_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&counts_host_), (kMaxExperts + 1) * sizeof(int32_t),
                                 cudaHostAllocDefault));
}

TensorCores::~TensorCores() {
  cudaStreamSynchronize(st_);
  if (h_) cublasDestroy(h_);
  if (counts_host_) cudaFreeHost(counts_host_);
}

// Column-major C (m, n) = A^T B with A (k, m) lda and B (k, n) ldb, 16-bit in, f32 out.
// Row-major view: C[n][m] = B[n][k] . A[m][k], i.e. y(n_tok, n_out) = x W^T.
void TensorCores::gemm(bool bf16, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, const void* b,
                       int64_t ldb, float* c, int64_t ldc) {
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  check_cublas(cublasGemmEx(h_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                            static_cast<int>(k), &one, a, t, static_cast<int>(lda), b, t, static_cast<int>(ldb), &zero,
                            c, CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

bool TensorCores::matmul(const MatmulP& a) {
  const DevW& w = a.w;
  if (!opt_.enabled || a.n_tok < opt_.min_tok_dense || !half_type(w.type)) return false;
  if (w.ne1 != w.rows || w.n_in % 32 != 0 || w.rows * w.n_in * 2 > kDenseDequantMax) return false;
  if ((w.type == kF16 || w.type == kBF16) && !w.vec) return false;
  const bool bf16 = is_bf16(w.type);
  const void* wh = w.q;
  if (w.type == kQ8 || w.type == kMX) {
    void* d = wdq_.get(static_cast<size_t>(w.rows * w.n_in * 2));
    launch_dequant_half(w, d, w.ne1, 0, nullptr, 0, 1, st_);
    wh = d;
  }
  void* xh = xh_.get(static_cast<size_t>(a.n_tok * w.n_in * 2));
  launch_to_half(a.x, nullptr, 1, xh, bf16, a.n_tok, w.n_in, st_);
  gemm(bf16, w.rows, a.n_tok, w.n_in, wh, w.n_in, xh, w.n_in, a.y, w.rows);
  if (a.bias) launch_bias_add(a.y, a.bias, a.n_tok, w.rows, st_);
  return true;
}

bool TensorCores::qkv(const MatmulP (&m)[3]) {
  const DevW& w0 = m[0].w;
  const int64_t n_tok = m[0].n_tok, n_in = w0.n_in;
  if (!opt_.enabled || n_tok < opt_.min_tok_dense || (w0.type != kQ8 && w0.type != kMX)) return false;
  int64_t rows = 0;
  for (const MatmulP& p : m) {
    if (p.w.type != w0.type || p.w.n_in != n_in || p.w.ne1 != p.w.rows || p.x != m[0].x || p.n_tok != n_tok ||
        p.w.rows <= 0 || p.w.rows % 4)  // (the split kernel's 4-column accesses)
      return false;
    rows += p.w.rows;
  }
  if (n_in % 32 != 0 || rows * n_in * 2 > kDenseDequantMax) return false;
  const bool bf16 = is_bf16(w0.type);
  // The three weights dequantized one under the other: one GEMM of all their rows.
  uint8_t* wd = static_cast<uint8_t*>(wdq_.get(static_cast<size_t>(rows * n_in * 2)));
  int64_t r0 = 0;
  for (const MatmulP& p : m) {
    launch_dequant_half(p.w, wd, 0, r0, nullptr, 0, 1, st_);
    r0 += p.w.rows;
  }
  void* xh = xh_.get(static_cast<size_t>(n_tok * n_in * 2));
  launch_to_half(m[0].x, nullptr, 1, xh, bf16, n_tok, n_in, st_);
  float* y = h_buf_.as<float>(static_cast<size_t>(n_tok * rows));  // (n_tok, rows); the MoE's h area
  gemm(bf16, rows, n_tok, n_in, wd, n_in, xh, n_in, y, rows);
  SplitCols3P sp{};
  for (int j = 0; j < 3; ++j) {
    sp.out[j] = m[j].y;
    sp.bias[j] = m[j].bias;
    sp.width[j] = m[j].w.rows;
  }
  return launch_split_cols3(y, n_tok, sp, st_);  // (true: the widths were checked above)
}

bool TensorCores::moe_applies(const MoeP& a) const {
  const DevW &g = a.gate, &u = a.up, &d = a.down;
  if (!opt_.enabled || (g.type != kQ8 && g.type != kMX) || u.type != g.type || d.type != g.type) return false;
  const int64_t n_embd = g.n_in, n_ff = g.ne1, n_expert = g.rows / std::max<int64_t>(g.ne1, 1);
  const int64_t n_slots = a.n_tok * a.k;
  if (n_expert < 1 || n_expert > kMaxExperts || n_slots < opt_.min_slots_per_expert * n_expert) return false;
  return !(u.n_in != n_embd || u.ne1 != n_ff || d.n_in != n_ff || d.ne1 != n_embd || n_embd % 32 || n_ff % 32);
}

bool TensorCores::moe(const MoeP& a) {
  if (!moe_applies(a)) return false;
  const DevW &g = a.gate, &u = a.up, &d = a.down;
  const int64_t n_embd = g.n_in, n_ff = g.ne1, n_expert = g.rows / std::max<int64_t>(g.ne1, 1);
  const int64_t n_slots = a.n_tok * a.k;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  BRASS_CUDA_CHECK(cudaStreamIsCapturing(st_, &cs));
  if (cs != cudaStreamCaptureStatusNone) return false;  // needs the group sizes on the host
  const bool bf16 = g.type == kMX;

  // Grouping (device), then the sizes to the host.
  int32_t* gb = groups_.as<int32_t>(static_cast<size_t>(2 * (n_expert + 1) + 3 * n_slots));
  MoeGroupBufs grp{gb, gb + n_expert + 1, gb + 2 * (n_expert + 1), gb + 2 * (n_expert + 1) + n_slots,
                   gb + 2 * (n_expert + 1) + 2 * n_slots};
  launch_moe_group(a.ids, n_slots, static_cast<int>(n_expert), grp, st_);
  BRASS_CUDA_CHECK(cudaMemcpyAsync(counts_host_, grp.counts, n_expert * sizeof(int32_t), cudaMemcpyDeviceToHost, st_));
  BRASS_CUDA_CHECK(cudaStreamSynchronize(st_));
  std::vector<int64_t> off(n_expert + 1, 0);
  for (int64_t e = 0; e < n_expert; ++e) off[e + 1] = off[e] + counts_host_[e];

  // Activations of every slot in sorted order: (n_slots, n_embd) 16-bit.
  void* xg = xh_.get(static_cast<size_t>(n_slots * n_embd * 2));
  launch_to_half(a.x, grp.perm, static_cast<int>(a.k), xg, bf16, n_slots, n_embd, st_);
  float* h = h_buf_.as<float>(static_cast<size_t>(n_slots * 2 * n_ff));          // (n_slots, 2 n_ff)
  void* act = act_.get(static_cast<size_t>(n_slots * n_ff * 2));                 // (n_slots, n_ff)
  float* o = o_buf_.as<float>(static_cast<size_t>(n_slots * n_embd));            // (n_slots, n_embd)

  const int64_t per_expert = 3 * n_ff * n_embd * 2;  // dequantized gate + up + down bytes
  const int64_t group = std::clamp<int64_t>(kDequantBudget / per_expert, 1, n_expert);
  uint8_t* wd = static_cast<uint8_t*>(wdq_.get(static_cast<size_t>(group * per_expert)));
  uint8_t* gu = wd;                                   // (group, 2 n_ff, n_embd): gate rows | up rows
  uint8_t* dn = wd + group * 2 * n_ff * n_embd * 2;   // (group, n_embd, n_ff)
  const char* hb = reinterpret_cast<const char*>(xg);
  for (int64_t e0 = 0; e0 < n_expert; e0 += group) {
    const int64_t e1 = std::min(n_expert, e0 + group);
    if (off[e1] == off[e0]) continue;
    launch_dequant_half(g, gu, 2 * n_ff, 0, grp.counts, e0, e1, st_);
    launch_dequant_half(u, gu, 2 * n_ff, n_ff, grp.counts, e0, e1, st_);
    launch_dequant_half(d, dn, n_embd, 0, grp.counts, e0, e1, st_);
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t c = off[e + 1] - off[e];
      if (c == 0) continue;
      gemm(bf16, 2 * n_ff, c, n_embd, gu + (e - e0) * 2 * n_ff * n_embd * 2, n_embd, hb + off[e] * n_embd * 2, n_embd,
           h + off[e] * 2 * n_ff, 2 * n_ff);
    }
    launch_moe_swiglu(h + off[e0] * 2 * n_ff, grp.eid + off[e0], a.gate_bias, a.up_bias,
                      static_cast<char*>(act) + off[e0] * n_ff * 2, bf16, off[e1] - off[e0], n_ff, a.alpha, a.limit,
                      st_);
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t c = off[e + 1] - off[e];
      if (c == 0) continue;
      gemm(bf16, n_embd, c, n_ff, dn + (e - e0) * n_embd * n_ff * 2, n_ff,
           static_cast<const char*>(act) + off[e] * n_ff * 2, n_ff, o + off[e] * n_embd, n_embd);
    }
  }
  launch_moe_combine(o, grp.inv, a.ids, a.weights, a.down_bias, a.out, a.n_tok, a.k, n_embd, st_);
  return true;
}

}  // namespace brass::backend::cuda
