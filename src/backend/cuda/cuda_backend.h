// The CUDA backend (backend/cuda): every op of backend.h on one CUDA stream, plus the
// fused decode ops (add_rms_norm, attn_qkv, argmax with greedy feedback) and CUDA-graph
// capture. Weights are copied to the device once by prepare_weight (pinned staging) and
// re-laid out for 16-byte loads: Q8_0 and MXFP4 matrices become "split" tensors, all
// quants of all rows first, then all scales (see cuda_common.cuh). Supported weight
// types: F32, F16, BF16, Q8_0, MXFP4. Built only when nvcc is found (BRASS_HAVE_CUDA).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace brass::backend {

// Whether a CUDA device can be used (driver present, >= 1 device). `why` gets the reason
// when not (tests print it with GTEST_SKIP).
bool cuda_available(std::string* why = nullptr);

struct CudaBackendOptions {
  int device = 0;
  // Q8_0 / MXFP4 mat-vecs (dense, fused QKV, MoE) quantize their activations to int8
  // per 32 elements (exactly as quant::quantize_row(Q8_0)) and use dp4a: several times
  // faster; results equal the reference op on the quantized activations. false: f32
  // activations, results equal the reference op to f32 rounding. The environment
  // variable BRASS_CUDA_EXACT=1 forces false.
  bool int8_activations = true;
  // Many-token batches (prefill) on tensor cores: cuBLAS GEMMs on 16-bit operands after
  // on-the-fly dequantization (cuda_tc.h): dense matmuls from min_tok_dense tokens, the
  // MoE from min_slots_per_expert slots per expert on average. Only with
  // int8_activations (the exact mode stays f32); BRASS_CUDA_TC=0 turns it off.
  bool tensor_cores = true;
  // Thresholds measured on the H200 (BENCHMARKS.md): below min_slots_per_expert the MoE
  // runs on the grouped int8 MMA kernels (each touched expert read once per pass of 32
  // tokens); the tensor-core MoE dequantizes every touched expert to 16 bits per call and
  // wins only with many tokens per expert: MoE per layer at 512 tokens (64 per expert)
  // 1.19 ms MMA vs 1.40 cuBLAS, at 1024 2.08 vs ~2.2 (pp1024 16.3k vs 15.6k tok/s), at 2048
  // pp2048 17.5k (MMA) vs 24.5k (cuBLAS). BRASS_CUDA_TC_MOE_MIN overrides.
  int64_t tc_min_tok_dense = 16;
  int64_t tc_min_slots_per_expert = 256;
  // Below the tensor-core threshold, MXFP4 MoE calls of at least this many tokens run on
  // the grouped int8 MMA kernels (cuda_moe_mma.cu: each touched expert read once per call
  // for all its tokens); smaller calls (single-stream decode) on the per-slot dp4a kernels.
  // Only with int8_activations; BRASS_CUDA_MMA_MOE_MIN overrides.
  int64_t mma_moe_min_tok = 2;
  // Dense Q8_0 / MXFP4 matmuls of 2..mma_dense_max_tok tokens run on the int8 MMA kernel
  // (cuda_matmul_mma.cu: the weight read once per 64 tokens, no 16-bit copy); 0 turns it
  // off. Only with int8_activations; BRASS_CUDA_MMA_DENSE_MAX overrides.
  int64_t mma_dense_max_tok = 64;
  // From this many tokens on, Q8_0 matmuls in that range take the f16 MMA kernel instead
  // (weight fragments dequantized to f16 in registers, no per-block scaling of int32
  // results: fewer instructions per weight byte with many tokens per pass; numerics of the
  // tensor-core path). BRASS_CUDA_MMA_H16_MIN overrides.
  int64_t mma_h16_min_tok = 9;
  // A second copy of gpt-oss's MXFP4 expert tensors (2880 x 2880) laid out as the grouped
  // MoE's MMA tiles (cuda_kernels.h, kMxTileBytes): a warp's K step of a matrix is two
  // coalesced 512-byte loads instead of 12 small loads over 32 rows. Batched decode
  // (2..~2,000 tokens a call) +9 to +11% on the H100 (BENCHMARKS.md, session 27), at the
  // cost of the experts' memory twice (~10 GB more for gpt-oss-20b). Single-stream decode
  // and the tensor-core prefill still read the GGUF layout. BRASS_CUDA_MOE_TILES=1 / 0
  // overrides. (The CLI turns it on where the weights and the copy take at most half the
  // card: cli::moe_tiles_fit.) A Q8_0 output head gets a tile copy too (kQ8TileBytes,
  // +651 MB for gpt-oss), read by its 8..64-token calls (batched decode): BENCHMARKS.md,
  // session 31.
  bool moe_tiles = false;
  // Batched decode's f16 dense calls (mma_h16_min_tok..mma_dense_max_tok tokens) read
  // their input as an f16 copy written by the kernel that produced it (the MoE block's
  // combine: q / k / v; the batched attention: wo) instead of converting it in a to_half
  // launch of their own: the same halves, one launch fewer a call. BRASS_CUDA_SHADOW=0
  // turns it off.
  bool activation_copies = true;
  // Batched decode's f16 q / k / v call (9..64 one-token sequences) rotates q and k and
  // stores k and v in the caches in its K-split sum, instead of a RoPE + KV store launch
  // after it: the same bits. BRASS_CUDA_QKV_ROPE=0 turns it off.
  bool fuse_qkv_rope = true;
  // The batched MoE block's norm / router kernel groups the slots by expert as per-expert
  // lists (n_tok places an expert; up to 8192 lists' rows), each token group's last block
  // placing its own, instead of packed by one block once every token has its picks: the
  // same MoE bits. BRASS_CUDA_MOE_LISTS=0 turns it off.
  bool moe_lists = true;
  // The output head's call of 33..64 greedy rows (batched decode's graph) on the wgmma
  // kernel takes each row's argmax in its epilogue, instead of an argmax launch re-reading
  // the logits: the same picks. Off: slower on the H200 (x64 -0.2..0.4%; the argmax launch
  // reads the logits from L2 and overlaps the head's tail). BRASS_CUDA_HEAD_PICK=1 / 0
  // overrides.
  bool fuse_head_pick = false;
};

// Bytes of the MMA tile copy moe_tiles adds for a weight of this type and shape (ggml
// order), 0 for weights that get none; cuda_head_tile_bytes: for the output head.
int64_t cuda_moe_tile_bytes(DType type, const int64_t (&ne)[4]);
int64_t cuda_head_tile_bytes(DType type, const int64_t (&ne)[4]);
// The device's memory in bytes (0 when there is no such device).
int64_t cuda_device_memory(int device);

// A CUDA backend. Fails when no device is usable.
Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& o);
Result<std::unique_ptr<Backend>> make_cuda_backend(int device = 0);

// Upload statistics of a CUDA backend (bytes through prepare_weight and seconds spent).
struct CudaUploadStats {
  int64_t bytes = 0;
  double seconds = 0.0;
};
CudaUploadStats cuda_upload_stats(const Backend& b);
// How often a CUDA backend took its batched-decode fusions so far (tests: that the fused
// form ran): dense calls that read an f16 activation copy (activation_copies), q / k / v
// calls that did the RoPE + KV store (fuse_qkv_rope), MoE blocks grouped as lists
// (moe_lists), head calls that picked their rows (fuse_head_pick), one-token MoE blocks
// whose fused wo read the decode attention's int8 output (attn_q8_read), one-row heads
// that took the final norm (head_norms). Counted as issued (a graph's once).
struct CudaFusionCounts {
  int64_t copies_read = 0;
  int64_t qkv_ropes = 0;
  int64_t moe_lists = 0;
  int64_t head_picks = 0;
  int64_t attn_q8_read = 0;  // wo_router calls that took the attention's int8 output
  int64_t head_norms = 0;
};
CudaFusionCounts cuda_fusion_counts(const Backend& b);
// The key splits of each one-token decode attention launch recorded in a CUDA graph, as
// its next launch runs them (Graph::set_decode_keys re-sizes them); empty for another
// graph or one without such launches (tests).
std::vector<int32_t> cuda_graph_decode_splits(const Graph& g);

}  // namespace brass::backend
