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

using namespace brass;

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

Status write_synth(const std::string& path) {
  const tools::GptOssShape shape = tools::preset_20b();
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

}  // namespace

int main(int argc, char** argv) {
  std::string path, synth;
  int64_t n_gen = 128, depth = 4096, n_ctx = 8192;
  bool graphs = true, ops = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") path = next();
    else if (a == "--synth") synth = next();
    else if (a == "--n-gen") n_gen = std::atoll(next().c_str());
    else if (a == "--depth") depth = std::atoll(next().c_str());
    else if (a == "--n-ctx") n_ctx = std::atoll(next().c_str());
    else if (a == "--no-graphs") graphs = false;
    else if (a == "--ops") ops = true;
    else {
      std::fprintf(stderr, "usage: cuda_decode_bench (--model FILE | --synth FILE) [--n-gen 128] [--depth 4096] [--n-ctx 8192] [--no-graphs]\n");
      return 2;
    }
  }
  std::string why;
  if (!backend::cuda_available(&why)) {
    std::fprintf(stderr, "cuda_decode_bench: %s\n", why.c_str());
    return 1;
  }
  if (!synth.empty()) {
    if (Status s = write_synth(synth); !s.is_ok()) {
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
  o.n_ctx = n_ctx;
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
  return 0;
}
