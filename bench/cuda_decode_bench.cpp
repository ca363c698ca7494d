// cuda_decode_bench: single-stream greedy decode speed of the CUDA backend (tg128 at
// depth 0 and at a given depth), with the numbers that say how close it is to the
// memory floor: tok/s, ms/token, bytes read per token (weights actually touched: every
// dense matrix, the k selected experts of each layer, the output matrix; plus the KV
// read at that depth), achieved GB/s, and % of the floor, where the floor is bytes /
// the device's measured copy bandwidth (a large device-to-device copy, read + write).
//
// Model: --model FILE, or --synth FILE to first write a full-size synthetic gpt-oss-20b
// GGUF there (src/tools synth plan: MXFP4 experts, Q8_0 attention/embeddings/output,
// F32 rest; random weights; no tokenizer metadata, which the model does not need).
// --synth-layers N: that file with N layers instead of 24 (23: the last layer, the one
// the -DBRASS_PROBE marks record, is a sliding-window one).
// (A .cpp, not a .cu: the model headers pull in fmt, which nvcc cannot compile.)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "tools/synth.h"

#ifdef BRASS_PROBE
namespace brass::backend::cuda {
void probe_dump(const char* path);      // cuda_q8_pre.cu, -DBRASS_PROBE builds
void probe_dump_wide(const char* path);  // cuda_matmul_mma.cu (appends)
void probe_dump_attn(const char* path);  // cuda_attention.cu (appends)
void probe_dump_rows(const char* path);  // cuda_norm_router.cu (appends)
void probe_dump_wo(const char* path);    // cuda_wo_router.cu (appends)
}
#endif

using namespace brass;

// -DBRASS_PROBE builds: the in-kernel marks to BRASS_PROBE_OUT (csv) at the end of a run.
static void dump_probes() {
#ifdef BRASS_PROBE
  if (const char* po = std::getenv("BRASS_PROBE_OUT")) {
    backend::cuda::probe_dump(po);
    backend::cuda::probe_dump_wide(po);
    backend::cuda::probe_dump_attn(po);
    backend::cuda::probe_dump_rows(po);
    backend::cuda::probe_dump_wo(po);
  }
#endif
}

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));                \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

// Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written.
double copy_bandwidth() {
  const size_t n = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  CK(cudaMemset(a, 1, n));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaFree(a);
  cudaFree(b);
  return 2.0 * n / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

Status write_synth(const std::string& path, int64_t n_layer) {
  tools::GptOssShape shape = tools::preset_20b();
  if (n_layer > 0) shape.n_layer = n_layer;
  const tools::TypePlan types;
  gguf::Writer w;
  tools::GptOssMetaExtras extras;
  extras.general_name = shape.name + " (synthetic: random weights, cuda_decode_bench)";
  tools::write_gpt_oss_hparams(w, shape, tools::llama_file_type(types), extras);
  for (const auto& t : tools::gpt_oss_tensor_plan(shape, types)) {
    w.add_tensor(t.name, t.type, t.ne, [t](uint8_t* dst, int64_t nbytes) { tools::synth_fill(t, 1234, 16, dst, nbytes); });
  }
  const double t0 = now();
  BRASS_TRY(w.write(path));
  std::printf("synth: wrote %s in %.1f s\n", path.c_str(), now() - t0);
  return Status::ok();
}

// Bytes of weights one decode token reads.
double weight_bytes_per_token(const model::Model& m) {
  const auto& c = m.config();
  const auto& w = m.weights();
  double b = 0;
  auto mat = [](const backend::WeightView& v) { return double(v.row_bytes()) * v.ne[1] * v.ne[2]; };
  for (const auto& L : w.layers) {
    b += mat(L.wq) + mat(L.wk) + mat(L.wv) + mat(L.wo) + mat(L.router);
    b += double(c.n_expert_used) * (L.gate_exps.matrix_bytes() + L.up_exps.matrix_bytes() + L.down_exps.matrix_bytes());
    b += 4.0 * (2 * c.n_embd + c.q_dim() + 2 * c.kv_dim() + c.n_embd + c.n_head + c.n_expert);
    b += 4.0 * c.n_expert_used * (2 * c.n_ff + c.n_embd);
  }
  b += mat(w.output) + w.token_embd.row_bytes() + 4.0 * c.n_embd;
  return b;
}

double kv_bytes_per_token(const model::Model& m, int64_t depth, int64_t elt) {
  const auto& c = m.config();
  return 2.0 * c.kv_dim() * elt * (double(c.n_full_layers()) * depth + double(c.n_swa_layers()) * std::min(depth, c.n_swa));
}

// Per-op cost in steady state: each op recorded 50 times into one graph, the graph
// launched 20 times; microseconds per op and GB/s of its weight bytes.
void op_costs(model::Model& m) {
  backend::Backend& be = m.backend();
  const auto& c = m.config();
  const auto& L = m.weights().layers[1];  // a full-attention layer
  auto buf = [&](size_t bytes) { return std::move(be.alloc(bytes)).value(); };
  auto x = buf(c.n_embd * 4), xn = buf(c.n_embd * 4), q = buf(c.q_dim() * 4), k = buf(c.kv_dim() * 4),
       v = buf(c.kv_dim() * 4), attn = buf(c.q_dim() * 4), proj = buf(c.n_embd * 4), rlog = buf(c.n_expert * 4),
       rids = buf(c.n_expert_used * 4), rw = buf(c.n_expert_used * 4), lg = buf(c.n_vocab * 4), tok = buf(4),
       pos = buf(4), kc = buf(8192 * c.kv_dim() * 2), vc = buf(8192 * c.kv_dim() * 2), invf = buf(c.head_dim * 2);
  std::vector<float> h(std::max(c.n_embd, c.q_dim()), 0.01f);
  be.upload(x->data(), h.data(), c.n_embd * 4);
  be.upload(xn->data(), h.data(), c.n_embd * 4);
  be.upload(attn->data(), h.data(), c.q_dim() * 4);
  be.upload(invf->data(), m.rope().inv_freq.data(), c.head_dim / 2 * 4);
  const int32_t p = 4096;
  be.upload(pos->data(), &p, 4);
  std::vector<int32_t> ids = {3, 11, 20, 29};
  std::vector<float> wts = {0.4f, 0.3f, 0.2f, 0.1f};
  be.upload(rids->data(), ids.data(), 16);
  be.upload(rw->data(), wts.data(), 16);
  std::vector<uint16_t> kvh(8192 * c.kv_dim(), 0x2E66);  // f16 0.1
  be.upload(kc->data(), kvh.data(), kvh.size() * 2);
  be.upload(vc->data(), kvh.data(), kvh.size() * 2);
  backend::AttnSeq seq{.tok0 = 0, .n_tok = 1, .pos0 = p, .k = kc->data(), .v = vc->data(), .capacity = 8192, .ring = false};
  auto mb = [](const backend::WeightView& w) { return double(w.row_bytes()) * w.ne[1] * w.ne[2]; };
  const double expert = double(c.n_expert_used) * (L.gate_exps.matrix_bytes() + L.up_exps.matrix_bytes() + L.down_exps.matrix_bytes());
  struct Op { const char* name; double bytes; std::function<void()> f; };
  const Op ops[] = {
      {"add (n=1, launch floor)", 0, [&] { be.add({.y = proj->as<float>(), .x = x->as<float>(), .n = 1}); }},
      {"rms_norm", 0, [&] { be.rms_norm({.x = x->as<float>(), .weight = L.attn_norm, .out = xn->as<float>(), .n_rows = 1, .n = c.n_embd, .eps = 1e-5f}); }},
      {"add_rms_norm", 0, [&] { be.add_rms_norm({.y = x->as<float>(), .x = proj->as<float>(), .weight = L.attn_norm, .out = xn->as<float>(), .n_rows = 1, .n = c.n_embd, .eps = 1e-5f}); }},
      {"attn_qkv (q8, fused)", mb(L.wq) + mb(L.wk) + mb(L.wv), [&] {
         be.attn_qkv({.x = xn->as<float>(), .wq = L.wq, .wk = L.wk, .wv = L.wv, .bq = L.bq, .bk = L.bk, .bv = L.bv, .q = q->as<float>(), .k = k->as<float>(), .v = v->as<float>(), .pos = pos->as<int32_t>(), .inv_freq = invf->as<float>(), .mscale = 1.0f, .n_tok = 1, .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim, .kv_type = DType::F16, .seqs = std::span(&seq, 1)}); }},
      {"attention @4096", 2.0 * 4097 * c.kv_dim() * 2, [&] {
         be.attention({.q = q->as<float>(), .sinks = L.sinks, .out = attn->as<float>(), .kv_type = DType::F16, .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim, .window = 0, .scale = 0.125f, .seqs = std::span(&seq, 1), .pos = pos->as<int32_t>()}); }},
      {"matmul wo (q8)", mb(L.wo), [&] { be.matmul({.w = L.wo, .bias = L.bo, .x = attn->as<float>(), .y = proj->as<float>(), .n_tok = 1}); }},
      {"matmul router (f32)", mb(L.router), [&] { be.matmul({.w = L.router, .bias = L.router_b, .x = xn->as<float>(), .y = rlog->as<float>(), .n_tok = 1}); }},
      {"router top-4", 0, [&] { be.router({.logits = rlog->as<float>(), .ids = rids->as<int32_t>(), .weights = rw->as<float>(), .n_tok = 1, .n_expert = c.n_expert, .k = c.n_expert_used}); }},
      {"moe (mxfp4, 4 experts)", expert, [&] {
         be.moe({.x = xn->as<float>(), .ids = rids->as<int32_t>(), .weights = rw->as<float>(), .gate = L.gate_exps, .up = L.up_exps, .down = L.down_exps, .gate_bias = L.gate_b, .up_bias = L.up_b, .down_bias = L.down_b, .out = proj->as<float>(), .n_tok = 1, .k = c.n_expert_used}); }},
      {"router + moe (pair)", expert, [&] {
         be.router({.logits = rlog->as<float>(), .ids = rids->as<int32_t>(), .weights = rw->as<float>(), .n_tok = 1, .n_expert = c.n_expert, .k = c.n_expert_used});
         be.moe({.x = xn->as<float>(), .ids = rids->as<int32_t>(), .weights = rw->as<float>(), .gate = L.gate_exps, .up = L.up_exps, .down = L.down_exps, .gate_bias = L.gate_b, .up_bias = L.up_b, .down_bias = L.down_b, .out = proj->as<float>(), .n_tok = 1, .k = c.n_expert_used}); }},
      {"matmul output (q8)", mb(m.weights().output), [&] { be.matmul({.w = m.weights().output, .x = xn->as<float>(), .y = lg->as<float>(), .n_tok = 1}); }},
      {"argmax (201088)", c.n_vocab * 4.0, [&] { be.argmax({.x = lg->as<float>(), .out = tok->as<int32_t>(), .n_rows = 1, .n = c.n_vocab}); }},
      {"output head + pick", mb(m.weights().output), [&] { be.output_head({.mm = {.w = m.weights().output, .x = xn->as<float>(), .y = lg->as<float>(), .n_tok = 1}, .pick = {.out = tok->as<int32_t>()}}); }},
  };
  be.upload(rids->data(), ids.data(), 16);
  std::printf("%-26s %9s %9s\n", "op (steady state, graph)", "us", "GB/s");
  for (const Op& op : ops) {
    op.f();  // eager once: scratch settles
    be.synchronize();
    auto g = be.capture([&] { for (int i = 0; i < 50; ++i) op.f(); });
    if (!g.is_ok()) { std::printf("%s: %s\n", op.name, g.status().message().c_str()); continue; }
    (void)g.value()->launch();
    be.synchronize();
    const double t0 = now();
    for (int r = 0; r < 20; ++r) (void)g.value()->launch();
    be.synchronize();
    const double us = (now() - t0) * 1e6 / (20 * 50);
    std::printf("%-26s %9.2f %9.0f\n", op.name, us, op.bytes > 0 ? op.bytes / (us * 1e-6) / 1e9 : 0.0);
    be.upload(rids->data(), ids.data(), 16);  // the router op overwrote them
    be.synchronize();
  }
}

// FLOPs of one prefill token (multiply-adds x 2): the q/k/v/o projections, the router,
// k experts' gate/up/down, and attention scores + values at average context `ctx` per
// layer (full layers: ctx, sliding: min(ctx, n_swa)). The output head runs for the last
// token only and is left out.
double prefill_flops_per_token(const model::Model& m, double ctx_full, double ctx_swa) {
  const auto& c = m.config();
  double f = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    f += 2.0 * c.n_embd * (c.q_dim() + 2 * c.kv_dim()) + 2.0 * c.q_dim() * c.n_embd + 2.0 * c.n_embd * c.n_expert;
    f += 2.0 * c.n_expert_used * 3.0 * c.n_embd * c.n_ff;
    f += 4.0 * c.q_dim() * (c.is_swa_layer(il) ? ctx_swa : ctx_full);
  }
  return f;
}

// pp<N> rows: best of 3 prefills of N tokens in one forward call; %peak against
// --tc-peak TFLOP/s (default 989: the H100/H200 SXM dense bf16 tensor-core spec value).
void prefill_rows(model::Model& m, const std::vector<int64_t>& sizes, double tc_peak) {
  const auto& c = m.config();
  std::printf("%-10s %10s %9s %9s %12s %9s\n", "test", "tok/s", "ms", "TFLOP/s", "GFLOP/tok", "%peak");
  int32_t seq = 100;
  for (int64_t n : sizes) {
    std::vector<int32_t> toks(n);
    for (int64_t i = 0; i < n; ++i) toks[i] = static_cast<int32_t>((i * 7919 + 13) % c.n_vocab);
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      if (!m.add_sequence(seq).is_ok()) return;
      model::ForwardOutput out;
      model::SeqChunk ch{.seq_id = seq, .tokens = toks, .pos0 = 0};
      m.backend().synchronize();
      const double t0 = now();
      if (Status st = m.forward(std::span(&ch, 1), out); !st.is_ok()) {
        std::fprintf(stderr, "pp%lld: %s\n", (long long)n, st.message().c_str());
        return;
      }
      m.backend().synchronize();
      best = std::min(best, now() - t0);
      (void)m.remove_sequence(seq);
      ++seq;
    }
    const double fl = prefill_flops_per_token(m, n / 2.0, std::min<double>(n / 2.0, c.n_swa));
    const double tfs = fl * n / best / 1e12;
    char name[32];
    std::snprintf(name, sizeof name, "pp%lld", (long long)n);
    std::printf("%-10s %10.0f %9.2f %9.1f %12.2f %8.1f%%\n", name, n / best, best * 1e3, tfs, fl / 1e9,
                100.0 * tfs / tc_peak);
  }
}

// Per-op cost at n_tok tokens (one full-attention layer's ops, eager, wall clock around
// synchronize; the first run of each op is a warm-up): where a prefill's time goes.
void prefill_op_costs(model::Model& m, int64_t n) {
  backend::Backend& be = m.backend();
  const auto& c = m.config();
  const auto& L = m.weights().layers[1];
  auto buf = [&](size_t bytes) { return std::move(be.alloc(bytes)).value(); };
  auto x = buf(n * c.n_embd * 4), xn = buf(n * c.n_embd * 4), q = buf(n * c.q_dim() * 4), k = buf(n * c.kv_dim() * 4),
       v = buf(n * c.kv_dim() * 4), attn = buf(n * c.q_dim() * 4), proj = buf(n * c.n_embd * 4),
       rlog = buf(n * c.n_expert * 4), rids = buf(n * c.n_expert_used * 4), rw = buf(n * c.n_expert_used * 4),
       pos = buf(n * 4), kc = buf(n * c.kv_dim() * 2), vc = buf(n * c.kv_dim() * 2), invf = buf(c.head_dim * 2),
       logits = buf(n * c.n_vocab * 4);
  std::vector<float> h(n * std::max(c.n_embd, c.q_dim()));
  for (size_t i = 0; i < h.size(); ++i) h[i] = 0.01f * static_cast<float>((i * 2654435761u) % 200) - 1.0f;
  be.upload(x->data(), h.data(), n * c.n_embd * 4);
  be.upload(xn->data(), h.data(), n * c.n_embd * 4);
  be.upload(attn->data(), h.data(), n * c.q_dim() * 4);
  be.upload(rlog->data(), h.data(), n * c.n_expert * 4);
  be.upload(invf->data(), m.rope().inv_freq.data(), c.head_dim / 2 * 4);
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(i);
  be.upload(pos->data(), p.data(), n * 4);
  backend::AttnSeq seq{.tok0 = 0, .n_tok = n, .pos0 = 0, .k = kc->data(), .v = vc->data(),
                       .capacity = static_cast<int32_t>(n), .ring = false};
  auto qkv = [&] {
    be.attn_qkv({.x = xn->as<float>(), .wq = L.wq, .wk = L.wk, .wv = L.wv, .bq = L.bq, .bk = L.bk, .bv = L.bv,
                 .q = q->as<float>(), .k = k->as<float>(), .v = v->as<float>(), .pos = pos->as<int32_t>(),
                 .inv_freq = invf->as<float>(), .mscale = 1.0f, .n_tok = n, .n_head = c.n_head,
                 .n_head_kv = c.n_head_kv, .head_dim = c.head_dim, .kv_type = DType::F16, .seqs = std::span(&seq, 1)});
  };
  auto att = [&](int32_t window) {
    be.attention({.q = q->as<float>(), .sinks = L.sinks, .out = attn->as<float>(), .kv_type = DType::F16,
                  .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim, .window = window,
                  .scale = 0.125f, .seqs = std::span(&seq, 1), .pos = pos->as<int32_t>()});
  };
  struct Op { const char* name; double per_layer; std::function<void()> f; };
  const Op ops[] = {
      {"attn_qkv", 1, qkv},
      {"attention full", 0.5, [&] { att(0); }},
      {"attention swa128", 0.5, [&] { att(static_cast<int32_t>(c.n_swa)); }},
      {"matmul wo", 1, [&] { be.matmul({.w = L.wo, .bias = L.bo, .x = attn->as<float>(), .y = proj->as<float>(), .n_tok = n}); }},
      {"add_rms_norm", 2, [&] { be.add_rms_norm({.y = x->as<float>(), .x = proj->as<float>(), .weight = L.attn_norm, .out = xn->as<float>(), .n_rows = n, .n = c.n_embd, .eps = 1e-5f}); }},
      {"matmul router", 1, [&] { be.matmul({.w = L.router, .bias = L.router_b, .x = xn->as<float>(), .y = rlog->as<float>(), .n_tok = n}); }},
      {"router top-4", 1, [&] { be.router({.logits = rlog->as<float>(), .ids = rids->as<int32_t>(), .weights = rw->as<float>(), .n_tok = n, .n_expert = c.n_expert, .k = c.n_expert_used}); }},
      {"moe", 1, [&] {
         be.moe({.x = xn->as<float>(), .ids = rids->as<int32_t>(), .weights = rw->as<float>(), .gate = L.gate_exps, .up = L.up_exps, .down = L.down_exps, .gate_bias = L.gate_b, .up_bias = L.up_b, .down_bias = L.down_b, .out = proj->as<float>(), .n_tok = n, .k = c.n_expert_used}); }},
      {"matmul output", 1.0 / static_cast<double>(c.n_layer), [&] {
         be.matmul({.w = m.weights().output, .bias = nullptr, .x = xn->as<float>(), .y = logits->as<float>(), .n_tok = n}); }},
  };
  std::printf("prefill ops at %lld tokens (eager, one full-attention layer's ops)\n", (long long)n);
  std::printf("%-20s %10s %12s\n", "op", "ms", "ms/forward");
  double total = 0;
  for (const Op& op : ops) {
    op.f();
    be.synchronize();
    const double t0 = now();
    for (int r = 0; r < 3; ++r) op.f();
    be.synchronize();
    const double ms = (now() - t0) * 1e3 / 3;
    total += ms * op.per_layer * c.n_layer;
    std::printf("%-20s %10.3f %12.2f\n", op.name, ms, ms * op.per_layer * c.n_layer);
  }
  std::printf("%-20s %10s %12.2f  (%.0f tok/s if nothing else ran)\n", "sum", "", total, n / (total * 1e-3));
}

// The backend sample op (token draw on the GPU, backend/sampling.h semantics) on rows of
// n_vocab random logits: microseconds per call (one graph-free launch, mean of 20 after a
// warm-up) for 1 and 64 rows and a few filter settings.
void sample_costs(model::Model& m) {
  backend::Backend& be = m.backend();
  const int64_t n = m.config().n_vocab;
  std::vector<float> h(64 * n);
  uint64_t z = 88172645463325252ull;
  for (auto& v : h) {  // xorshift: logits in [-12, 12)
    z ^= z << 13, z ^= z >> 7, z ^= z << 17;
    v = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 24.0f - 12.0f;
  }
  auto x = std::move(be.alloc(h.size() * 4)).value();
  auto prm = std::move(be.alloc(64 * sizeof(backend::SampleParams))).value();
  auto out = std::move(be.alloc(64 * 4)).value();
  be.upload(x->data(), h.data(), h.size() * 4);
  struct Setting { const char* name; float t; int32_t k; float p, minp; };
  const Setting settings[] = {{"temperature 1", 1, 0, 1, 0}, {"top-k 40", 1, 40, 1, 0}, {"top-p 0.9", 1, 0, 0.9f, 0},
                              {"min-p 0.05", 1, 0, 1, 0.05f}, {"k 40 p 0.9 minp 0.05", 0.7f, 40, 0.9f, 0.05f}};
  std::printf("%-24s %10s %10s\n", "sample op", "us/1 row", "us/64 rows");
  for (const Setting& st : settings) {
    std::vector<backend::SampleParams> ps(64);
    for (size_t i = 0; i < ps.size(); ++i)
      ps[i] = {.temperature = st.t, .top_k = st.k, .top_p = st.p, .min_p = st.minp, .seed = 7, .counter = i};
    be.upload(prm->data(), ps.data(), ps.size() * sizeof(ps[0]));
    double us[2];
    for (int w = 0; w < 2; ++w) {
      const int64_t rows = w ? 64 : 1;
      const backend::SampleArgs a{.x = x->as<float>(), .params = prm->as<backend::SampleParams>(),
                                  .out = out->as<int32_t>(), .n_rows = rows, .n = n};
      be.sample(a);
      be.synchronize();
      const double t0 = now();
      for (int r = 0; r < 20; ++r) be.sample(a);
      be.synchronize();
      us[w] = (now() - t0) * 1e6 / 20;
    }
    std::printf("%-24s %10.1f %10.1f\n", st.name, us[0], us[1]);
  }
}

// Batched decode, llama-batched-bench style: N sequences, each a 128-token prompt (one
// prefill call for all of them), then 128 steps of one round with one token per sequence
// (greedy on the GPU, only the token ids come back: what the engine does for greedy
// requests without logprobs). Pipelined (Model::submit / collect, the default) or, with
// --sync-steps, one forward() a step that returns with the tokens.
// Aggregate tok/s counts the decode tokens only.
void stream_rows(model::Model& m, const std::vector<int64_t>& streams, int64_t n_prompt, int64_t n_steps,
                 bool pipelined) {
  const auto& c = m.config();
  std::printf("%-12s %12s %12s %12s %10s %10s %10s\n", "streams", "decode tok/s", "ms/step", "prefill tok/s",
              "prep ms", "issue ms", "wait ms");
  int32_t base = 1000;
  for (int64_t n : streams) {
    std::vector<std::vector<int32_t>> prompts(n);
    std::vector<model::SeqChunk> chunks(n);
    for (int64_t i = 0; i < n; ++i) {
      if (!m.add_sequence(base + static_cast<int32_t>(i)).is_ok()) return;
      prompts[i].resize(n_prompt);
      for (int64_t t = 0; t < n_prompt; ++t) prompts[i][t] = static_cast<int32_t>((i * 131 + t * 7919 + 5) % c.n_vocab);
      chunks[i] = {.seq_id = base + static_cast<int32_t>(i), .tokens = prompts[i], .pos0 = 0, .greedy = true};
    }
    model::ForwardOutput out;
    double t0 = now();
    if (Status st = m.forward(chunks, out); !st.is_ok()) { std::fprintf(stderr, "%s\n", st.message().c_str()); return; }
    m.backend().synchronize();
    const double t_pre = now() - t0;
    std::vector<int32_t> next(n);
    for (int64_t i = 0; i < n; ++i) next[i] = out.token[i];
    t0 = now();
    m.reset_round_times();
    auto fail = [](const Status& st) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return false;
    };
    auto run = [&]() -> bool {
      if (!pipelined) {
        for (int64_t step = 0; step < n_steps; ++step) {
          for (int64_t i = 0; i < n; ++i)
            chunks[i] = {.seq_id = base + static_cast<int32_t>(i), .tokens = std::span(&next[i], 1),
                         .pos0 = static_cast<int32_t>(n_prompt + step), .greedy = true};
          if (Status st = m.forward(chunks, out); !st.is_ok()) return fail(st);
          for (int64_t i = 0; i < n; ++i) next[i] = out.token[i];
        }
        return true;
      }
      // Pipelined: step s + 1 is issued with every sequence fed its
      // step-s pick on the device, then step s's picks are collected.
      std::vector<int32_t> picks;
      for (int64_t step = 0; step < n_steps; ++step) {
        for (int64_t i = 0; i < n; ++i)
          chunks[i] = {.seq_id = base + static_cast<int32_t>(i),
                       .tokens = step == 0 ? std::span<const int32_t>(&next[i], 1) : std::span<const int32_t>(),
                       .pos0 = static_cast<int32_t>(n_prompt + step), .greedy = true, .feed = step > 0};
        if (Status st = m.submit(chunks); !st.is_ok()) return fail(st);
        if (step > 0) {
          if (Status st = m.collect(picks); !st.is_ok()) return fail(st);
        }
      }
      if (Status st = m.collect(picks); !st.is_ok()) return fail(st);
      return true;
    };
    if (!run()) return;
    const double secs = now() - t0;
    const auto& rt = m.round_times();  // host split of a step (wait ~ the device's time)
    std::printf("%-12lld %12.0f %12.2f %12.0f %10.3f %10.3f %10.3f\n", (long long)n, n * n_steps / secs,
                secs * 1e3 / n_steps, n * n_prompt / t_pre, rt.prep_s * 1e3 / n_steps, rt.issue_s * 1e3 / n_steps,
                rt.wait_s * 1e3 / n_steps);
    for (int64_t i = 0; i < n; ++i) (void)m.remove_sequence(base + static_cast<int32_t>(i));
    base += static_cast<int32_t>(n);
  }
}

// "512,2048" -> {512, 2048}.
std::vector<int64_t> int_list(const std::string& l) {
  std::vector<int64_t> out;
  for (size_t p0 = 0; p0 < l.size();) {
    size_t e = l.find(',', p0);
    if (e == std::string::npos) e = l.size();
    out.push_back(std::atoll(l.substr(p0, e - p0).c_str()));
    p0 = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, synth;
  int64_t synth_layers = 0;
  int64_t n_gen = 128, depth = 4096, n_ctx = 8192;
  bool graphs = true, ops = false;
  std::vector<int64_t> pp;
  int64_t pp_ops = 0;
  std::vector<int64_t> streams;
  bool sample = false, sync_steps = false;
  double tc_peak = 989.0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") path = next();
    else if (a == "--synth") synth = next();
    else if (a == "--synth-layers") synth_layers = std::atoll(next().c_str());
    else if (a == "--n-gen") n_gen = std::atoll(next().c_str());
    else if (a == "--depth") depth = std::atoll(next().c_str());
    else if (a == "--n-ctx") n_ctx = std::atoll(next().c_str());
    else if (a == "--no-graphs") graphs = false;
    else if (a == "--ops") ops = true;
    else if (a == "--pp") pp = int_list(next());
    else if (a == "--streams") streams = int_list(next());
    else if (a == "--sample") sample = true;
    else if (a == "--sync-steps") sync_steps = true;
    else if (a == "--pp-ops") pp_ops = std::atoll(next().c_str());
    else if (a == "--tc-peak") tc_peak = std::atof(next().c_str());
    else {
      std::fprintf(stderr, "usage: cuda_decode_bench (--model FILE | --synth FILE [--synth-layers 24]) [--n-gen 128] [--depth 4096] [--n-ctx 8192] [--no-graphs] [--ops] [--pp 512,2048] [--pp-ops 2048] [--tc-peak TFLOPS] [--streams 1,8,32,64] [--sync-steps] [--sample]\n");
      return 2;
    }
  }
  std::string why;
  if (!backend::cuda_available(&why)) {
    std::fprintf(stderr, "cuda_decode_bench: %s\n", why.c_str());
    return 1;
  }
  if (!synth.empty()) {
    if (Status s = write_synth(synth, synth_layers); !s.is_ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    path = synth;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double bw = copy_bandwidth();
  std::printf("device: %s, %d SMs, copy bandwidth %.0f GB/s (read + write)\n", prop.name, prop.multiProcessorCount, bw);

  auto reader = gguf::Reader::open(path);
  if (!reader.is_ok()) { std::fprintf(stderr, "%s\n", reader.status().message().c_str()); return 1; }
  model::ModelOptions o;
  o.kv_type = DType::F16;
  int64_t max_pp = pp_ops;
  for (int64_t v : pp) max_pp = std::max(max_pp, v);
  o.n_ctx = std::max(n_ctx, max_pp + 16);
  o.max_chunk_tokens = std::max<int64_t>(512, max_pp);  // one forward call per prefill row
  o.use_graphs = graphs;
  auto be = backend::make_cuda_backend();
  if (!be.is_ok()) { std::fprintf(stderr, "%s\n", be.status().message().c_str()); return 1; }
  const double t_load = now();
  auto mr = model::Model::load(std::move(reader).value(), o, std::move(be).value());
  if (!mr.is_ok()) { std::fprintf(stderr, "%s\n", mr.status().message().c_str()); return 1; }
  auto& m = *mr.value();
  const auto up = backend::cuda_upload_stats(m.backend());
  std::printf("load: %.1f s; weights uploaded %.2f GB in %.2f s = %.2f GB/s (mmap -> pinned -> device, + repack)\n",
              now() - t_load, up.bytes / 1e9, up.seconds, up.bytes / 1e9 / std::max(up.seconds, 1e-9));

  if (ops) op_costs(m);
  if (pp_ops > 0) prefill_op_costs(m, pp_ops);
  if (sample) sample_costs(m);
  if (!pp.empty()) prefill_rows(m, pp, tc_peak);
  if (!streams.empty()) stream_rows(m, streams, 128, 128, !sync_steps);
  if (n_gen <= 0) {
    dump_probes();
    return 0;
  }
  const double wb = weight_bytes_per_token(m);
  std::printf("weights read per token: %.3f GB\n", wb / 1e9);
  std::printf("%-22s %9s %9s %10s %9s %8s\n", "test", "tok/s", "ms/tok", "GB/tok", "GB/s", "%floor");
  auto report = [&](const char* name, int64_t at_depth, int64_t n, double secs) {
    const double bytes = wb + kv_bytes_per_token(m, at_depth + n / 2, 2);
    const double ms = secs * 1e3 / n;
    const double gbs = bytes / (secs / n) / 1e9;
    std::printf("%-22s %9.1f %9.3f %10.3f %9.0f %7.1f%%\n", name, n / secs, ms, bytes / 1e9, gbs, 100.0 * gbs / bw);
  };
  std::vector<int32_t> out;
  int32_t seq = 0;
  auto run = [&](int64_t pre, int64_t n, const char* name) -> bool {
    if (!m.add_sequence(seq).is_ok()) return false;
    int32_t tok = 1000 + seq;
    if (pre > 0) {
      const double t0 = now();
      if (Status s = m.decode_greedy(seq, tok, pre, out); !s.is_ok()) { std::fprintf(stderr, "%s\n", s.message().c_str()); return false; }
      std::printf("  (filled depth %lld by greedy decode: %.1f tok/s)\n", (long long)pre, pre / (now() - t0));
      tok = out.back();
    } else {
      if (Status s = m.decode_greedy(seq, tok, 2, out); !s.is_ok()) { std::fprintf(stderr, "%s\n", s.message().c_str()); return false; }  // warm + capture
      tok = out.back();
    }
    const double t0 = now();
    if (Status s = m.decode_greedy(seq, tok, n, out); !s.is_ok()) { std::fprintf(stderr, "%s\n", s.message().c_str()); return false; }
    const double secs = now() - t0;
    report(name, m.sequence_length(seq).value() - n, n, secs);
    std::printf("  first tokens: %d %d %d %d\n", out[0], out[1], out[2], out[3]);
    (void)m.remove_sequence(seq);
    ++seq;
    return true;
  };
  for (int rep = 0; rep < 3; ++rep)
    if (!run(0, n_gen, "tg128")) return 1;
  if (depth > 0 && !run(depth, n_gen, "tg128 @ depth")) return 1;
  dump_probes();
  return 0;
}
