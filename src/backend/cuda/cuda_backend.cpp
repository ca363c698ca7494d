// CudaBackend: the Backend interface on one non-blocking CUDA stream. Owns the device
// buffers it hands out, the prepared (uploaded, re-laid-out) weights, the op scratch
// (attention partials, MoE activations, argmax partials) and the graph capture.
//
// Scratch buffers only grow, and replaced ones are kept until the backend dies: a
// captured graph holds raw pointers, so nothing it may reference is ever freed early.
// Weight upload: the host bytes (usually the GGUF mmap) go through two pinned staging
// buffers (memcpy into one while the DMA drains the other); Q8_0 / MXFP4 matrices land
// in a device staging buffer and a repack kernel writes the split layout.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_scratch.h"
#include "backend/cuda/cuda_tc.h"

namespace brass::backend {
namespace {

using namespace cuda;

DevW dev_weight(const WeightView& w) {
  DevW d;
  d.n_in = w.ne[0];
  d.ne1 = w.ne[1];
  d.rows = w.ne[1] * w.ne[2] * w.ne[3];
  d.q = static_cast<const uint8_t*>(w.data);
  const bool al16 = reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
  switch (w.type) {
    case DType::F32: d.type = kF32; d.vec = d.n_in % 4 == 0 && al16; break;
    case DType::F16: d.type = kF16; d.vec = d.n_in % 8 == 0 && al16; break;
    case DType::BF16: d.type = kBF16; d.vec = d.n_in % 8 == 0 && al16; break;
    case DType::Q8_0:
      d.type = kQ8;
      d.s = d.q + split_scale_offset(d.rows * d.n_in);
      d.vec = true;
      break;
    case DType::MXFP4:
      d.type = kMX;
      d.s = d.q + split_scale_offset(d.rows * d.n_in / 2);
      d.vec = true;
      break;
    default:
      BRASS_CHECK_MSG(false, "cuda backend: weight type {} is not supported", dtype_name(w.type));
  }
  return d;
}

std::vector<SeqP> seq_params(std::span<const AttnSeq> seqs) {
  std::vector<SeqP> out(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i)
    out[i] = SeqP{seqs[i].tok0,     seqs[i].n_tok, seqs[i].pos0,   seqs[i].k,         seqs[i].v,
                  seqs[i].capacity, seqs[i].ring,  seqs[i].blocks, seqs[i].block_size};
  return out;
}

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(void* p, size_t n) : p_(p), n_(n) {}
  ~CudaBuffer() override { cudaFree(p_); }
  void* data() override { return p_; }
  size_t size() const override { return n_; }

 private:
  void* p_;
  size_t n_;
};

// The parameter tables the multi-sequence launches of one recorded graph read: device
// chunks owned by the graph, each with a pinned host mirror, and every table's place in
// recording order. Graph::update rebuilds the tables into the mirrors (same order, same
// sizes and launch shapes) and uploads each chunk once, ahead of the next launch.
struct GraphTables {
  struct Chunk {
    void* dev = nullptr;
    void* host = nullptr;
    size_t cap = 0, used = 0;
  };
  struct Slot {
    size_t chunk, off, bytes;
    uint64_t shape;
  };
  std::vector<Chunk> chunks;
  std::vector<Slot> slots;
  // False once the recording holds a launch with per-sequence values baked into its
  // arguments (the single-sequence kernels): such a graph cannot be updated.
  bool updatable = true;
  cudaEvent_t uploaded = nullptr;  // the last upload from the mirrors
  std::vector<DecodeNode> decode_nodes;  // the one-token decode attention launches

  GraphTables() { BRASS_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming)); }
  GraphTables(const GraphTables&) = delete;
  GraphTables& operator=(const GraphTables&) = delete;
  ~GraphTables() {
    for (Chunk& c : chunks) {
      cudaFree(c.dev);
      cudaFreeHost(c.host);
    }
    cudaEventDestroy(uploaded);
  }
  // Recording: a new table (16-byte aligned); returns its device address (filled by upload()).
  const void* append(const void* host, size_t bytes, uint64_t shape) {
    const size_t need = (bytes + 15) & ~size_t{15};
    if (chunks.empty() || chunks.back().used + need > chunks.back().cap) {
      Chunk c;
      c.cap = std::max<size_t>(need, size_t{256} << 10);
      BRASS_CUDA_CHECK(cudaMalloc(&c.dev, c.cap));
      BRASS_CUDA_CHECK(cudaHostAlloc(&c.host, c.cap, cudaHostAllocDefault));
      chunks.push_back(c);
    }
    Chunk& c = chunks.back();
    std::memcpy(static_cast<uint8_t*>(c.host) + c.used, host, bytes);
    slots.push_back({chunks.size() - 1, c.used, bytes, shape});
    const void* d = static_cast<uint8_t*>(c.dev) + c.used;
    c.used += need;
    return d;
  }
  void upload(cudaStream_t st) {
    for (const Chunk& c : chunks)
      BRASS_CUDA_CHECK(cudaMemcpyAsync(c.dev, c.host, c.used, cudaMemcpyHostToDevice, st));
    BRASS_CUDA_CHECK(cudaEventRecord(uploaded, st));
  }
};

using GraphUpdater = std::function<Status(GraphTables&, const std::function<void()>&)>;

class CudaGraph final : public Graph {
 public:
  // graph: the recording exec_ was instantiated from, kept while nodes of it may be re-set.
  CudaGraph(cudaGraph_t graph, cudaGraphExec_t e, cudaStream_t st, std::unique_ptr<GraphTables> tables,
            GraphUpdater updater)
      : graph_(graph), exec_(e), st_(st), tables_(std::move(tables)), updater_(std::move(updater)) {}
  ~CudaGraph() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  Status launch() override {
    const cudaError_t e = cudaGraphLaunch(exec_, st_);
    if (e != cudaSuccess) return Status::errorf("cuda: graph launch failed: {}", cudaGetErrorString(e));
    return Status::ok();
  }
  Status update(const std::function<void()>& record) override { return updater_(*tables_, record); }
  std::vector<int32_t> decode_splits() const {
    std::vector<int32_t> r;
    for (const DecodeNode& n : tables_->decode_nodes) r.push_back(n.splits);
    return r;
  }
  // The decode attention nodes' splits for a power-of-two bound on the keys (so they are
  // re-set at most once per doubling of the depth, not every split's worth of keys).
  Status set_decode_keys(int64_t n_keys) override {
    const int64_t bound = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(n_keys, 1))));
    if (bound == keys_bound_ || tables_->decode_nodes.empty()) return Status::ok();
    for (DecodeNode& n : tables_->decode_nodes)
      if (!retarget_decode_node(exec_, n, bound))
        return Status::error("cuda: re-setting a decode attention node's splits failed");
    keys_bound_ = bound;
    return Status::ok();
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t st_;
  std::unique_ptr<GraphTables> tables_;  // after exec_ in destruction order: the graph goes first
  GraphUpdater updater_;
  int64_t keys_bound_ = 0;  // set_decode_keys' last bound (0: the splits as recorded)
};

// Which of batched decode's fusions a backend takes (CudaBackendOptions' fields).
struct Fusions {
  bool copies, qkv_rope, moe_lists, head_pick;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, bool q8x, const TcOptions* tc, int64_t mma_moe_min_tok, int64_t mma_dense_max_tok,
              int64_t mma_h16_min_tok, bool moe_tiles, const Fusions& fusions)
      : device_(device),
        q8x_(q8x),
        moe_tiles_(moe_tiles),
        on_(fusions),
        mma_moe_min_tok_(mma_moe_min_tok),
        mma_dense_max_tok_(mma_dense_max_tok),
        mma_h16_min_tok_(mma_h16_min_tok) {
    BRASS_CUDA_CHECK(cudaSetDevice(device));
    BRASS_CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
    for (Scratch* sc : {&stage_dev_, &attn_, &act_, &argmax_partial_, &argmax_counter_, &head_parts_, &head_ticket_,
                        &pick_parts_, &kvtab_, &attntab_, &mma_, &mma_dense_, &block_, &block_counter_, &nr_counter_,
                        &shadow_buf_, &attn_q8_})
      sc->stream = st_;
    cudaDeviceProp prop{};
    BRASS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    name_ = std::string("cuda:") + prop.name + (q8x_ ? "" : " (exact)") + (moe_tiles_ ? " (moe tiles)" : "");
    set_pdl(knob_on("BRASS_CUDA_PDL"));  // 0: plain launches (no overlap)
    if (tc) tc_ = std::make_unique<TensorCores>(st_, *tc);
  }
  ~CudaBackend() override {
    tc_.reset();  // before the stream goes
    cudaStreamSynchronize(st_);
    for (PendingDownload& d : downloads_) {
      cudaFreeHost(d.pinned);
      cudaEventDestroy(d.done);
    }
    for (void* p : weights_) cudaFree(p);
    for (void* p : pinned_) cudaFreeHost(p);
    cudaStreamDestroy(st_);
  }

  std::string name() const override { return name_; }
  bool host_memory() const override { return false; }
  bool supports_weight_type(DType t) const override {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::MXFP4;
  }

  Result<std::unique_ptr<Buffer>> alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) return Status::errorf("cuda backend: cannot allocate {} bytes: {}", bytes, cudaGetErrorString(e));
    return std::unique_ptr<Buffer>(std::make_unique<CudaBuffer>(p, bytes));
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    shadow_ = {};  // (it may overwrite a shadowed activation)
    attn_q8_for_ = {};
    if (bytes) BRASS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st_));
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    BRASS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st_));
    BRASS_CUDA_CHECK(cudaStreamSynchronize(st_));
  }
  void synchronize() override { BRASS_CUDA_CHECK(cudaStreamSynchronize(st_)); }
  void copy(void* dst, const void* src, size_t bytes) override {
    shadow_ = {};
    attn_q8_for_ = {};
    if (bytes) BRASS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st_));
  }
  // Into a pinned staging slot (a copy to pageable memory would wait for the stream), then
  // to host_dst in await().
  uint64_t download_async(void* host_dst, const void* src, size_t bytes) override {
    PendingDownload* slot = nullptr;
    for (PendingDownload& d : downloads_)
      if (d.ticket == 0 && d.cap >= bytes) slot = &d;
    if (!slot) {
      downloads_.emplace_back();
      slot = &downloads_.back();
      slot->cap = std::max<size_t>(bytes, 4096);
      BRASS_CUDA_CHECK(cudaHostAlloc(&slot->pinned, slot->cap, cudaHostAllocDefault));
      BRASS_CUDA_CHECK(cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming));
    }
    if (bytes) BRASS_CUDA_CHECK(cudaMemcpyAsync(slot->pinned, src, bytes, cudaMemcpyDeviceToHost, st_));
    BRASS_CUDA_CHECK(cudaEventRecord(slot->done, st_));
    slot->dst = host_dst;
    slot->bytes = bytes;
    slot->ticket = ++download_tickets_;
    return slot->ticket;
  }
  void await(uint64_t ticket) override {
    for (PendingDownload& d : downloads_) {
      if (d.ticket == 0 || d.ticket > ticket) continue;
      BRASS_CUDA_CHECK(cudaEventSynchronize(d.done));
      std::memcpy(d.dst, d.pinned, d.bytes);
      d.ticket = 0;
    }
  }
  MemoryInfo memory_info() const override {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
      cudaGetLastError();
      return {};
    }
    return {static_cast<int64_t>(free_b), static_cast<int64_t>(total_b)};
  }

  Result<WeightView> prepare_weight(const WeightView& host) override { return prepare(host, false); }
  Result<WeightView> prepare_output_head(const WeightView& host) override { return prepare(host, true); }
  // head: the output head (with moe_tiles, a Q8_0 head gets its tile copy too).
  Result<WeightView> prepare(const WeightView& host, bool head) {
    if (!supports_weight_type(host.type))
      return Status::errorf("cuda backend: weight type {} is not supported (f32, f16, bf16, q8_0, mxfp4)",
                            dtype_name(host.type));
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t rows = host.ne[1] * host.ne[2] * host.ne[3];
    const int64_t bytes = host.row_bytes() * rows;
    const bool split = host.type == DType::Q8_0 || host.type == DType::MXFP4;
    int64_t dev_bytes = bytes;
    if (split) {
      const int64_t qs = host.type == DType::Q8_0 ? rows * host.ne[0] : rows * host.ne[0] / 2;
      dev_bytes = split_scale_offset(qs) + rows * (host.ne[0] / 32) * (host.type == DType::Q8_0 ? 2 : 1);
    }
    // moe_tiles: the tile copy after the split layout, in the same allocation.
    const int64_t tile_bytes =
        !moe_tiles_ ? 0 : head ? cuda_head_tile_bytes(host.type, host.ne) : cuda_moe_tile_bytes(host.type, host.ne);
    const int64_t tiles_at = split_scale_offset(dev_bytes);
    if (tile_bytes) dev_bytes = tiles_at + tile_bytes;
    void* dst = nullptr;
    cudaError_t e = cudaMalloc(&dst, std::max<int64_t>(dev_bytes, 1));
    if (e != cudaSuccess)
      return Status::errorf("cuda backend: cannot allocate {} bytes for a weight: {}", dev_bytes, cudaGetErrorString(e));
    weights_.push_back(dst);
    uint8_t* land = static_cast<uint8_t*>(dst);
    if (split) land = static_cast<uint8_t*>(stage_dev_.get(static_cast<size_t>(bytes)));
    BRASS_TRY(staged_copy(land, static_cast<const uint8_t*>(host.data), bytes));
    if (split) launch_repack(host.type, land, static_cast<uint8_t*>(dst), host.ne[0], rows, st_);
    if (tile_bytes) {
      uint8_t* q = static_cast<uint8_t*>(dst);
      if (head)
        launch_q8_tiles(q, q + split_scale_offset(rows * host.ne[0]), q + tiles_at, host.ne[0], rows, st_);
      else
        launch_mx_tiles(q, q + split_scale_offset(rows * host.ne[0] / 2), q + tiles_at, host.ne[0], rows, st_);
      tiles_[dst] = q + tiles_at;
    }
    e = cudaStreamSynchronize(st_);
    if (e != cudaSuccess) return Status::errorf("cuda backend: weight upload failed: {}", cudaGetErrorString(e));
    upload_bytes_ += bytes;
    upload_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    WeightView out = host;
    out.data = dst;
    return out;
  }

  void embed(const EmbedArgs& a) override {
    if (!updating_) launch_embed({dev_weight(a.table), a.tokens, a.n_tok, a.out}, st_);
  }
  void rms_norm(const RmsNormArgs& a) override {
    if (updating_) return;
    launch_rms_norm({const_cast<float*>(a.x), nullptr, a.weight, a.out, a.n_rows, a.n, a.eps}, false, st_);
  }
  MatmulP matmul_params(const MatmulArgs& a) const {
    MatmulP p{dev_weight(a.w), a.bias, a.x, a.y, a.n_tok};
    if (!tiles_.empty())
      if (const auto it = tiles_.find(a.w.data); it != tiles_.end()) p.w.tiles = it->second;
    return p;
  }
  // The MMA call of one matrix (use_dense_mma), with the output head's picks where set.
  void launch_dense_mma(const MatmulP& p, const PickEpi* pick = nullptr) {
    const bool h16 = p.n_tok >= mma_h16_min_tok_;
    const std::span<const MatmulP> one(&p, 1);
    launch_matmul_mma(one, h16, mma_dense_.get(static_cast<size_t>(matmul_mma_scratch_bytes(one, h16))), st_,
                      h16 ? shadow_of(p.x) : nullptr, nullptr, pick);
  }
  void matmul(const MatmulArgs& a) override {
    if (updating_) return;
    const MatmulP p = matmul_params(a);
    if (q8x_ && use_dense_mma(p)) {
      launch_dense_mma(p);
      return;
    }
    if (tc_ && tc_->matmul(p)) return;
    if (q8x_ && q8x_supported(p.w))
      launch_matmul_q8x(p, st_);
    else
      launch_matmul(p, st_);
  }
  void rope(const RopeArgs& a) override {
    if (updating_) return;
    launch_rope({a.x, a.pos, a.inv_freq, a.mscale, a.n_tok, a.n_heads, a.head_dim}, st_);
  }
  void kv_store(const KvStoreArgs& a) override {
    const auto seqs = seq_params(a.seqs);
    const KvStoreP p{a.k, a.v, a.kv_type, a.n_head_kv, a.head_dim, seqs, a.pos};
    TableTo put(*this, kvtab_);
    if (launch_kv_store_multi(p, put, st_)) return;
    if (by_value_launch()) return;
    launch_kv_store(p, st_);
  }
  // The int8 MMA matmul (weight read once per 64 tokens, K split over blocks for the
  // small projections) for 2..mma_dense_max_tok tokens, every matrix size: it reads the
  // quantized weight once where the cuBLAS path first writes and re-reads a 16-bit copy
  // of it per call (measured at 64 tokens on the H200, BENCHMARKS.md).
  bool use_dense_mma(const MatmulP& p) const {
    return p.n_tok >= mma_dense_min_tok_ && p.n_tok <= mma_dense_max_tok_ && matmul_mma_supported(p.w);
  }
  void attention(const AttentionArgs& a) override {
    attn_q8_for_ = {};
    const auto all = seq_params(a.seqs);
    const AttentionP whole{a.q, a.sinks, a.out, a.kv_type, a.n_head, a.n_head_kv, a.head_dim, a.window, a.scale, all,
                           a.pos};
    // Long chunks (prefill) on tensor cores; the rest (decode rows) on the split kernel.
    std::vector<SeqP> rest;
    for (const SeqP& s : all) {
      if (tc_ && flash_prefill_supported(whole, s)) {
        if (!by_value_launch()) launch_flash_prefill(whole, s, st_);
      } else {
        rest.push_back(s);
      }
    }
    if (rest.empty()) return;
    AttentionP p{a.q, a.sinks, a.out, a.kv_type, a.n_head, a.n_head_kv, a.head_dim, a.window, a.scale, rest, a.pos};
    if (rest.size() > 1) {  // batched decode: one launch for every sequence
      const int64_t n_tok = static_cast<int64_t>(rest.size());
      // (Also when a graph update rebuilds the table: the copy's address is in it.)
      if (shadows_for(n_tok)) p.out_h = shadow_area(n_tok * a.n_head * a.head_dim);
      float* mp = static_cast<float*>(attn_.get(attention_multi_scratch_floats(p) * sizeof(float)));
      TableTo put(*this, attntab_);
      if (launch_attention_multi(p, mp, put, st_)) {
        if (p.out_h && !updating_) set_shadow(a.out, p.out_h);
        return;
      }
      p.out_h = nullptr;  // (no copy on the per-sequence path below)
    }
    if (by_value_launch()) return;
    float* partial = static_cast<float*>(attn_.get(attention_scratch_floats(p) * sizeof(float)));
    // One decode token in int8 mode: the attention also writes its output as wo_router's
    // int8 input (moe_block takes it when it fuses wo); BRASS_CUDA_ATTN_Q8=0 turns it off.
    static const bool q8_on = knob_on("BRASS_CUDA_ATTN_Q8");
    const int64_t n_out = a.n_head * a.head_dim;
    if (q8_on && q8x_ && rest.size() == 1 && n_out % 128 == 0) {
      p.out_q = static_cast<int8_t*>(attn_q8_.get(static_cast<size_t>(n_out + n_out / 8)));
      p.out_d = reinterpret_cast<float*>(p.out_q + n_out);
    }
    // While capturing, the one-token decode launches' nodes (their splits follow the depth
    // on replay: set_decode_keys; BRASS_CUDA_ATTN_DEPTH_SPLITS=0: as recorded, a knob).
    static const bool depth_splits = knob_on("BRASS_CUDA_ATTN_DEPTH_SPLITS");
    if (recording_ && depth_splits) p.graph_nodes = &recording_->decode_nodes;
    if (launch_attention(p, partial, st_) && p.out_q) attn_q8_for_ = {a.out, p.out_q, g_launches};
  }
  void router(const RouterArgs& a) override {
    if (updating_) return;
    launch_router({a.logits, a.ids, a.weights, a.n_tok, a.n_expert, a.k}, st_);
  }
  MoeP moe_params(const MoeArgs& a) const {
    MoeP p{a.x, a.ids, a.weights, dev_weight(a.gate), dev_weight(a.up), dev_weight(a.down), a.gate_bias,
           a.up_bias, a.down_bias, a.out, a.n_tok, a.k, a.alpha, a.limit, on_.moe_lists};
    if (!tiles_.empty()) {
      for (auto [w, d] : {std::pair{a.gate.data, &p.gate}, std::pair{a.up.data, &p.up}, std::pair{a.down.data, &p.down}})
        if (const auto it = tiles_.find(w); it != tiles_.end()) d->tiles = it->second;
    }
    return p;
  }
  void moe(const MoeArgs& a) override { moe_then(a, nullptr); }
  // Whether moe() takes the grouped MMA path (the cuBLAS path first where it applies, in
  // eager runs: it waits for the group sizes, so it is not capturable).
  bool moe_takes_mma(const MoeP& p) const {
    if (tc_ && !recording_ && tc_->moe_applies(p)) return false;
    return q8x_ && p.n_tok >= mma_moe_min_tok_ && moe_mma_supported(p);
  }
  void* moe_mma_scratch(const MoeP& p) { return mma_.get(static_cast<size_t>(moe_mma_scratch_bytes(p))); }
  // moe(), and the MoE block's tail where the grouped MMA path can fuse it into its
  // combine: returns whether the tail is done (else the caller composes it). prepared:
  // the MMA path's grouping and quantized tokens are in its scratch already.
  bool moe_then(const MoeArgs& a, const MoeTail* tail, bool prepared = false) {
    if (updating_) return true;
    const MoeP p = moe_params(a);
    if (moe_takes_mma(p)) return launch_moe_mma(p, moe_mma_scratch(p), st_, tail, prepared);
    float* act = static_cast<float*>(act_.get(a.n_tok * a.k * a.gate.ne[1] * sizeof(float)));
    if (tc_ && !recording_ && tc_->moe(p)) return false;
    if (q8x_ && moe_q8x_supported(p))
      launch_moe_q8x(p, act, st_);
    else
      launch_moe(p, act, st_);
    return false;
  }
  // One decode token in int8 mode: 3 kernels (cuda_q8_pre.cu); 2..256 tokens: add + norm +
  // router + top-k in one kernel (cuda_norm_router.cu; it also groups and quantizes for
  // the grouped MMA MoE), then the MoE, whose combine does the block's tail (residual add,
  // next norm); otherwise the ops. (BRASS_CUDA_MOE_BLOCK=0 / BRASS_CUDA_NORM_ROUTER=0 /
  // BRASS_CUDA_MOE_PREP=0 / BRASS_CUDA_MOE_TAIL=0 compose always: measurement knobs.)
  // A projection in front (a.proj: the attention's wo) goes into the first of the one-token
  // kernels (cuda_wo_router.cu) where it fits, else it runs as a matmul first.
  void moe_block(const MoeBlockArgs& in) override {
    if (updating_) return;
    static const bool on = knob_on("BRASS_CUDA_MOE_BLOCK");
    static const bool nr_on = knob_on("BRASS_CUDA_NORM_ROUTER");
    static const bool tail_on = knob_on("BRASS_CUDA_MOE_TAIL");
    static const bool prep_on = knob_on("BRASS_CUDA_MOE_PREP");
    MoeBlockArgs a = in;
    const MoeBlockP p{a.y, a.add, a.norm, a.eps, const_cast<float*>(a.moe.x), dev_weight(a.router),
                      a.router_bias, a.logits, a.n_expert, moe_params(a.moe), a.accumulate};
    const bool one = q8x_ && on && a.moe.n_tok == 1 && !a.next_norm;
    auto one_token = [&](const MoeBlockP& b) {
      return launch_moe_block(b, block_.get(static_cast<size_t>(moe_block_scratch_bytes(b))),
                              block_counter_.as<unsigned>(static_cast<size_t>(moe_block_counters(b))), st_);
    };
    if (one && a.proj.x && a.proj.n_tok == 1 && a.proj.y == a.add) {
      MoeBlockP f = p;
      f.wo = dev_weight(a.proj.w);
      f.wo_bias = a.proj.bias;
      f.wo_x = a.proj.x;
      if (wo_router_takes_xq(f)) f.wo_xq = attn_q8_for_.of(a.proj.x);
      if (one_token(f)) {
        if (f.wo_xq) ++fusions_.attn_q8_read;
        return;
      }
    }
    if (a.proj.x) {
      matmul(a.proj);
      a.proj = {};
    }
    if (one && one_token(p)) return;
    if (nr_on && a.moe.n_tok >= 2) {
      const bool prepared = prep_on && moe_takes_mma(p.moe);
      const MoePrep prep = prepared ? moe_mma_prep(p.moe, moe_mma_scratch(p.moe)) : MoePrep{};
      if (launch_norm_router_rows(p, nr_counter_.as<unsigned>(static_cast<size_t>(norm_router_rows_counters(p))),
                                  st_, prepared ? &prep : nullptr)) {
        if (prep.cap) ++fusions_.moe_lists;
        MoeTail tail{a.y, a.next_norm, a.next_xn, a.eps};
        if (a.next_norm && shadows_for(a.moe.n_tok)) tail.xh = shadow_area(a.moe.n_tok * a.router.ne[0]);
        const bool fused = a.next_norm || a.accumulate;
        if (!moe_then(a.moe, fused && tail_on ? &tail : nullptr, prepared))
          moe_block_tail(a);
        else if (tail.xh)
          set_shadow(a.next_xn, tail.xh);
        return;
      }
    }
    Backend::moe_block(a);
  }
  void add(const AddArgs& a) override {
    if (!updating_) launch_add({a.y, a.x, a.n}, st_);
  }
  void gather_rows(const GatherRowsArgs& a) override {
    if (!updating_) launch_gather_rows({a.x, a.rows, a.out, a.n_rows, a.n}, st_);
  }
  void add_rms_norm(const AddRmsNormArgs& a) override {
    if (updating_) return;
    launch_rms_norm({a.y, a.x, a.weight, a.out, a.n_rows, a.n, a.eps}, true, st_);
  }
  // One token of one sequence in int8 mode: q/k/v with the norm folded in, weights
  // loaded before the PDL wait (cuda_q8_pre.cu). The K/V storage is in the launch
  // arguments: the graph is not updatable (as for the fused kernel below).
  bool qkv_pre(const AttnQkvArgs& a) {
    if (!q8x_ || a.n_tok != 1 || a.seqs.size() != 1 || a.pos == nullptr || !a.inv_freq) return false;
    const auto seqs = seq_params(a.seqs);
    const SeqP& s = seqs[0];
    if (s.tok0 != 0 || s.n_tok != 1) return false;
    const QkvPreP p{dev_weight(a.wq), dev_weight(a.wk), dev_weight(a.wv), a.bq, a.bk, a.bv, a.x, a.norm, a.eps, a.xn,
                    a.q, a.k, a.v, a.pos, a.inv_freq, s.k, s.v, kv_addr(s), a.mscale,
                    static_cast<int32_t>(a.n_head), static_cast<int32_t>(a.n_head_kv),
                    static_cast<int32_t>(a.head_dim)};
    if (!launch_qkv_pre(p, a.kv_type, st_)) return false;
    if (recording_) recording_->updatable = false;
    return true;
  }
  void attn_qkv(const AttnQkvArgs& in) override {
    if (!updating_ && qkv_pre(in)) return;
    if (in.norm) {  // the input is the residual: norm it (fused above for one token)
      if (!updating_)
        launch_rms_norm({const_cast<float*>(in.x), nullptr, in.norm, in.xn, in.n_tok, in.wq.ne[0], in.eps}, false, st_);
      AttnQkvArgs a = in;
      a.x = in.xn;
      a.norm = nullptr;
      attn_qkv(a);
      return;
    }
    const AttnQkvArgs& a = in;
    // The fused kernel serves one sequence with its KV storage in the launch arguments;
    // a graph update checks the composed form (whose KV store fails it unless batched).
    // Several tokens: q / k / v + rope + store. The three projections in one launch where
    // they take the MMA kernels (2..64 tokens) or one GEMM where they take the tensor-core
    // path (prefill); otherwise three matmuls.
    if (!updating_ && a.n_tok >= 2) {
      const MatmulP m[3] = {{dev_weight(a.wq), a.bq, a.x, a.q, a.n_tok},
                            {dev_weight(a.wk), a.bk, a.x, a.k, a.n_tok},
                            {dev_weight(a.wv), a.bv, a.x, a.v, a.n_tok}};
      const bool mma = q8x_ && use_dense_mma(m[0]) && use_dense_mma(m[1]) && use_dense_mma(m[2]);
      if (mma && matmul_mma_fusable(m)) {
        const bool h16 = a.n_tok >= mma_h16_min_tok_;
        void* scratch = mma_dense_.get(static_cast<size_t>(matmul_mma_scratch_bytes(m, h16)));
        const __half* xh = h16 ? shadow_of(a.x) : nullptr;
        const auto seqs = seq_params(a.seqs);
        if (qkv_rope_fusable(a, seqs, m, h16)) {  // the RoPE + KV store in the call's split sum
          TableTo put(*this, kvtab_);
          const RopeEpi re{put_rope_rows(rope_store_p(a, seqs), put), a.inv_freq, a.mscale, a.kv_type == DType::F16};
          launch_matmul_mma(m, h16, scratch, st_, xh, &re);
          ++fusions_.qkv_ropes;
          return;
        }
        launch_matmul_mma(m, h16, scratch, st_, xh);
        rope_store(a, seqs);
        return;
      }
      if (!mma && tc_ && a.n_tok >= tc_->options().min_tok_dense && tc_->qkv(m)) {
        attn_qkv_rope_store(a);
        return;
      }
    }
    if (updating_ || (tc_ && a.n_tok >= tc_->options().min_tok_dense) ||
        (q8x_ && a.n_tok >= 2 && use_dense_mma({dev_weight(a.wq), nullptr, nullptr, nullptr, a.n_tok}))) {
      Backend::attn_qkv(a);
      return;
    }
    const auto seqs = seq_params(a.seqs);
    const bool fused = supports_weight_type(a.wq.type) && supports_weight_type(a.wk.type) &&
                       supports_weight_type(a.wv.type) &&
                       launch_attn_qkv({a.x, dev_weight(a.wq), dev_weight(a.wk), dev_weight(a.wv), a.bq, a.bk, a.bv,
                                        a.q, a.k, a.v, a.pos, a.inv_freq, a.mscale, a.n_tok, a.n_head, a.n_head_kv,
                                        a.head_dim, a.kv_type, seqs, q8x_},
                                       st_);
    if (!fused) Backend::attn_qkv(a);
    else if (recording_) recording_->updatable = false;
  }
  // attn_qkv's tail: batched decode (one token per sequence) in one launch
  // (rope_store_multi_kernel); otherwise two ropes and the KV store. BRASS_CUDA_ROPE_STORE=0
  // composes always (measurement knob).
  // (Virtual: the composed attn_qkv ends here too, so a graph update puts the same tables
  // as the recording did.)
  void attn_qkv_rope_store(const AttnQkvArgs& a) override { rope_store(a, seq_params(a.seqs)); }
  // (seqs: seq_params(a.seqs), made once by the caller)
  void rope_store(const AttnQkvArgs& a, std::span<const SeqP> seqs) {
    if (rope_store_on()) {
      TableTo put(*this, kvtab_);
      if (launch_rope_store_multi(rope_store_p(a, seqs), put, st_)) return;
    }
    Backend::attn_qkv_rope_store(a);
  }
  static bool rope_store_on() {
    static const bool on = knob_on("BRASS_CUDA_ROPE_STORE");
    return on;
  }
  static RopeStoreP rope_store_p(const AttnQkvArgs& a, std::span<const SeqP> seqs) {
    return {a.q, a.k, a.v, a.pos, a.inv_freq, a.mscale, a.n_head, a.n_head_kv, a.head_dim, a.kv_type, seqs};
  }
  // Whether the batched q / k / v call m does the RoPE + KV store in its split sum
  // (RopeEpi): where attn_qkv_rope_store would take rope_store_multi_kernel (whose table
  // put a graph update repeats: one token a sequence), the sequences in token order (the
  // call's token t is the table's row t), an f16 / f32 cache, and the call on the split
  // f16 kernel (CudaBackendOptions::fuse_qkv_rope).
  bool qkv_rope_fusable(const AttnQkvArgs& a, std::span<const SeqP> seqs, std::span<const MatmulP> m,
                        bool h16) const {
    if (!on_.qkv_rope || !rope_store_on() || (a.kv_type != DType::F16 && a.kv_type != DType::F32)) return false;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].tok0 != static_cast<int64_t>(i)) return false;
    return rope_rows_apply(rope_store_p(a, seqs)) && matmul_mma_rope_fusable(m, h16, a.head_dim);
  }
  void argmax(const ArgmaxArgs& a) override {
    if (updating_) return;
    void* partial = argmax_partial_.get(a.n_rows * kArgmaxBlocks * 8);
    unsigned* counter = static_cast<unsigned*>(argmax_counter_.get(a.n_rows * sizeof(unsigned)));
    launch_argmax({a.x, a.out, a.n_rows, a.n, a.pos, a.history}, partial, counter, st_);
  }
  // Several rows' greedy picks (no feedback) taken by the head's wgmma call's epilogue
  // (CudaBackendOptions::fuse_head_pick): the logits are written as by matmul().
  bool head_rows_pick(const OutputHeadArgs& a) {
    if (!on_.head_pick || !q8x_ || !a.pick.out || a.pick.pos || a.mm.n_tok < 2) return false;
    const MatmulP p = matmul_params(a.mm);
    if (!use_dense_mma(p) || !matmul_mma_pick_fusable(p, p.n_tok >= mma_h16_min_tok_)) return false;
    const PickEpi pick{pick_parts_.get(static_cast<size_t>(matmul_mma_pick_parts(p)) * 8), a.pick.out};
    launch_dense_mma(p, &pick);
    ++fusions_.head_picks;
    return true;
  }
  // One row of a Q8_0 head: cuda_head.cu (the pick in the same launch); several rows with
  // their picks: head_rows_pick; else composed.
  // The final norm (a.norm) goes into the one-row head's blocks where it fits, else first
  // as its own launch.
  void output_head(const OutputHeadArgs& in) override {
    if (updating_) return;
    const DevW w = dev_weight(in.mm.w);
    const bool one = q8x_ && head_supported(w, in.mm.n_tok);
    const OutputHeadArgs a = one && head_norm_supported(w) ? in : head_normed_first(in);
    if (head_rows_pick(a)) return;
    if (!one) {
      Backend::output_head(a);
      return;
    }
    const bool pick = a.pick.out != nullptr;
    void* parts = pick ? head_parts_.get(static_cast<size_t>(head_parts(w)) * 8) : nullptr;
    unsigned* ticket = pick ? head_ticket_.as<unsigned>(1) : nullptr;
    launch_head({w, a.mm.bias, a.mm.x, a.mm.y, a.pick.out, a.pick.pos, a.pick.history, a.norm, a.xn, a.eps}, parts,
                ticket, st_);
    if (a.norm) ++fusions_.head_norms;
  }
  void sample(const SampleArgs& a) override {
    if (!updating_) launch_sample({a.x, a.params, a.out, a.n_rows, a.n}, st_);
  }

  Result<std::unique_ptr<Graph>> capture(const std::function<void()>& record) override {
    auto tables = std::make_unique<GraphTables>();
    cudaError_t e = cudaStreamBeginCapture(st_, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) return Status::errorf("cuda: begin capture: {}", cudaGetErrorString(e));
    recording_ = tables.get();
    record();
    recording_ = nullptr;
    cudaGraph_t g = nullptr;
    e = cudaStreamEndCapture(st_, &g);
    if (e != cudaSuccess) return Status::errorf("cuda: end capture: {}", cudaGetErrorString(e));
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, g, 0);
    if (e != cudaSuccess) {
      cudaGraphDestroy(g);
      return Status::errorf("cuda: graph instantiate: {}", cudaGetErrorString(e));
    }
    tables->upload(st_);
    GraphUpdater up = [this](GraphTables& t, const std::function<void()>& rec) { return update_tables(t, rec); };
    return std::unique_ptr<Graph>(std::make_unique<CudaGraph>(g, exec, st_, std::move(tables), std::move(up)));
  }

  CudaUploadStats stats() const { return {upload_bytes_, upload_seconds_}; }
  CudaFusionCounts fusion_counts() const { return fusions_; }

 private:
  // Where a multi-sequence launch's table goes: eagerly into `eager` scratch (copied on
  // the stream); while recording a graph into the graph's tables; during a graph update
  // into the recorded table's mirror slot (nothing is launched).
  struct TableTo final : TablePut {
    CudaBackend& b;
    Scratch& eager;
    TableTo(CudaBackend& be, Scratch& s) : b(be), eager(s) {}
    const void* put(const void* host, size_t bytes, uint64_t shape) override {
      if (b.updating_) return b.update_slot(host, bytes, shape);
      if (b.recording_) return b.recording_->append(host, bytes, shape);
      void* d = eager.get(bytes);
      BRASS_CUDA_CHECK(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, b.st_));
      return d;
    }
  };
  const void* update_slot(const void* host, size_t bytes, uint64_t shape) {
    GraphTables& t = *updating_;
    if (update_next_ >= t.slots.size() || t.slots[update_next_].bytes != bytes || t.slots[update_next_].shape != shape) {
      update_ok_ = false;
      return nullptr;
    }
    const GraphTables::Slot& sl = t.slots[update_next_++];
    std::memcpy(static_cast<uint8_t*>(t.chunks[sl.chunk].host) + sl.off, host, bytes);
    return nullptr;
  }
  // A launch with per-sequence values in its arguments is about to be recorded or
  // re-issued: a graph holding it cannot be updated, and an update meeting it fails.
  // True when the launch must be skipped (during an update).
  bool by_value_launch() {
    if (recording_) recording_->updatable = false;
    if (updating_) update_ok_ = false;
    return updating_ != nullptr;
  }
  Status update_tables(GraphTables& t, const std::function<void()>& record) {
    if (!t.updatable) return Status::error("cuda: this graph has per-sequence launch arguments; record a new one");
    BRASS_CUDA_CHECK(cudaEventSynchronize(t.uploaded));  // the mirrors are free to rewrite
    updating_ = &t;
    update_next_ = 0;
    update_ok_ = true;
    record();
    updating_ = nullptr;
    if (!update_ok_ || update_next_ != t.slots.size())
      return Status::error("cuda: graph update: the ops or their shapes differ from the recording");
    t.upload(st_);
    return Status::ok();
  }

  // host -> device through two pinned buffers of kStage bytes.
  Status staged_copy(uint8_t* dst, const uint8_t* src, int64_t bytes) {
    constexpr int64_t kStage = 64 << 20;
    if (pinned_.empty()) {
      for (int i = 0; i < 2; ++i) {
        void* p = nullptr;
        const cudaError_t e = cudaHostAlloc(&p, kStage, cudaHostAllocDefault);
        if (e != cudaSuccess) return Status::errorf("cuda: pinned staging: {}", cudaGetErrorString(e));
        pinned_.push_back(p);
        cudaEvent_t ev;
        BRASS_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        stage_ev_.push_back(ev);
      }
    }
    int which = 0;
    for (int64_t off = 0; off < bytes; off += kStage, which ^= 1) {
      const int64_t n = std::min(kStage, bytes - off);
      BRASS_CUDA_CHECK(cudaEventSynchronize(stage_ev_[which]));  // that buffer's last DMA is done
      std::memcpy(pinned_[which], src + off, static_cast<size_t>(n));
      BRASS_CUDA_CHECK(cudaMemcpyAsync(dst + off, pinned_[which], n, cudaMemcpyHostToDevice, st_));
      BRASS_CUDA_CHECK(cudaEventRecord(stage_ev_[which], st_));
    }
    return Status::ok();
  }

  int device_;
  bool q8x_;
  bool moe_tiles_;  // CudaBackendOptions::moe_tiles
  Fusions on_;  // batched decode's fusions (CudaBackendOptions, and their knobs)
  // The weights prepare_weight gave a tile copy (device pointer -> the copy, DevW::tiles);
  // the MoE ops look their experts up here.
  std::unordered_map<const void*, const uint8_t*> tiles_;
  int64_t mma_moe_min_tok_;  // tokens per call from which the MoE runs on the grouped int8 MMA kernels
  int64_t mma_dense_max_tok_;  // dense matmuls of 2..this many tokens on the int8 MMA kernel
  int64_t mma_h16_min_tok_;    // from this many tokens Q8_0 weights take its f16 variant
  // Measurement knob (BRASS_CUDA_MMA_DENSE_MIN=1): single-token matmuls on it too.
  int64_t mma_dense_min_tok_ = env_int("BRASS_CUDA_MMA_DENSE_MIN", 2);
  std::string name_;
  cudaStream_t st_ = nullptr;
  std::vector<void*> weights_, pinned_;
  std::vector<cudaEvent_t> stage_ev_;
  Scratch stage_dev_, attn_, act_, argmax_partial_, argmax_counter_, kvtab_, attntab_, mma_, mma_dense_;
  Scratch head_parts_, head_ticket_;  // output_head with a pick: the blocks' best; the ticket
  Scratch pick_parts_;                 // head_rows_pick: the blocks' best of each row
  Scratch block_, block_counter_;  // moe_block: int8 x + SwiGLU output; its ticket counter
  // A copy of activation x that its producer wrote for the call right after it: valid
  // while g_launches is still `at` (no launch since the producer's); graphs replay the
  // pairs as recorded. Uploads and copies void it (they may overwrite x).
  template <class T>
  struct ActCopy {
    const float* x = nullptr;
    const T* copy = nullptr;
    uint64_t at = 0;
    const T* of(const float* p) const { return p && p == x && at == g_launches ? copy : nullptr; }
  };
  // The one-token attention's output as Q8_0 (int8 [n] | scales [n / 32], one area of a
  // fixed size, so its address never changes), for moe_block's wo_router.
  Scratch attn_q8_;
  ActCopy<int8_t> attn_q8_for_;
  Scratch nr_counter_;  // moe_block of 2..256 tokens: the norm/router kernel's ticket counters
  // f16 copies of activations, written by their producer for the f16 dense call that reads
  // them next (moe_block's combine: the next layer's q / k / v input; batched attention:
  // the wo input), so that call launches no to_half. One area: each copy is read by the
  // call right after its producer, before the other producer runs (ActCopy).
  Scratch shadow_buf_;
  ActCopy<__half> shadow_;
  // Whether producers write copies for n_tok-token calls: where the dense calls take the
  // f16 MMA kernels (CudaBackendOptions::activation_copies).
  bool shadows_for(int64_t n_tok) const {
    return on_.copies && q8x_ && n_tok >= 2 && n_tok >= mma_h16_min_tok_ && n_tok <= mma_dense_max_tok_;
  }
  // The area: kShadowElems halves (64 tokens of 8,192), allocated once, at first use: a
  // graph's dense call holds its address as a parameter while the attention finds it in
  // its table, which a graph update rebuilds, so the address must never change (a grown
  // area gave an updated graph's wo stale input). Null: a copy that would not fit.
  static constexpr int64_t kShadowElems = int64_t{64} * 8192;
  __half* shadow_area(int64_t elems) {
    return elems <= kShadowElems ? shadow_buf_.as<__half>(static_cast<size_t>(kShadowElems)) : nullptr;
  }
  void set_shadow(const float* x, const __half* h) { shadow_ = {x, h, g_launches}; }
  const __half* shadow_of(const float* x) {
    const __half* h = shadow_.of(x);
    if (h) ++fusions_.copies_read;
    return h;
  }
  CudaFusionCounts fusions_;  // cuda_fusion_counts
  std::unique_ptr<TensorCores> tc_;  // many-token paths (null: off)
  struct PendingDownload {  // download_async's staging slot (ticket 0: free)
    void* pinned = nullptr;
    size_t cap = 0, bytes = 0;
    cudaEvent_t done = nullptr;
    void* dst = nullptr;
    uint64_t ticket = 0;
  };
  std::deque<PendingDownload> downloads_;  // (a deque: slots stay put as it grows)
  uint64_t download_tickets_ = 0;
  GraphTables* recording_ = nullptr;  // the graph being captured (capture())
  GraphTables* updating_ = nullptr;   // the graph being updated (ops only rebuild tables)
  size_t update_next_ = 0;            // next table slot of updating_
  bool update_ok_ = true;
  int64_t upload_bytes_ = 0;
  double upload_seconds_ = 0.0;
};

}  // namespace

bool cuda_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(e)
                                     : std::string("no CUDA device present");
    cudaGetLastError();  // clear the sticky-free error state
    return false;
  }
  return true;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& o) {
  std::string why;
  if (!cuda_available(&why)) return Status::errorf("cuda backend: {}", why);
  int n = 0;
  cudaGetDeviceCount(&n);
  if (o.device < 0 || o.device >= n)
    return Status::errorf("cuda backend: device {} does not exist ({} found)", o.device, n);
  const bool q8x = o.int8_activations && env_int("BRASS_CUDA_EXACT") != 1;
  const bool tc_on = q8x && o.tensor_cores && knob_on("BRASS_CUDA_TC");
  TcOptions tc{.enabled = true, .min_tok_dense = o.tc_min_tok_dense, .min_slots_per_expert = o.tc_min_slots_per_expert};
  // Measurement knob: the MoE's tensor-core threshold in slots per expert.
  if (const int m = env_int("BRASS_CUDA_TC_MOE_MIN"); m > 0) tc.min_slots_per_expert = m;
  int64_t mma_min = o.mma_moe_min_tok;
  if (const int m = env_int("BRASS_CUDA_MMA_MOE_MIN"); m > 0) mma_min = m;
  // (0: no dense matmul on the int8 MMA kernel)
  const int64_t dense_max = env_count("BRASS_CUDA_MMA_DENSE_MAX", static_cast<int>(o.mma_dense_max_tok));
  int64_t h16_min = o.mma_h16_min_tok;
  if (const int m = env_int("BRASS_CUDA_MMA_H16_MIN"); m > 0) h16_min = m;
  const bool tiles = env_bool("BRASS_CUDA_MOE_TILES", o.moe_tiles);
  const bool head_pick = env_bool("BRASS_CUDA_HEAD_PICK", o.fuse_head_pick);
  return std::unique_ptr<Backend>(
      std::make_unique<CudaBackend>(o.device, q8x, tc_on ? &tc : nullptr, mma_min, dense_max, h16_min, tiles,
                                    Fusions{.copies = o.activation_copies && knob_on("BRASS_CUDA_SHADOW"),
                                            .qkv_rope = o.fuse_qkv_rope && knob_on("BRASS_CUDA_QKV_ROPE"),
                                            .moe_lists = o.moe_lists && knob_on("BRASS_CUDA_MOE_LISTS"),
                                            .head_pick = head_pick}));
}

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  CudaBackendOptions o;
  o.device = device;
  return make_cuda_backend(o);
}

int64_t cuda_moe_tile_bytes(DType type, const int64_t (&ne)[4]) {
  if (type != DType::MXFP4 || !mx_tiles_shape(ne[0], ne[1], ne[2])) return 0;
  return mx_tiles_bytes(ne[0], ne[1] * ne[2] * ne[3]);
}
int64_t cuda_head_tile_bytes(DType type, const int64_t (&ne)[4]) {
  if (type != DType::Q8_0 || ne[2] * ne[3] != 1 || !q8_tiles_shape(ne[0], ne[1])) return 0;
  return q8_tiles_bytes(ne[0], ne[1]);
}

int64_t cuda_device_memory(int device) {
  if (!cuda_available(nullptr)) return 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<int64_t>(prop.totalGlobalMem);
}

CudaUploadStats cuda_upload_stats(const Backend& b) {
  if (const auto* c = dynamic_cast<const CudaBackend*>(&b)) return c->stats();
  return {};
}

CudaFusionCounts cuda_fusion_counts(const Backend& b) {
  if (const auto* c = dynamic_cast<const CudaBackend*>(&b)) return c->fusion_counts();
  return {};
}

std::vector<int32_t> cuda_graph_decode_splits(const Graph& g) {
  if (const auto* c = dynamic_cast<const CudaGraph*>(&g)) return c->decode_splits();
  return {};
}

}  // namespace brass::backend
