// Default implementations of the fused / extension ops of backend.h, composed of the
// basic ops. They are the CPU twins of the fused CUDA kernels: any backend that does
// not override an op gets exactly this composition.
#include "backend/backend.h"

#include <unistd.h>

#include <cstring>

#include "backend/sampling.h"

namespace brass::backend {

MemoryInfo host_memory_info() {
  const long page = sysconf(_SC_PAGESIZE);
  const long avail = sysconf(_SC_AVPHYS_PAGES), phys = sysconf(_SC_PHYS_PAGES);
  MemoryInfo m;
  if (page > 0 && avail > 0) m.free_bytes = static_cast<int64_t>(avail) * page;
  if (page > 0 && phys > 0) m.total_bytes = static_cast<int64_t>(phys) * page;
  return m;
}

void Backend::add_rms_norm(const AddRmsNormArgs& a) {
  add({.y = a.y, .x = a.x, .n = a.n_rows * a.n});
  rms_norm({.x = a.y, .weight = a.weight, .out = a.out, .n_rows = a.n_rows, .n = a.n, .eps = a.eps});
}

void Backend::attn_qkv(const AttnQkvArgs& in) {
  AttnQkvArgs a = in;
  if (in.norm) {
    rms_norm({.x = in.x, .weight = in.norm, .out = in.xn, .n_rows = in.n_tok, .n = in.wq.ne[0], .eps = in.eps});
    a.x = in.xn;
    a.norm = nullptr;
  }
  matmul({.w = a.wq, .bias = a.bq, .x = a.x, .y = a.q, .n_tok = a.n_tok});
  matmul({.w = a.wk, .bias = a.bk, .x = a.x, .y = a.k, .n_tok = a.n_tok});
  matmul({.w = a.wv, .bias = a.bv, .x = a.x, .y = a.v, .n_tok = a.n_tok});
  attn_qkv_rope_store(a);
}

void Backend::attn_qkv_rope_store(const AttnQkvArgs& a) {
  rope({.x = a.q, .pos = a.pos, .inv_freq = a.inv_freq, .mscale = a.mscale, .n_tok = a.n_tok,
        .n_heads = a.n_head, .head_dim = a.head_dim});
  rope({.x = a.k, .pos = a.pos, .inv_freq = a.inv_freq, .mscale = a.mscale, .n_tok = a.n_tok,
        .n_heads = a.n_head_kv, .head_dim = a.head_dim});
  kv_store({.k = a.k, .v = a.v, .kv_type = a.kv_type, .n_head_kv = a.n_head_kv, .head_dim = a.head_dim,
            .seqs = a.seqs, .pos = a.pos});
}

void Backend::moe_block(const MoeBlockArgs& a) {
  const MoeArgs& m = a.moe;
  const int64_t n_embd = a.router.ne[0];
  float* xn = const_cast<float*>(m.x);
  if (a.proj.x) matmul(a.proj);
  if (a.add)
    add_rms_norm({.y = a.y, .x = a.add, .weight = a.norm, .out = xn, .n_rows = m.n_tok, .n = n_embd, .eps = a.eps});
  else
    rms_norm({.x = a.y, .weight = a.norm, .out = xn, .n_rows = m.n_tok, .n = n_embd, .eps = a.eps});
  matmul({.w = a.router, .bias = a.router_bias, .x = xn, .y = a.logits, .n_tok = m.n_tok});
  router({.logits = a.logits, .ids = const_cast<int32_t*>(m.ids), .weights = const_cast<float*>(m.weights),
          .n_tok = m.n_tok, .n_expert = a.n_expert, .k = m.k});
  moe(m);
  moe_block_tail(a);
}

void Backend::moe_block_tail(const MoeBlockArgs& a) {
  const MoeArgs& m = a.moe;
  const int64_t n_embd = a.router.ne[0];
  if (a.next_norm)
    add_rms_norm({.y = a.y, .x = m.out, .weight = a.next_norm, .out = a.next_xn, .n_rows = m.n_tok, .n = n_embd,
                  .eps = a.eps});
  else if (a.accumulate)
    add({.y = a.y, .x = m.out, .n = m.n_tok * n_embd});
}

OutputHeadArgs Backend::head_normed_first(const OutputHeadArgs& in) {
  OutputHeadArgs a = in;
  if (!a.norm) return a;
  rms_norm({.x = a.mm.x, .weight = a.norm, .out = a.xn, .n_rows = a.mm.n_tok, .n = a.mm.w.ne[0], .eps = a.eps});
  a.mm.x = a.xn;
  a.norm = nullptr;
  return a;
}

void Backend::output_head(const OutputHeadArgs& in) {
  const OutputHeadArgs a = head_normed_first(in);
  matmul(a.mm);
  if (!a.pick.out) return;
  ArgmaxArgs p = a.pick;
  p.x = a.mm.y;
  p.n_rows = a.mm.n_tok;
  p.n = a.mm.w.ne[1];
  argmax(p);
}

void Backend::argmax(const ArgmaxArgs& a) {
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const float* x = a.x + r * a.n;
    int64_t best = 0;
    for (int64_t i = 1; i < a.n; ++i)
      if (x[i] > x[best]) best = i;  // strict '>': the lower index wins ties
    a.out[r] = static_cast<int32_t>(best);
    if (a.pos) {
      if (a.history) a.history[a.pos[r] + 1] = static_cast<int32_t>(best);
      a.pos[r] += 1;
    }
  }
}

void Backend::sample(const SampleArgs& a) {
  for (int64_t r = 0; r < a.n_rows; ++r)
    a.out[r] = sample_row(std::span<const float>(a.x + r * a.n, static_cast<size_t>(a.n)), a.params[r]);
}

void Backend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

uint64_t Backend::download_async(void* host_dst, const void* src, size_t bytes) {
  download(host_dst, src, bytes);
  return 0;
}

void Backend::await(uint64_t) {}

Status Graph::update(const std::function<void()>&) {
  return Status::error("graph update is not supported by this backend");
}

Status Graph::set_decode_keys(int64_t) { return Status::ok(); }

Result<std::unique_ptr<Graph>> Backend::capture(const std::function<void()>&) {
  return Status::errorf("backend {}: graph capture is not supported", name());
}

}  // namespace brass::backend
