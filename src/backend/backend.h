// The backend op interface: about a dozen fused ops at gpt-oss granularity, called by
// the explicit per-layer forward loop in model/model.cpp. Implemented by the CPU
// reference (backend/cpu: plain loops + a thread pool; the oracle for every other
// backend), later by a SIMD CPU backend and a CUDA backend.
//
// Memory model: every `float*` / `void*` named as a buffer below is BACKEND memory
// (host memory for CPU backends, device memory for CUDA), obtained from alloc() and
// filled with upload(). Small per-call descriptors (argument structs, the per-sequence
// AttnSeq list) are host memory. Weights are WeightViews: type + pointer + shape;
// for CPU backends the pointer is straight into the GGUF mmap (zero copy).
//
// Layouts are row-major, token-major: an activation buffer (n_tok, n) holds token t's
// n values at [t * n, t * n + n). Weight matrices follow ggml/GGUF: ne = {n_in, n_out}
// (ne[0] contiguous), each of the n_out rows is row_bytes(type, n_in) bytes; expert
// tensors add ne[2] = n_expert with a whole (n_out, n_in) matrix per expert.
//
// Numerics contract (every backend, checked against the CPU reference in parity tests):
// accumulate in f32 (or better); softmaxes subtract the running max; the sink logit
// joins attention's max and denominator; ties in router top-k go to the lower expert
// index.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/dtype.h"
#include "backend/sample_noise.h"
#include "core/status.h"

namespace brass::backend {

// A read-only weight tensor: `type` blocks, ne in ggml order (unused dims are 1).
struct WeightView {
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t row_bytes() const { return ::brass::row_bytes(type, ne[0]); }
  // Bytes of one 2-D slice (one expert's matrix).
  int64_t matrix_bytes() const { return row_bytes() * ne[1]; }
};

// Backend memory. Freed by its Backend when destroyed.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t size() const = 0;
  template <class T>
  T* as() { return static_cast<T*>(data()); }
};

// ---- op arguments (named, one struct per op) ----

// out(n_tok, n_embd) = dequantized rows table[tokens[t]] (table ne = {n_embd, n_vocab}).
// Token ids must be < n_vocab (the model validates them before calling).
struct EmbedArgs {
  WeightView table;
  const int32_t* tokens = nullptr;  // (n_tok) backend memory
  int64_t n_tok = 0;
  float* out = nullptr;             // (n_tok, n_embd)
};

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight. out may alias x.
struct RmsNormArgs {
  const float* x = nullptr;       // (n_rows, n)
  const float* weight = nullptr;  // (n) f32
  float* out = nullptr;           // (n_rows, n)
  int64_t n_rows = 0;
  int64_t n = 0;
  float eps = 1e-5f;
};

// y(n_tok, n_out) = x(n_tok, n_in) W^T + bias, W = w (ne {n_in, n_out}), any type the
// backend supports (supports_weight_type). bias may be null.
struct MatmulArgs {
  WeightView w;
  const float* bias = nullptr;  // (n_out) or null
  const float* x = nullptr;     // (n_tok, n_in)
  float* y = nullptr;           // (n_tok, n_out); must not alias x
  int64_t n_tok = 0;
};

// In-place NeoX (half-split) rotary embedding with precomputed per-pair frequencies:
// for pair j in [0, head_dim/2): angle = pos[t] * inv_freq[j];
//   (x[j], x[j+half]) <- mscale * (x[j] cos - x[j+half] sin, x[j+half] cos + x[j] sin).
// YaRN lives entirely in inv_freq and mscale (see model/rope.h).
struct RopeArgs {
  float* x = nullptr;                // (n_tok, n_heads, head_dim)
  const int32_t* pos = nullptr;      // (n_tok) backend memory
  const float* inv_freq = nullptr;   // (head_dim / 2) backend memory
  float mscale = 1.0f;
  int64_t n_tok = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
};

// One sequence's slice of a batch plus its KV storage for ONE layer.
// Token rows [tok0, tok0 + n_tok) of q/k/v/out belong to it; they sit at positions
// pos0 .. pos0 + n_tok - 1 (contiguous). Storage k/v: rows of (n_head_kv, head_dim)
// elements of the cache type; position p lives in row kv_storage_row(seq, p):
// - paged (block_size > 0): k/v are the layer's block pool (n_blocks, block_size,
//   n_head_kv, head_dim) shared by every sequence, and `blocks` the sequence's block
//   table: position p is row p % block_size of block blocks[p / block_size]. `blocks`
//   is backend memory (device memory for device backends); block_size is a power of two;
// - ring (block_size 0, ring): slot p % capacity; a ring must hold every key any query
//   of the chunk needs (capacity >= window + n_tok - 1);
// - linear (block_size 0, !ring): slot p, p < capacity.
// capacity is the most positions the sequence may hold (paged: its logical limit, not
// storage); device kernels size per-sequence work by it.
struct AttnSeq {
  int64_t tok0 = 0;
  int64_t n_tok = 0;
  int32_t pos0 = 0;
  void* k = nullptr;
  void* v = nullptr;
  int32_t capacity = 0;
  bool ring = false;
  const int32_t* blocks = nullptr;  // (capacity / block_size, rounded up) block ids, paged only
  int32_t block_size = 0;           // positions per block; 0: not paged
};

// The storage row of position pos (host side of the rule above; host backends only:
// it reads the block table).
inline int64_t kv_storage_row(const AttnSeq& s, int64_t pos) {
  if (s.block_size > 0) {  // (shift and mask: block_size is a power of two)
    const int shift = std::countr_zero(static_cast<uint32_t>(s.block_size));
    return (static_cast<int64_t>(s.blocks[pos >> shift]) << shift) | (pos & (s.block_size - 1));
  }
  return s.ring ? pos % s.capacity : pos;
}

// Store the chunk's K and V rows into each sequence's cache slots (converting to kv_type).
struct KvStoreArgs {
  const float* k = nullptr;  // (n_tok, n_head_kv, head_dim)
  const float* v = nullptr;  // (n_tok, n_head_kv, head_dim)
  DType kv_type = DType::F32;  // F32 or F16
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  std::span<const AttnSeq> seqs;
  // Optional (n_tok) backend memory holding the same positions as the seqs' pos0 + i.
  // Backends that replay captured work (CUDA graphs) read positions from here so that a
  // replay needs no patching; the CPU reference ignores it.
  const int32_t* pos = nullptr;
};

// Causal attention over the cache (the chunk's own K/V must be stored first).
// Query head h reads kv head h / (n_head / n_head_kv). For query position p the keys are
// positions [lo, p] with lo = window > 0 ? max(0, p - window + 1) : 0. Scores are
// (q . k) * scale; the sink logit sinks[h] (if not null) joins the softmax max and
// denominator and has no value row.
struct AttentionArgs {
  const float* q = nullptr;      // (n_tok, n_head, head_dim)
  const float* sinks = nullptr;  // (n_head) or null
  float* out = nullptr;          // (n_tok, n_head * head_dim)
  DType kv_type = DType::F32;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int32_t window = 0;  // 0: full causal attention
  float scale = 1.0f;
  std::span<const AttnSeq> seqs;
  const int32_t* pos = nullptr;  // optional, as in KvStoreArgs
};

// Router: per token, the k largest raw logits (ties: lower expert index first), in
// descending order, and the softmax over those k only (llama.cpp SOFTMAX_WEIGHT).
struct RouterArgs {
  const float* logits = nullptr;  // (n_tok, n_expert)
  int32_t* ids = nullptr;         // (n_tok, k)
  float* weights = nullptr;       // (n_tok, k)
  int64_t n_tok = 0;
  int64_t n_expert = 0;
  int64_t k = 0;
};

// Mixture of experts with OAI SwiGLU: for token t and its j-th expert e = ids[t, j]:
//   g = gate_e x + gate_b[e];  u = up_e x + up_b[e]          (n_ff each)
//   g = min(g, limit); u = clamp(u, -limit, limit)
//   a = g * sigmoid(alpha * g) * (u + 1)
//   out[t] += weights[t, j] * (down_e a + down_b[e])      (summed over j = 0..k-1)
// out is overwritten (not accumulated into). Weights ne: gate/up {n_embd, n_ff, n_expert},
// down {n_ff, n_embd, n_expert}; biases f32 (n_expert, n_ff) / (n_expert, n_embd).
struct MoeArgs {
  const float* x = nullptr;        // (n_tok, n_embd)
  const int32_t* ids = nullptr;    // (n_tok, k)
  const float* weights = nullptr;  // (n_tok, k)
  WeightView gate, up, down;
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  float* out = nullptr;  // (n_tok, n_embd)
  int64_t n_tok = 0;
  int64_t k = 0;
  float alpha = 1.702f;
  float limit = 7.0f;
};

// y[i] += x[i] for i < n.
struct AddArgs {
  float* y = nullptr;
  const float* x = nullptr;
  int64_t n = 0;
};

// out[i] = x[rows[i]] for i < n_rows (rows of n floats).
struct GatherRowsArgs {
  const float* x = nullptr;
  const int32_t* rows = nullptr;  // (n_rows) backend memory
  float* out = nullptr;           // (n_rows, n)
  int64_t n_rows = 0;
  int64_t n = 0;
};

// ---- fused ops (additive). Each has a default implementation in backend.cpp composed
// of the ops above, which is its CPU twin; backends may override with fused kernels.

// y += x; out = rmsnorm(y) * weight (row-wise). out must not alias x.
struct AddRmsNormArgs {
  float* y = nullptr;             // (n_rows, n) residual, updated
  const float* x = nullptr;       // (n_rows, n)
  const float* weight = nullptr;  // (n) f32
  float* out = nullptr;           // (n_rows, n)
  int64_t n_rows = 0;
  int64_t n = 0;
  float eps = 1e-5f;
};

// The MoE block of a layer, from the residual stream to the experts' output:
//   y += add (when add is set); xn = rmsnorm(y) * norm;
//   logits = xn Wr^T + br; ids, weights = router(logits, k); out = moe(xn, ids, weights).
// moe.x / moe.ids / moe.weights are where xn, the ids and the weights go (moe's inputs).
// Then, with accumulate, y += out; with next_norm (the next layer's attention norm),
// y += out and next_xn = rmsnorm(y) * next_norm (eps as above; moe.out may then stay
// unwritten too, and next_xn may be moe.x).
// A backend fuses it for decode (CUDA, one token: 3 kernels instead of 5).
struct MoeBlockArgs {
  float* y = nullptr;            // (n_tok, n_embd) residual, updated when add is set
  const float* add = nullptr;    // (n_tok, n_embd) or null
  // add as a projection computed first (proj.x set): proj.y (== add) = proj.x proj.w^T +
  // proj.bias. A backend may fuse it with the add, the norm and the router (CUDA, one
  // token: the attention's wo), leaving proj.y unwritten.
  MatmulArgs proj;
  const float* norm = nullptr;   // (n_embd) f32
  float eps = 1e-5f;
  WeightView router;             // {n_embd, n_expert}
  const float* router_bias = nullptr;  // (n_expert) or null
  float* logits = nullptr;       // (n_tok, n_expert) out
  int64_t n_expert = 0;
  MoeArgs moe;                   // x: the xn out (n_tok, n_embd); ids, weights: router outputs
  bool accumulate = false;       // y += the experts' output (moe.out: scratch, may stay unwritten)
  const float* next_norm = nullptr;  // (n_embd) f32 or null: y += out, then the next layer's norm
  float* next_xn = nullptr;          // (n_tok, n_embd) out, with next_norm
};

// The attention input block: q/k/v projections with biases, RoPE on q and k, and the
// store of k and v into the cache:
//   q = xn Wq^T + bq; k = xn Wk^T + bk; v = xn Wv^T + bv; rope(q); rope(k); kv_store.
// With norm set, x is the residual stream and the projections read xn = rmsnorm(x) * norm
// (written to xn).
struct AttnQkvArgs {
  const float* x = nullptr;  // (n_tok, n_embd) normed input (or the residual, with norm)
  const float* norm = nullptr;  // (n_embd) f32 or null
  float eps = 1e-5f;
  float* xn = nullptr;          // (n_tok, n_embd) out, with norm
  WeightView wq, wk, wv;
  const float* bq = nullptr;  // (n_head * head_dim) or null
  const float* bk = nullptr;  // (n_head_kv * head_dim) or null
  const float* bv = nullptr;  // (n_head_kv * head_dim) or null
  float* q = nullptr;         // (n_tok, n_head, head_dim) out (rotated)
  float* k = nullptr;         // (n_tok, n_head_kv, head_dim) out (rotated)
  float* v = nullptr;         // (n_tok, n_head_kv, head_dim) out
  const int32_t* pos = nullptr;       // (n_tok) backend memory
  const float* inv_freq = nullptr;    // (head_dim / 2) backend memory
  float mscale = 1.0f;
  int64_t n_tok = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  DType kv_type = DType::F32;
  std::span<const AttnSeq> seqs;
};

// Greedy pick: out[r] = the index of the largest x[r, i] (ties: the lower index).
// Optional greedy-decode feedback (lets a captured decode step feed itself): when pos
// is set, history[pos[r] + 1] = out[r] (if history is set) and then pos[r] += 1.
struct ArgmaxArgs {
  const float* x = nullptr;  // (n_rows, n)
  int32_t* out = nullptr;    // (n_rows) backend memory
  int64_t n_rows = 0;
  int64_t n = 0;
  int32_t* pos = nullptr;      // (n_rows) or null
  int32_t* history = nullptr;  // (n_ctx) token per position, or null
};

// The output head: mm (y = x W^T + bias for mm.n_tok rows); with pick.out set, then the
// greedy pick of those rows as argmax() with pick's other fields (pick.x, .n_rows and .n
// are taken from mm). The model sends every output head through here, so a backend may
// compute single rows its own way (the CUDA backend: one launch for the head and the pick)
// and still give a forward() and a greedy decode step the same logits.
// With norm set, mm.x is the residual and the head's input is its RMSNorm, written to xn
// (n_tok, n_in; not mm.x) on the way (the model's final norm, which a backend may fold into
// its one-row head).
struct OutputHeadArgs {
  MatmulArgs mm;
  ArgmaxArgs pick;                // out == nullptr: logits only
  const float* norm = nullptr;    // (n_in) f32 or null: mm.x is the head's input as it is
  float eps = 1e-5f;
  float* xn = nullptr;            // (n_tok, n_in) out, with norm
};

// Token sampling (backend/sampling.h defines the draw): out[r] = the token drawn from row
// r of x with params[r] (temperature <= 0: argmax). params lives in backend memory, so a
// recorded launch reads each replay's values (new seeds, counters) from there.
struct SampleArgs {
  const float* x = nullptr;                // (n_rows, n) logits
  const SampleParams* params = nullptr;    // (n_rows) backend memory
  int32_t* out = nullptr;                  // (n_rows) backend memory
  int64_t n_rows = 0;
  int64_t n = 0;
};

// Recorded backend work that can be launched again with the same arguments (a CUDA
// graph). Values that change between launches must live in backend memory.
class Graph {
 public:
  virtual ~Graph() = default;
  virtual Status launch() = 0;
  // Re-issue the recording for other per-call descriptors (other sequences, their KV
  // storage and positions) and keep the recorded work: `record` must issue the same ops
  // with the same shapes; what changes is read by the recorded kernels from parameter
  // tables, which this rewrites (nothing runs until launch()). An error, with the graph
  // left as it was, when the ops or shapes differ from the recording; the caller then
  // records a new graph. Default: unsupported.
  virtual Status update(const std::function<void()>& record);
  // A single-token decode graph's next launches attend at most n_keys keys (the token's
  // position + 1): a backend may size by it what it sized by the sequences' capacity at
  // recording (the CUDA decode attention's key splits). Only a hint: the launches stay
  // correct at any depth. Default: nothing to do.
  virtual Status set_decode_keys(int64_t n_keys);
};

// Free and total bytes of a memory (0: unknown).
struct MemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};
// The host's available and physical memory.
MemoryInfo host_memory_info();

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int n_threads() const { return 1; }

  // Can matmul/embed/moe read weights of this type?
  virtual bool supports_weight_type(DType t) const = 0;

  virtual Result<std::unique_ptr<Buffer>> alloc(size_t bytes) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  // Wait until every op issued so far has finished (CPU ops are synchronous).
  virtual void synchronize() {}
  // Memory the backend's alloc() draws from (device memory for device backends;
  // default: host_memory_info()).
  virtual MemoryInfo memory_info() const { return host_memory_info(); }

  virtual void embed(const EmbedArgs& a) = 0;
  virtual void rms_norm(const RmsNormArgs& a) = 0;
  virtual void matmul(const MatmulArgs& a) = 0;
  virtual void rope(const RopeArgs& a) = 0;
  virtual void kv_store(const KvStoreArgs& a) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  virtual void router(const RouterArgs& a) = 0;
  virtual void moe(const MoeArgs& a) = 0;
  virtual void add(const AddArgs& a) = 0;
  virtual void gather_rows(const GatherRowsArgs& a) = 0;

  // ---- additive extensions (defaults in backend.cpp) ----
  // True when backend memory is host memory the caller may read directly.
  virtual bool host_memory() const { return true; }
  // Make a weight (a WeightView into host memory, e.g. the GGUF mmap) usable by this
  // backend's ops: host backends return it unchanged; device backends copy it once and
  // may re-lay it out (the returned view is then only meaningful to this backend's ops).
  // 1-D f32 vectors (norms, biases, sinks) go through here too, as {F32, ptr, {n}}.
  virtual Result<WeightView> prepare_weight(const WeightView& host) { return host; }
  // prepare_weight for the output head (a backend may lay it out for its head kernels too).
  virtual Result<WeightView> prepare_output_head(const WeightView& host) { return prepare_weight(host); }
  virtual void add_rms_norm(const AddRmsNormArgs& a);
  virtual void attn_qkv(const AttnQkvArgs& a);
  virtual void moe_block(const MoeBlockArgs& a);
  // Copy `bytes` between two places in backend memory, in issue order with the ops
  // (default: memcpy, host-memory backends).
  virtual void copy(void* dst, const void* src, size_t bytes);
  // A download that does not wait (pipelining: the host issues the next work meanwhile):
  // the bytes reach host_dst once the work issued before it is done; await(ticket) waits for
  // that (and every earlier ticket) and host_dst must stay valid until then. Default:
  // download() at once (synchronous backends), ticket 0.
  virtual uint64_t download_async(void* host_dst, const void* src, size_t bytes);
  virtual void await(uint64_t ticket);
  virtual void argmax(const ArgmaxArgs& a);  // default: host loop (host-memory backends)
  virtual void output_head(const OutputHeadArgs& a);  // default: [rms_norm,] matmul, then argmax
  virtual void sample(const SampleArgs& a);  // default: backend::sample_row per row (host memory)
  // Record the ops `record` issues into a Graph (instead of running them). Default:
  // unsupported (an error status).
  virtual Result<std::unique_ptr<Graph>> capture(const std::function<void()>& record);

 protected:
  // The tail of the composed attn_qkv (rope of q and k, then the KV store), for backends
  // that compute q, k and v their own way.
  virtual void attn_qkv_rope_store(const AttnQkvArgs& a);
  // The tail of the composed moe_block (accumulate / next_norm), after moe().
  void moe_block_tail(const MoeBlockArgs& a);
  // The head of the composed output_head: a with its norm (if any) issued as an rms_norm
  // into a.xn, i.e. the same head on xn without a norm.
  OutputHeadArgs head_normed_first(const OutputHeadArgs& a);
};

// The CPU reference backend (backend/cpu). n_threads <= 0: env::threads().
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0);

}  // namespace brass::backend
