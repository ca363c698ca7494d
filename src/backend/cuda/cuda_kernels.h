// Host-side declarations shared by the CUDA backend's files: the device weight view
// (DevW), the argument structs of the launchers each .cu file exports, and error checks.
// The .cu files see only this header (no backend.h: fmt's headers, pulled in through
// core/status.h, do not compile under nvcc), so the structs mirror backend.h's op
// arguments field by field, with WeightViews resolved to DevW by cuda_backend.cpp.
// Device weight layouts: see cuda_common.cuh.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "backend/sample_noise.h"
#include "core/dtype.h"

#define BRASS_CUDA_CHECK(expr)                                                                 \
  do {                                                                                         \
    cudaError_t err_ = (expr);                                                                 \
    if (err_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d: CUDA error %s: %s\n", __FILE__, __LINE__, #expr,            \
                   cudaGetErrorString(err_));                                                  \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)
// After a launch: configuration errors show up here (async faults at the next sync).
#define BRASS_CUDA_LAUNCHED()                       \
  do {                                              \
    ++::brass::backend::cuda::g_launches;           \
    BRASS_CUDA_CHECK(cudaGetLastError());           \
  } while (0)

namespace brass::backend::cuda {

// Kernel launches issued so far by this process (host side: every launch_pdl* and every
// BRASS_CUDA_LAUNCHED). The backend's f16 activation copies (CudaBackend::shadow_of) are
// valid only while no launch followed the one that wrote them.
inline uint64_t g_launches = 0;

// A/B measurement knob: on unless the environment variable is "0" (callers read it once,
// into a static).
inline bool knob_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}
// A setting the environment may override both ways: a value starting with '1' / '0' turns
// it on / off, dflt otherwise.
inline bool env_bool(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  return v && (*v == '0' || *v == '1') ? *v == '1' : dflt;
}
// Numeric measurement knob: the variable's value if it is a positive integer, else dflt
// (so 0 cannot be asked for: it means the default).
inline int env_int(const char* name, int dflt = 0) {
  const char* v = std::getenv(name);
  return v && std::atoi(v) > 0 ? std::atoi(v) : dflt;
}
// Count knob where 0 is a setting (e.g. "none"): the variable's value clamped to >= 0 if
// it is set, else dflt.
inline int env_count(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::max(0, std::atoi(v)) : dflt;
}

// Launch with programmatic stream serialization (see cuda_common.cuh) unless disabled
// (set_pdl(false), or BRASS_CUDA_PDL=0 in the backend).
bool pdl_enabled();
void set_pdl(bool on);
// launch_pdl for a grid of thread-block clusters of `cluster` blocks (sm_90; a cluster of
// one block launches without the cluster attribute, as launch_pdl does).
template <class... KArgs, class... Args>
void launch_pdl_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, dim3 cluster, size_t smem, cudaStream_t st,
                        Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[2];
  unsigned n = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    at[n].id = cudaLaunchAttributeClusterDimension;
    at[n].val.clusterDim.x = cluster.x;
    at[n].val.clusterDim.y = cluster.y;
    at[n].val.clusterDim.z = cluster.z;
    ++n;
  }
  if (pdl_enabled()) {
    at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = at;
  cfg.numAttrs = n;
  ++g_launches;
  BRASS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, Args&&... args) {
  launch_pdl_cluster(kernel, grid, block, dim3(1, 1, 1), smem, st, std::forward<Args>(args)...);
}

inline int64_t split_scale_offset(int64_t qs_bytes) { return (qs_bytes + 255) / 256 * 256; }

// Type codes the kernels are templated on.
enum WType : int { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8 = 3, kMX = 4 };

// A weight matrix as the kernels see it.
struct DevW {
  const uint8_t* q = nullptr;  // quants / plain elements
  const uint8_t* s = nullptr;  // scales (split types)
  int64_t n_in = 0;            // elements per row
  int64_t rows = 0;            // ne[1] * ne[2] * ne[3]
  int64_t ne1 = 0;             // rows of one matrix (one expert)
  int type = kF32;
  bool vec = false;            // 16-byte loads possible (alignment and n_in)
  // MXFP4 expert tensors of 2880 x 2880 on a backend with moe_tiles: a second copy as MMA
  // tiles (kMxTileBytes below), read by the grouped MoE's lean loop; a Q8_0 output head
  // there: its tile copy (kQ8TileBytes), read by the few-token f16 MMA head calls.
  const uint8_t* tiles = nullptr;
};

// The MMA tile copy of an MXFP4 matrix (rows % 32 == 0, n_in % 64 == 0): tile (row block
// rb of 32 rows, K step u of 64 elements) at ((rb * n_in / 64) + u) * kMxTileBytes holds
// lane l's k_loop_mx1 operands (g = l / 4, t = l % 4) as two 16-byte words at h * 512 +
// 16 l (h = 0, 1: rows g + 16 h and g + 8 + 16 h, each as words t and t + 4 of the step's
// 32 code bytes), then 32 rows' 2-byte E8M0 pairs at 1,024 + 8 g + 2 i (row g + 8 i): a
// warp's step is two coalesced 512-byte loads and one broadcast 8-byte load a matrix
// instead of 8 four-byte and 4 two-byte loads scattered over 32 rows (cold reads of a
// layer's gate + up at 64 streams, bench/cuda_moe_pattern.cu, H100: 99 vs 136 us).
constexpr int64_t kMxTileBytes = 1024 + 64;
// The shapes that get a tile copy: gpt-oss's experts (the lean loop's compile-time rows).
inline bool mx_tiles_shape(int64_t n_in, int64_t ne1, int64_t n_mat) { return n_in == 2880 && ne1 == 2880 && n_mat > 1; }
inline int64_t mx_tiles_bytes(int64_t n_in, int64_t rows) { return rows / 32 * (n_in / 64) * kMxTileBytes; }

// The MMA tile copy of a Q8_0 output head (split layout; rows % 32 == 0, n_in % 64 == 0):
// tile (row block rb of 32 rows, chunk c of 64 columns) at (rb * n_in / 64 + c) *
// kQ8TileBytes holds lane l's (g = l / 4, t = l % 4) matmul_h16_wide_kernel operands: bytes
// 16 t .. 16 t + 15 of the chunk of row g + 8 i at 512 i + 16 l (i < 4), then the f16
// scales of rows g + 8 i, block 2 c + h at 2,048 + 8 (2 g + h) + 2 i (h = t / 2: a lane's
// four scales in one 8-byte load). A warp's chunk is 2,176 contiguous bytes instead of 64
// bytes of each of 32 rows 2,880 bytes apart, which read the 615 MB head at ~2.1 TB/s
// (H200; 4.4 as tiles, the same as a plain copy: bench/cuda_dense_pattern.cu).
constexpr int64_t kQ8TileBytes = 2048 + 128;
inline bool q8_tiles_shape(int64_t n_in, int64_t rows) { return n_in % 64 == 0 && rows % 32 == 0 && rows > 0; }
inline int64_t q8_tiles_bytes(int64_t n_in, int64_t rows) { return rows / 32 * (n_in / 64) * kQ8TileBytes; }

struct SeqP {  // backend::AttnSeq
  int64_t tok0 = 0;
  int64_t n_tok = 0;
  int32_t pos0 = 0;
  void* k = nullptr;
  void* v = nullptr;
  int32_t capacity = 0;
  bool ring = false;
  const int32_t* blocks = nullptr;  // paged: the sequence's block table (device memory)
  int32_t block_size = 0;           // paged: positions per block (a power of two); 0: not paged
};

// The storage row of position p of one sequence's K/V (backend.h kv_storage_row) in the
// form kernels carry in their parameters: the one place the rule lives on the device.
// Paged: row p % block_size of block blocks[p / block_size] (shift and mask: the block
// size is a power of two); ring: slot p % capacity; linear: slot p.
struct KvAddr {
  const int32_t* blocks = nullptr;  // paged: block table (device memory); null: ring / linear
  int32_t shift = 0;                // paged: log2(block_size)
  int32_t capacity = 0;             // ring size
  int32_t ring = 0;
  __host__ __device__ __forceinline__ int64_t row(int32_t p) const {
    if (blocks) return (static_cast<int64_t>(blocks[p >> shift]) << shift) | (p & ((1 << shift) - 1));
    return ring ? p % capacity : p;
  }
};
inline KvAddr kv_addr(const SeqP& s) {
  KvAddr a;
  if (s.block_size > 0) {
    a.blocks = s.blocks;
    a.shift = __builtin_ctz(static_cast<unsigned>(s.block_size));
  } else {
    a.capacity = s.capacity;
    a.ring = s.ring ? 1 : 0;
  }
  return a;
}

// Multiprocessors of the current device (cached on first use).
int sm_count();

struct MatmulP { DevW w; const float* bias; const float* x; float* y; int64_t n_tok; };
struct RmsP { float* y; const float* x; const float* weight; float* out; int64_t n_rows; int64_t n; float eps; };
struct AddP { float* y; const float* x; int64_t n; };
struct EmbedP { DevW table; const int32_t* tokens; int64_t n_tok; float* out; };
struct RopeP { float* x; const int32_t* pos; const float* inv_freq; float mscale; int64_t n_tok, n_heads, head_dim; };
struct GatherP { const float* x; const int32_t* rows; float* out; int64_t n_rows; int64_t n; };
struct RouterP { const float* logits; int32_t* ids; float* weights; int64_t n_tok, n_expert, k; };
struct ArgmaxP { const float* x; int32_t* out; int64_t n_rows; int64_t n; int32_t* pos; int32_t* history; };
struct SampleP { const float* x; const SampleParams* params; int32_t* out; int64_t n_rows; int64_t n; };
struct KvStoreP {
  const float* k; const float* v; DType kv_type; int64_t n_head_kv, head_dim;
  std::span<const SeqP> seqs; const int32_t* pos;
};
// A one-token decode attention launch in a recorded graph: its kernel node and the key
// splits its next launch runs (launch_attention appends one for each such launch while
// the stream captures, AttentionP::graph_nodes; the recorded node keeps the splits the
// sequence's capacity gave it). A recording sized for the
// capacity gives a short history mostly empty splits: 176 blocks at gpt-oss's full layers
// (22 splits x 8 kv heads on an H200), 168 of them empty at depth 0, and the next kernel
// (wo) launches only once every one of them has found room on an SM beside q/k/v's.
// retarget_decode_node re-sizes the node for launches that attend at most max_keys keys
// (the same rule as at launch, with max_keys for the capacity; never above the recorded
// count); false on a CUDA error.
struct DecodeNode {
  cudaGraphNode_t node = nullptr;
  int32_t splits = 0;  // the instantiated graph's now
};
bool retarget_decode_node(cudaGraphExec_t exec, DecodeNode& n, int64_t max_keys);

struct AttentionP {
  const float* q; const float* sinks; float* out; DType kv_type; int64_t n_head, n_head_kv, head_dim;
  int32_t window; float scale; std::span<const SeqP> seqs; const int32_t* pos;
  __half* out_h = nullptr;  // batched decode (launch_attention_multi): out in f16 too, the wo call's input
  // launch_attention, one decode token: also out as Q8_0 per 32 (out_q [n_head head_dim]
  // int8, out_d [n_head head_dim / 32] scales; the bits wo_router's quantize_x_smem gives)
  int8_t* out_q = nullptr;
  float* out_d = nullptr;
  std::vector<DecodeNode>* graph_nodes = nullptr;  // while capturing: the decode launches' nodes
};
struct AttnQkvP {
  const float* x; DevW wq, wk, wv; const float* bq; const float* bk; const float* bv;
  float* q; float* k; float* v; const int32_t* pos; const float* inv_freq; float mscale;
  int64_t n_tok, n_head, n_head_kv, head_dim; DType kv_type; std::span<const SeqP> seqs;
  bool q8x = false;  // int8 activations (Q8_0 / MXFP4 weights)
};
struct MoeP {
  const float* x; const int32_t* ids; const float* weights; DevW gate, up, down;
  const float* gate_bias; const float* up_bias; const float* down_bias; float* out;
  int64_t n_tok, k; float alpha, limit;
  bool lists = false;  // the MMA path's grouping may be per-expert lists (MoePrep::cap)
};
// The MoE block of one decode token (cuda_q8_pre.cu): y += add; xn = rmsnorm(y) * norm;
// router logits, top-k -> moe.ids / moe.weights (written through them); moe with x = xn.
struct MoeBlockP {
  float* y; const float* add; const float* norm; float eps; float* xn;
  DevW router; const float* router_bias; float* logits; int64_t n_expert;
  MoeP moe;
  bool accumulate;  // y += the experts' output instead of moe.out = it
  // add as the projection wo_x wo^T + wo_bias, fused (cuda_wo_router.cu) when wo_x is set
  DevW wo = {};
  const float* wo_bias = nullptr;
  const float* wo_x = nullptr;
  // null, or wo_x quantized by the attention (launch_attention's out_q, out_d right after
  // it): wo_router copies it instead of quantizing wo_x in each block
  const int8_t* wo_xq = nullptr;
};
// q/k/v + bias + RoPE + K/V store of one token of one sequence, the input normed first
// when norm is set (x: the residual; block 0 writes xn), weights loaded before the PDL
// wait (cuda_q8_pre.cu). false where it does not apply.
struct QkvPreP {
  DevW wq, wk, wv; const float* bq; const float* bk; const float* bv;
  const float* x; const float* norm; float eps; float* xn;
  float* q; float* k; float* v; const int32_t* pos; const float* inv_freq;
  void* kc; void* vc; KvAddr kv; float mscale; int32_t n_head, n_head_kv, head_dim;
};
bool launch_qkv_pre(const QkvPreP& p, DType kv_type, cudaStream_t st);
int64_t moe_block_scratch_bytes(const MoeBlockP& a);
int64_t moe_block_counters(const MoeBlockP& a);
// false where the fused kernels do not apply (the caller composes the ops); counters:
// moe_block_counters zeroed unsigneds, which the kernels leave zeroed.
bool launch_moe_block(const MoeBlockP& a, void* scratch, unsigned* counters, cudaStream_t st);

// ---- cuda_wo_router.cu ----
// launch_moe_block's first kernel when a.wo_x is set: y += wo_x wo^T + wo_bias, the norm,
// the router and the top k in one kernel (xq / xd: the int8 xn for gate/up, MXFP4 order
// with mxo; acc: wo_router_accs() zeroed 64-bit sums and ticket a zeroed counter, which it
// leaves zeroed). wo_router_fits: whether it applies to a block that launch_moe_block
// takes (its checks of the router and the sizes come first; BRASS_CUDA_WO_ROUTER=0:
// never); launch_wo_router only where it does.
bool wo_router_fits(const MoeBlockP& a);
int wo_router_accs();
// Whether wo_router reads a.wo_xq (set) instead of quantizing a.wo_x itself.
bool wo_router_takes_xq(const MoeBlockP& a);
void launch_wo_router(const MoeBlockP& a, int8_t* xq, float* xd, unsigned long long* acc, unsigned* ticket, bool mxo,
                      cudaStream_t st);

// ---- cuda_norm_router.cu ----
// The prefix of MoeBlockP for 2..256 tokens in one kernel: y += add (when set); xn =
// rmsnorm(y) * norm; logits = xn router^T + router_bias; moe.ids / moe.weights = top-k +
// softmax (the router kernel's picks on the same logits). Leaves moe and accumulate to the
// caller. false (nothing launched) where it does not apply (f32 router, n_expert <= 128,
// k <= min(8, n_expert), n_embd % 4 == 0 and <= 4096, 16-byte aligned rows). counters:
// norm_router_rows_counters(p) unsigneds, zeroed once; the kernel leaves them zeroed.
// With prep (from moe_mma_prep; n_embd % 32 == 0), it also leaves the grouped MMA MoE's
// grouping and quantized tokens there: launch_moe_mma(..., prepared = true) follows.
struct MoePrep;
int64_t norm_router_rows_counters(const MoeBlockP& p);
// tokens_per_block: 1, 2 or 4 tokens a block (the same bits for each; tests), 0: chosen by
// the token count.
bool launch_norm_router_rows(const MoeBlockP& p, unsigned* counters, cudaStream_t st, const MoePrep* prep = nullptr,
                             int tokens_per_block = 0);

// ---- cuda_matvec.cu ----
void launch_matmul(const MatmulP& a, cudaStream_t st);
void launch_rms_norm(const RmsP& a, bool add, cudaStream_t st);  // add: y += x first
void launch_add(const AddP& a, cudaStream_t st);
void launch_embed(const EmbedP& a, cudaStream_t st);
void launch_rope(const RopeP& a, cudaStream_t st);
void launch_gather_rows(const GatherP& a, cudaStream_t st);
void launch_router(const RouterP& a, cudaStream_t st);
// partial: 8 * n_rows * kArgmaxBlocks bytes of scratch; counter: n_rows unsigned, zeroed once.
inline constexpr int kArgmaxBlocks = 132;
// Blocks a row of an argmax launch: kArgmaxBlocks for one row, fewer for many, so a
// launch has ~8 x kArgmaxBlocks blocks (64 rows of the 201,088-entry vocabulary took 8,448
// blocks of ~6 loads a thread: 53 us on the H100 for 51 MB).
inline int argmax_parts(int64_t n_rows) {
  const int64_t p = 8 * int64_t{kArgmaxBlocks} / (n_rows > 0 ? n_rows : 1);
  return static_cast<int>(p < 1 ? 1 : p > kArgmaxBlocks ? kArgmaxBlocks : p);
}
void launch_argmax(const ArgmaxP& a, void* partial, unsigned* counter, cudaStream_t st);
// Re-lay a ggml Q8_0 / MXFP4 tensor (src, device) into the split layout (dst, device).
void launch_repack(DType type, const uint8_t* src, uint8_t* dst, int64_t n_in, int64_t rows, cudaStream_t st);
// The tile copy (see DevW::tiles) of a split-layout MXFP4 matrix q / s into dst.
void launch_mx_tiles(const uint8_t* q, const uint8_t* s, uint8_t* dst, int64_t n_in, int64_t rows, cudaStream_t st);
// The same for a split-layout Q8_0 matrix (kQ8TileBytes; cuda_matmul_mma.cu).
void launch_q8_tiles(const uint8_t* q, const uint8_t* s, uint8_t* dst, int64_t n_in, int64_t rows, cudaStream_t st);

// ---- cuda_head.cu ----
// One row of the output head, y = x W^T (+ bias), and with out set the greedy pick of y
// (ArgmaxP's pos / history feedback). Q8_0, n_in % 64 == 0.
// norm (head_norm_supported): x is the residual, normed by every block (block 0 writes xn).
struct HeadP {
  DevW w;
  const float* bias;
  const float* x;
  float* y;
  int32_t* out;
  int32_t* pos;
  int32_t* history;
  const float* norm;  // (n_in) or null
  float* xn;          // (n_in), with norm
  float eps;
};
bool head_supported(const DevW& w, int64_t n_tok);
bool head_norm_supported(const DevW& w);
// parts: 8 * head_parts(w) bytes of scratch; ticket: one unsigned, zeroed once (left zeroed).
int head_parts(const DevW& w);
void launch_head(const HeadP& p, void* parts, unsigned* ticket, cudaStream_t st);

// ---- cuda_attention.cu ----
void launch_kv_store(const KvStoreP& a, cudaStream_t st);
// Partials the launch needs, after a header of ticket counters (one-launch decode): the
// area must be zeroed when first allocated (Scratch does) and outside a graph capture;
// the kernels leave the counters zeroed.
int64_t attention_scratch_floats(const AttentionP& a);
// true where it wrote a.out_q / a.out_d too (one sequence, one decode token).
bool launch_attention(const AttentionP& a, float* partial, cudaStream_t st);
// Batched decode (>= 2 sequences of one token each): one launch for all sequences, their
// parameters in a device table. The launcher builds the table on the host and hands it to
// `put`, which returns where the kernels will read it (device memory, filled before any
// later work on the stream runs), or null: then nothing is launched (a graph update only
// rewrites the tables of recorded launches). `shape` identifies the launch configuration
// the table was built for (grid sizes), so a recorded launch is never fed a table of
// another shape. false (nothing done) when the batch is not of that form.
struct TablePut {
  virtual const void* put(const void* host, size_t bytes, uint64_t shape) = 0;
 protected:
  ~TablePut() = default;
};
bool launch_kv_store_multi(const KvStoreP& a, TablePut& put, cudaStream_t st);
// Batched decode (every sequence one token, pos set): RoPE of q and k, then k and v into
// each sequence's cache, in one launch; false (nothing done) otherwise.
struct RopeStoreP {
  float* q; float* k; const float* v; const int32_t* pos; const float* inv_freq; float mscale;
  int64_t n_head, n_head_kv, head_dim; DType kv_type; std::span<const SeqP> seqs;
};
bool launch_rope_store_multi(const RopeStoreP& a, TablePut& put, cudaStream_t st);
// Its table alone, and whether it applies (one token a sequence, positions on the device).
// The f16 q / k / v call with the RoPE + KV store in its epilogue (RopeEpi) puts the same
// table at the same place of a recording, so a graph update refills it through
// launch_rope_store_multi's put.
bool rope_rows_apply(const RopeStoreP& a);
const void* put_rope_rows(const RopeStoreP& a, TablePut& put);
int64_t attention_multi_scratch_floats(const AttentionP& a);
bool launch_attention_multi(const AttentionP& a, float* partial, TablePut& put, cudaStream_t st);
// Fused q/k/v + bias + RoPE + KV store for one sequence; false if the fused kernel does
// not cover the shapes (the caller then composes basic ops).
bool launch_attn_qkv(const AttnQkvP& a, cudaStream_t st);

// ---- cuda_flash.cu (tensor-core prefill attention: f16 cache, head_dim 64) ----
bool flash_prefill_supported(const AttentionP& a, const SeqP& s);
void launch_flash_prefill(const AttentionP& a, const SeqP& s, cudaStream_t st);

// ---- cuda_q8.cu (int8 activations, dp4a; see cuda_common.cuh) ----
bool q8x_supported(const DevW& w);
void launch_matmul_q8x(const MatmulP& a, cudaStream_t st);
bool moe_q8x_supported(const MoeP& a);
void launch_moe_q8x(const MoeP& a, float* act, cudaStream_t st);
// One-token q8x mat-vec with every weight load of a warp in flight at once, before the
// PDL wait (cuda_q8_pre.cu); false where it does not apply (the streaming kernel).
bool launch_matvec_pre(const MatmulP& a, cudaStream_t st);

// ---- cuda_gemm.cu (device side of the tensor-core paths, cuda_tc.cpp) ----
// Dequantize the matrices [e0, e1) of w (Q8_0 -> f16, MXFP4 -> bf16) into dst: matrix e's
// row r lands at row (e - e0) * dst_stride + dst_off + r (rows of n_in elements); mask
// (n_matrices, may be null): skip matrices whose entry is 0.
// The fused q / k / v GEMM's output split: out[j] (n_tok, width[j]) = the columns of y
// (n_tok, sum of widths) from the sum of the widths before j, + bias[j] (or none). False
// (nothing launched) unless every width is a positive multiple of 4.
struct SplitCols3P {
  float* out[3];
  const float* bias[3];
  int64_t width[3];
};
bool launch_split_cols3(const float* y, int64_t n_tok, const SplitCols3P& p, cudaStream_t st);
void launch_dequant_half(const DevW& w, void* dst, int64_t dst_stride, int64_t dst_off, const int32_t* mask,
                         int64_t e0, int64_t e1, cudaStream_t st);
// dst (n_rows, n) 16-bit (bf16 or f16) = x rows; row i reads x row rows[i] / div (rows
// may be null: row i).
void launch_to_half(const float* x, const int32_t* rows, int div, void* dst, bool bf16, int64_t n_rows, int64_t n,
                    cudaStream_t st);
void launch_bias_add(float* y, const float* bias, int64_t n_rows, int64_t n, cudaStream_t st);  // y[t] += bias
// A grouping of the slots by expert. Packed (group_by_expert): expert e's sorted positions
// are [offsets[e], offsets[e] + counts[e]), n_slots in all. As lists (the batched
// norm_router with MoePrep::cap > 0): expert e owns positions [e cap, e cap + cap), of
// which the first counts[e] are used; eid is not written (the MMA MoE does not read it).
struct MoeGroupBufs {
  int32_t* counts;   // (n_expert) slots per expert
  int32_t* offsets;  // (n_expert + 1) first sorted position of each expert
  int32_t* perm;     // (sorted rows) sorted position -> slot (t * k + j)
  int32_t* inv;      // (n_slots) slot -> sorted position
  int32_t* eid;      // (sorted rows) sorted position -> expert
};
void launch_moe_group(const int32_t* ids, int64_t n_slots, int n_expert, MoeGroupBufs b, cudaStream_t st);
// act (n_rows, n_ff) 16-bit = OAI SwiGLU of h (n_rows, 2 n_ff: gate | up) + biases of eid[row].
void launch_moe_swiglu(const float* h, const int32_t* eid, const float* gb, const float* ub, void* act, bool bf16,
                       int64_t n_rows, int64_t n_ff, float alpha, float limit, cudaStream_t st);
// out (n_tok, n_embd) = sum_j wts[t, j] * (o[inv[t k + j]] + db[ids[t k + j]]).
void launch_moe_combine(const float* o, const int32_t* inv, const int32_t* ids, const float* wts, const float* db,
                        float* out, int64_t n_tok, int64_t k, int64_t n_embd, cudaStream_t st,
                        int32_t* reset = nullptr, int n_reset = 0);
// The MoE block's tail (backend.h MoeBlockArgs): y += the combined output, then with norm
// set xn = rmsnorm(y) * norm; the combine's output is not written.
// xh (or null): xn in f16 too (the next q / k / v call's input, as to_half rounds it).
struct MoeTail { float* y; const float* norm; float* xn; float eps; __half* xh = nullptr; };
// The combine fused with the tail in one launch; false (nothing done) where it does not
// apply (n_embd % 4, alignment, xn aliasing y).
// reset (or null): n_reset ints the combine zeroes once it has waited for its producers
// (the grouped MMA MoE's counts: zero at rest for the next norm_router's atomics).
bool launch_moe_combine_residual(const float* o, const int32_t* inv, const int32_t* ids, const float* wts,
                                 const float* db, int64_t n_tok, int64_t k, int64_t n_embd, const MoeTail& tail,
                                 cudaStream_t st, int32_t* reset = nullptr, int n_reset = 0);

// ---- cuda_moe_mma.cu (int8 MMA from MXFP4, each touched expert read once per call) ----
bool moe_mma_supported(const MoeP& a);
int64_t moe_mma_scratch_bytes(const MoeP& a);
// Grouping, token quantization, gate/up + SwiGLU, down, combine: five launches, no host
// sync (capturable). scratch: moe_mma_scratch_bytes(a) bytes. With tail, the combine
// does the tail (launch_moe_combine_residual) where it can, else the combine writes
// a.out and the tail is the caller's: returns whether the tail is done.
// prepared: the grouping and the quantized tokens are in scratch already (moe_mma_prep,
// written by launch_norm_router_rows).
bool launch_moe_mma(const MoeP& a, void* scratch, cudaStream_t st, const MoeTail* tail = nullptr,
                    bool prepared = false);
// Where launch_moe_mma's scratch keeps the grouping and the quantized tokens. The
// grouping's counts sit at the scratch's start and are zero at rest (every launch_moe_mma's
// combine zeroes them), so a norm_router can count into them with atomics.
struct MoePrep {
  int8_t* xq;  // (2, n_tok, n_embd) quantized tokens, MXFP4 order, then their negation
  float* xd;   // (n_tok, n_embd / 32)
  MoeGroupBufs grp;
  // > 0: the grouping as lists of cap (= n_tok) positions an expert (MoeGroupBufs), which
  // the norm_router's blocks fill without meeting; 0: packed, by the launch's last block.
  int64_t cap = 0;
};
MoePrep moe_mma_prep(const MoeP& a, void* scratch);

// ---- cuda_matmul_mma.cu (int8 / f16 MMA for 2..64 tokens, the weight read once per 64) ----
// x (n_rows, n) -> xq (n_rows, n) int8 + xd (n_rows, n / 32) scales, per 32 as
// quant::quantize_row(Q8_0), in the element order the MMA kernels read for weight `type`
// (kMX: MXFP4 order, kQ8: MMA order; cuda_mma.cuh).
void launch_quantize_rows_mma(int type, const float* x, int64_t n_rows, int64_t n, int8_t* xq, float* xd,
                              cudaStream_t st);
bool matmul_mma_supported(const DevW& w);
// One to three matmuls of one input in one launch (q / k / v): each supported, same
// weight type and n_in, same x and n_tok.
bool matmul_mma_fusable(std::span<const MatmulP> ms);
// h16: Q8_0 weights on the f16 kernel (tensor-core numerics) instead of the int8 one.
// ms: one matmul, or up to three that are matmul_mma_fusable.
int64_t matmul_mma_scratch_bytes(std::span<const MatmulP> ms, bool h16);
// The RoPE + KV store of batched decode done by the f16 q / k / v call's K-split sum
// (rope_store_multi_kernel's arithmetic): rows, put_rope_rows' table (q / k / v of the
// call are ms[0..2]); the cache in f16 or f32.
struct RopeEpi {
  const void* rows = nullptr;
  const float* inv_freq = nullptr;
  float mscale = 1.0f;
  bool f16 = true;
};
// The output head's greedy picks taken by its wgmma call (33..64 rows): out[t] = the
// argmax of row t of y (argmax_row's order), through parts: matmul_mma_pick_parts(m)
// 8-byte entries of scratch.
struct PickEpi {
  void* parts = nullptr;
  int32_t* out = nullptr;
};
// xh: ms[0].x in f16 already (a producer's copy, CudaBackend::shadow_of), or null: the
// f16 kernels' calls then skip their to_half launch. rope: only where
// matmul_mma_rope_fusable(ms, h16, head_dim); pick: only where matmul_mma_pick_fusable.
void launch_matmul_mma(std::span<const MatmulP> ms, bool h16, void* scratch, cudaStream_t st,
                       const __half* xh = nullptr, const RopeEpi* rope = nullptr, const PickEpi* pick = nullptr);
// Whether one matmul runs on the wgmma kernel, whose epilogue can take the greedy picks.
bool matmul_mma_pick_fusable(const MatmulP& m, bool h16);
int64_t matmul_mma_pick_parts(const MatmulP& m);
// Whether a q / k / v call (three matrices, head_dim 64) runs on the f16 256-row kernel
// split over K, whose cluster sum can rotate and store (RopeEpi).
bool matmul_mma_rope_fusable(std::span<const MatmulP> ms, bool h16, int64_t head_dim);

// ---- cuda_sample.cu (backend/sampling.h's draw; one block per row, capturable) ----
void launch_sample(const SampleP& a, cudaStream_t st);

// ---- cuda_moe.cu ----
void launch_moe(const MoeP& a, float* act, cudaStream_t st);  // act: n_tok * k * n_ff floats

}  // namespace brass::backend::cuda
