// `brass bench`: llama-bench style speed of one model on one device.
//
//   pp<P>           a prefill of P random tokens in ONE forward call (max_chunk_tokens is
//                   raised to the largest P), fresh sequence each repetition: tok/s.
//   tg<N> @ d<D>    after a prefill of D random tokens (not timed), N greedy decode steps
//                   through Model::decode_greedy (the backend picks each next token; on
//                   CUDA each step is one captured graph launch and the host syncs once);
//                   each repetition truncates the sequence back to D: tok/s, ms/token,
//                   achieved GB/s and % of the floor.
//   x<S> tg<G>      batched decode (llama-batched-bench's setup): S sequences, each a
//                   --stream-prompt token prompt (one forward call for all, not timed),
//                   then G steps of ONE forward call carrying one greedy token per
//                   sequence (picked on the backend; only ids come back, as the engine
//                   does for greedy requests): aggregate tok/s = S * G / seconds, ms per
//                   step, GB/s and % of the floor.
// Before timing: one warm-up (a short prefill and a few decode steps at each depth, which
// also captures the decode graphs; an untimed prefill of each pp size; a short batched
// run of each --streams size, which records its graph). Every row reports the mean and
// standard deviation over --reps repetitions.
//
// Bytes read per decoded token (the numerator of GB/s), from the loaded model:
//   weights:  per layer: wq, wk, wv, wo, the router matrix, and n_expert_used x (gate +
//             up + down) of ONE expert each (the selected experts; for a batched step of
//             S tokens the experts any token selects, n_expert * (1 - (1 - k / n_expert)^S)
//             under uniform routing, each read once), plus the f32 vectors
//             the step reads (2 norms, q/k/v/o biases, sinks, router bias, the selected
//             experts' biases); plus one token_embd row, output_norm and the whole output
//             head (n_vocab x n_embd).
//   KV:       the decode step at position p reads p + 1 cached K and V rows per full-
//             attention layer and min(p + 1, n_swa) per sliding-window layer, each row
//             kv_dim elements of the KV type (f32 on the CPU, f16 on CUDA); averaged over
//             the N steps at positions D .. D + N - 1 (and summed over a batch's sequences).
// GB/s = bytes per token / seconds per token. Activations, scratch and KV writes are left
// out (each is < 0.1% of the 20b step).
//
// The floor (the bandwidth the device can actually sustain, measured here, printed):
//   cpu:   a read-only probe: --threads threads sum disjoint parts of a 1 GiB buffer
//          (AVX2 when the CPU has it); best of 5 passes; bytes read / time.
//   cuda:  cudaMemcpy device-to-device of 1 GiB, best of 5 after a warm-up; counted as
//          bytes read + bytes written (2 GiB per copy), as a decode step only reads.
// % floor = achieved GB/s / floor GB/s. --floor GB/s skips the probe.
//
// Without -m the built-in tiny model is used (fast; a smoke test, not a measurement).
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/bandwidth_probe.h"
#include "cli/commands.h"
#include "cli/load_model.h"
#include "core/env.h"
#include "model/model.h"

#ifdef BRASS_CLI_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace brass::cli {

Result<std::vector<int64_t>> parse_list(const std::string& flag, const std::string& s, int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  std::string t = s;
  for (char& c : t) if (c == ',') c = ' ';
  std::istringstream in(t);
  std::string w;
  while (in >> w) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(w.c_str(), &end, 10);
    if (!end || *end || errno != 0 || x < lo || x > hi) {
      return Status::errorf("{}: \"{}\" is not an integer in [{}, {}]", flag, w, lo, hi);
    }
    v.push_back(x);
  }
  if (v.empty()) return Status::errorf("{}: no values given (expected a comma-separated list, e.g. 0,4096)", flag);
  return v;
}

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// ---- the floor probes ----


#ifdef BRASS_CLI_HAVE_CUDA
Result<double> cuda_copy_bandwidth() {
  const size_t n = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  auto check = [](cudaError_t e, const char* what) -> Status {
    if (e == cudaSuccess) return Status::ok();
    return Status::errorf("bench: CUDA bandwidth probe: {}: {}", what, cudaGetErrorString(e));
  };
  Status st = check(cudaMalloc(&a, n), "cudaMalloc 1 GiB");
  if (st.is_ok()) st = check(cudaMalloc(&b, n), "cudaMalloc 1 GiB");
  if (st.is_ok()) st = check(cudaMemset(a, 1, n), "cudaMemset");
  double best = 0;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  if (st.is_ok()) st = check(cudaEventCreate(&e0), "cudaEventCreate");
  if (st.is_ok()) st = check(cudaEventCreate(&e1), "cudaEventCreate");
  for (int i = 0; i < 6 && st.is_ok(); ++i) {
    st = check(cudaEventRecord(e0), "cudaEventRecord");
    if (st.is_ok()) st = check(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    if (st.is_ok()) st = check(cudaEventRecord(e1), "cudaEventRecord");
    if (st.is_ok()) st = check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    if (st.is_ok()) st = check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (st.is_ok() && i > 0 && ms > 0) best = std::max(best, 2.0 * n / (ms * 1e-3) / 1e9);  // read + write
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (a) cudaFree(a);
  if (b) cudaFree(b);
  if (!st.is_ok()) return st;
  return best;
}
#endif

// ---- bytes per decoded token ----

// Weight bytes one forward step of n_tok tokens reads (one per sequence) when it touches
// `experts` experts per layer.
double weight_bytes_per_step(const model::Model& m, double experts, int64_t n_tok = 1) {
  const auto& c = m.config();
  const auto& w = m.weights();
  auto whole = [](const backend::WeightView& v) { return double(v.row_bytes()) * v.ne[1] * v.ne[2] * v.ne[3]; };
  double b = 0;
  for (const auto& L : w.layers) {
    b += whole(L.wq) + whole(L.wk) + whole(L.wv) + whole(L.wo) + whole(L.router);
    // One 2-D slice of each expert tensor per touched expert.
    b += experts * (L.gate_exps.matrix_bytes() + L.up_exps.matrix_bytes() + L.down_exps.matrix_bytes());
    // f32 vectors: attn/post-attn norms, q/k/v/o biases, sinks, router bias, expert biases.
    const double floats = 2.0 * c.n_embd + c.q_dim() + 2.0 * c.kv_dim() + c.n_embd + c.n_head + c.n_expert +
                          experts * (2.0 * c.n_ff + c.n_embd);
    b += 4.0 * floats;
  }
  b += double(n_tok) * w.token_embd.row_bytes() + 4.0 * c.n_embd + whole(w.output);
  return b;
}

// Experts per layer a step of n_tok tokens touches under uniform routing (each token picks
// n_expert_used distinct experts): n_expert * (1 - (1 - k / n_expert)^n_tok).
double touched_experts(const model::Model& m, int64_t n_tok) {
  const auto& c = m.config();
  const double miss = 1.0 - double(c.n_expert_used) / double(c.n_expert);
  return double(c.n_expert) * (1.0 - std::pow(miss, double(n_tok)));
}

// Mean KV bytes read per step over the steps at positions d .. d + n - 1.
double kv_bytes_per_token(const model::Model& m, int64_t d, int64_t n, int64_t elt_bytes) {
  const auto& c = m.config();
  double rows = 0;  // cached (K, V) row pairs read, summed over the steps and layers
  for (int64_t p = d; p < d + n; ++p) {
    rows += double(c.n_full_layers()) * (p + 1) + double(c.n_swa_layers()) * std::min<int64_t>(p + 1, c.n_swa);
  }
  return n > 0 ? rows / n * 2.0 * c.kv_dim() * elt_bytes : 0.0;
}

struct Row {
  std::string test;
  int64_t n_prompt = 0, n_gen = 0, depth = 0;
  std::vector<double> secs;   // one per repetition
  double bytes_per_tok = 0;   // decode rows only (batched rows: bytes per step)
  int64_t streams = 0;        // batched decode rows: sequences per step
  std::vector<double> prefill_secs;  // batched rows: the untimed prompts' forward call
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / v.size();
}
double stdev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double mu = mean(v);
  double s = 0;
  for (double x : v) s += (x - mu) * (x - mu);
  return std::sqrt(s / (v.size() - 1));
}

}  // namespace

Runner add_bench(CLI::App& app) {
  struct Opts {
    std::string model, device = "auto", pp = "512", tg = "128", depth = "0", streams = "0", json_file;
    int reps = 5, threads = 0;
    int64_t stream_prompt = 128, stream_gen = 128, kv_tokens = 0;
    double floor = 0;
    bool json = false;
    std::string moe_tiles = "auto";
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF file (default: the built-in tiny model: a smoke test, not a measurement)");
  app.add_option("--device", o->device, "cpu | cuda | auto (auto: CUDA when built with it and a GPU is present)")
      ->capture_default_str();
  app.add_option("--moe-tiles", o->moe_tiles, kMoeTilesHelp)->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  app.add_option("-p,--n-prompt", o->pp, "prefill sizes, comma-separated (0: no prefill rows)")->capture_default_str();
  app.add_option("-n,--n-gen", o->tg, "decode lengths, comma-separated (0: no decode rows)")->capture_default_str();
  app.add_option("-d,--depth", o->depth, "KV depths the decode rows start at, comma-separated")->capture_default_str();
  app.add_option("-s,--streams", o->streams, "batched decode rows: sequences per step, comma-separated (0: none)")
      ->capture_default_str();
  app.add_option("--stream-prompt", o->stream_prompt, "prompt tokens of each batched sequence")->capture_default_str();
  app.add_option("--stream-gen", o->stream_gen, "decode steps of the batched rows")->capture_default_str();
  app.add_option("--kv-tokens", o->kv_tokens,
                 "positions of the KV block pool (0: what the largest row needs, S x (P + G) for x<S>)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))->capture_default_str();
  app.add_option("-r,--reps", o->reps, "repetitions per row (mean and standard deviation)")->capture_default_str();
  app.add_option("-t,--threads", o->threads, "CPU threads (default: BRASS_THREADS or all cores)");
  app.add_option("--floor", o->floor, "bandwidth floor in GB/s (default: measured, see below)");
  app.add_flag("--json", o->json, "print one JSON object with every row (progress goes to stderr)");
  app.add_option("--json-file", o->json_file, "also write that JSON object to FILE (the table still prints)");
  app.footer("pp<P>: a prefill of P random tokens in one forward call. tg<N> @ d<D>: N greedy decode steps\n"
             "(tokens picked by the backend) after a prefill of D tokens. GB/s counts the bytes a decoded token\n"
             "reads: attention + router + output-head weights, the n_expert_used selected experts per layer, one\n"
             "token-embedding row, and the KV cache at that depth. The floor is measured: on the CPU a\n"
             "multi-threaded 1 GiB read probe, on CUDA a 1 GiB device-to-device copy (read + write).\n"
             "x<S> tg<G>: S sequences decoded together, one forward call per step after prompts of\n"
             "--stream-prompt tokens: aggregate tok/s; its ms/tok column is ms per step, and GB/s counts the experts any of\n"
             "the S tokens touches (uniform routing) once per step.");
  return [o]() -> int {
    auto pp = parse_list("-p", o->pp, 0, 1 << 20);
    if (!pp) return fail(pp.status().message());
    auto tg = parse_list("-n", o->tg, 0, 1 << 20);
    if (!tg) return fail(tg.status().message());
    auto depths = parse_list("--depth", o->depth, 0, 1 << 24);
    if (!depths) return fail(depths.status().message());
    auto streams = parse_list("--streams", o->streams, 0, 4096);
    if (!streams) return fail(streams.status().message());
    std::erase(*streams, 0);
    if (o->stream_prompt < 1 || o->stream_prompt > (1 << 20))
      return fail(fmt::format("--stream-prompt: {} is not in [1, {}]", o->stream_prompt, 1 << 20));
    if (o->stream_gen < 1 || o->stream_gen > (1 << 20))
      return fail(fmt::format("--stream-gen: {} is not in [1, {}]", o->stream_gen, 1 << 20));
    if (o->reps < 1 || o->reps > 1000) return fail(fmt::format("--reps: {} is not in [1, 1000]", o->reps));
    if (o->threads < 0) return fail(fmt::format("--threads: {} must be >= 0", o->threads));
    if (o->floor < 0) return fail(fmt::format("--floor: {} must be >= 0 (0: measure)", o->floor));
    std::erase(*pp, 0);
    std::erase(*tg, 0);
    if (pp->empty() && tg->empty() && streams->empty())
      return fail("nothing to run: every -p, -n and --streams value is 0");
    auto dev = parse_device(o->device);
    if (!dev) return fail(dev.status().message());
    auto resolved = resolve_device(*dev);
    if (!resolved) return fail(resolved.status().message());

    constexpr int64_t kWarmSteps = 4;
    const int64_t max_pp = pp->empty() ? 0 : *std::max_element(pp->begin(), pp->end());
    const int64_t max_tg = tg->empty() ? 0 : *std::max_element(tg->begin(), tg->end());
    const int64_t max_d = tg->empty() ? 0 : *std::max_element(depths->begin(), depths->end());
    const int64_t stream_len = streams->empty() ? 0 : o->stream_prompt + o->stream_gen;
    const int64_t need_ctx = std::max({max_pp, max_d + std::max(max_tg, kWarmSteps), 16 + kWarmSteps, stream_len});

    // The floor first, on an idle device (before the weights take the memory).
    const int threads = o->threads > 0 ? o->threads : env::threads();
    double floor = o->floor;
    std::string floor_method = "given (--floor)";
    if (floor <= 0) {
      std::fprintf(stderr, "brass: bench: measuring the bandwidth floor...\n");
      if (*resolved == Device::kCuda) {
#ifdef BRASS_CLI_HAVE_CUDA
        auto bw = cuda_copy_bandwidth();
        if (!bw) return fail(bw.status().message());
        floor = *bw;
        floor_method = "cudaMemcpy device-to-device 1 GiB, read + write, best of 5";
#endif
      } else {
        auto bw = backend::cpu::read_bandwidth_gbs(threads);
        if (!bw) return fail(bw.status().message());
        floor = *bw;
        floor_method = fmt::format("1 GiB read, {} threads, best of 5", threads);
      }
    }

    LoadRequest req;
    req.model = o->model;
    req.device = *resolved;
    req.tokenizer = false;
    auto tiles = parse_moe_tiles(o->moe_tiles);
    if (!tiles) return fail(tiles.status().message());
    req.moe_tiles = *tiles;
    req.options.n_threads = o->threads;
    req.options.n_ctx = need_ctx;
    {  // the pool: the largest row's sequences at once (one per row, or the S streams)
      const int64_t bs = req.options.kv_block_size;
      const int64_t max_s = streams->empty() ? 0 : *std::max_element(streams->begin(), streams->end());
      auto blocks = [&](int64_t n) { return (n + bs - 1) / bs; };
      req.options.kv_tokens =
          o->kv_tokens > 0 ? o->kv_tokens : std::max(blocks(need_ctx), max_s * blocks(stream_len)) * bs;
    }
    // One forward call per prefill row; and the sliding-window ring (n_swa + max_chunk - 1
    // rows) must still hold the window at depth D after N steps, so truncating back works.
    req.options.max_chunk_tokens = std::max({max_pp, max_tg + kWarmSteps, int64_t{512}, o->stream_prompt});
    std::fprintf(stderr, "brass: bench: loading %s on %s...\n", o->model.empty() ? "the built-in model" : o->model.c_str(),
                 device_name(*resolved));
    auto loaded = load_model(req);
    if (!loaded) return fail(loaded.status().message());
    model::Model& m = *loaded->model;
    const auto& c = m.config();
    if (need_ctx > c.n_ctx_train) {
      return fail(fmt::format("bench: the rows need a context of {} tokens; {} was trained for {}", need_ctx,
                              loaded->path, c.n_ctx_train));
    }
    const int64_t kv_elt = traits(m.kv_cache().type()).block_bytes;  // f32 / f16: one element per block
    const double wbytes = weight_bytes_per_step(m, double(c.n_expert_used));
    const std::string model_name = std::filesystem::path(loaded->path).filename().string();
    std::fprintf(stderr, "brass: bench: %s\nbrass: bench: device %s, loaded in %.1f s; floor %.1f GB/s (%s)\n",
                 m.summary().c_str(), loaded->device_desc.c_str(), loaded->load_s, floor, floor_method.c_str());

    std::mt19937 rng(1234);  // random prompt tokens (fixed: every run reads the same rows)
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.n_vocab - 1));
    std::vector<int32_t> tokens(static_cast<size_t>(std::max({max_pp, max_d, int64_t{16}})));
    for (auto& t : tokens) t = pick(rng);
    model::ForwardOutput out;
    int32_t seq = 0;
    auto prefill = [&](int32_t s, int64_t n) -> Status {
      model::SeqChunk ch{s, std::span<const int32_t>(tokens.data(), static_cast<size_t>(n)), 0, false};
      return m.forward(std::span<const model::SeqChunk>(&ch, 1), out);
    };
    std::vector<int32_t> picked;

    // Warm-up: a short prefill and a few greedy steps (first launches, graph capture).
    {
      if (auto s = m.add_sequence(seq); !s) return fail(s.message());
      if (auto s = prefill(seq, std::min<int64_t>(16, std::max<int64_t>(max_pp, 1))); !s) return fail(s.message());
      if (auto s = m.decode_greedy(seq, tokens[0], kWarmSteps, picked); !s) return fail(s.message());
      (void)m.remove_sequence(seq++);
    }

    std::vector<Row> rows;
    for (int64_t p : *pp) {
      Row r{fmt::format("pp{}", p), p, 0, 0, {}, 0, 0, {}};
      for (int rep = -1; rep < o->reps; ++rep) {  // rep -1: warm-up (scratch growth, GEMM plans at this size)
        if (auto s = m.add_sequence(seq); !s) return fail(s.message());
        const double t0 = now_s();
        if (auto s = prefill(seq, p); !s) return fail(s.message());
        if (rep >= 0) r.secs.push_back(now_s() - t0);
        (void)m.remove_sequence(seq++);
      }
      std::fprintf(stderr, "brass: bench: %s: %.1f tok/s\n", r.test.c_str(), p / mean(r.secs));
      rows.push_back(std::move(r));
    }
    for (int64_t d : *depths) {
      if (tg->empty()) break;
      if (auto s = m.add_sequence(seq); !s) return fail(s.message());
      if (d > 0) {
        const double t0 = now_s();
        if (auto s = prefill(seq, d); !s) return fail(s.message());
        std::fprintf(stderr, "brass: bench: depth %lld filled in %.2f s\n", static_cast<long long>(d), now_s() - t0);
      }
      const int32_t first = tokens[static_cast<size_t>(d) % tokens.size()];
      if (auto s = m.decode_greedy(seq, first, kWarmSteps, picked); !s) return fail(s.message());
      for (int64_t n : *tg) {
        Row r{d > 0 ? fmt::format("tg{} @ d{}", n, d) : fmt::format("tg{}", n), 0, n, d, {}, 0, 0, {}};
        r.bytes_per_tok = wbytes + kv_bytes_per_token(m, d, n, kv_elt);
        for (int rep = 0; rep < o->reps; ++rep) {
          if (auto s = m.truncate_sequence(seq, d); !s) return fail(s.message());
          const double t0 = now_s();
          if (auto s = m.decode_greedy(seq, first, n, picked); !s) return fail(s.message());
          r.secs.push_back(now_s() - t0);
        }
        std::fprintf(stderr, "brass: bench: %s: %.1f tok/s\n", r.test.c_str(), n / mean(r.secs));
        rows.push_back(std::move(r));
      }
      (void)m.remove_sequence(seq++);
    }

    // Batched decode: S sequences of a P-token prompt (one forward call, greedy picks),
    // then G rounds with one greedy token per sequence, pipelined (Model::submit: round
    // N + 1 is issued with each sequence fed its round-N pick on the backend, then round N
    // is collected). Each sequence is added with max_len P + G (device KV sized for that,
    // not for n_ctx).
    const int64_t P = o->stream_prompt, G = o->stream_gen;
    auto stream_run = [&](int64_t S, int64_t steps, Row* r) -> Status {
      std::vector<std::vector<int32_t>> prompts(S);
      std::vector<model::SeqChunk> chunks(S);
      std::vector<int32_t> next(S);
      const int32_t s0 = seq;
      seq += static_cast<int32_t>(S);
      for (int64_t i = 0; i < S; ++i) {
        BRASS_TRY(m.add_sequence(s0 + static_cast<int32_t>(i), P + G));
        prompts[i].resize(P);
        for (auto& t : prompts[i]) t = pick(rng);
        chunks[i] = {.seq_id = s0 + static_cast<int32_t>(i), .tokens = prompts[i], .pos0 = 0, .greedy = true};
      }
      double t0 = now_s();
      Status st = m.forward(chunks, out);
      if (r && st) r->prefill_secs.push_back(now_s() - t0);
      for (int64_t i = 0; i < S && st; ++i) next[i] = out.token[i];
      t0 = now_s();
      std::vector<int32_t> picks;
      for (int64_t step = 0; step < steps && st; ++step) {
        for (int64_t i = 0; i < S; ++i)
          chunks[i] = {.seq_id = s0 + static_cast<int32_t>(i),
                       .tokens = step == 0 ? std::span<const int32_t>(&next[i], 1) : std::span<const int32_t>(),
                       .pos0 = static_cast<int32_t>(P + step), .greedy = true, .feed = step > 0};
        st = m.submit(chunks);
        if (st && step > 0) st = m.collect(picks);
      }
      while (m.in_flight() > 0) {
        Status c = m.collect(picks);
        if (st) st = c;
      }
      if (r && st) r->secs.push_back(now_s() - t0);
      for (int64_t i = 0; i < S; ++i) (void)m.remove_sequence(s0 + static_cast<int32_t>(i));
      return st;
    };
    for (int64_t S : *streams) {
      Row r{fmt::format("x{} tg{}", S, G), P, G, 0, {}, 0, S, {}};
      r.bytes_per_tok = weight_bytes_per_step(m, touched_experts(m, S), S) + double(S) * kv_bytes_per_token(m, P, G, kv_elt);
      // Warm-up: first launches of this batch size, its graph recorded.
      if (auto s = stream_run(S, std::min<int64_t>(G, kWarmSteps), nullptr); !s) return fail(s.message());
      for (int rep = 0; rep < o->reps; ++rep)
        if (auto s = stream_run(S, G, &r); !s) return fail(s.message());
      std::fprintf(stderr, "brass: bench: %s: %.1f tok/s\n", r.test.c_str(), S * G / mean(r.secs));
      rows.push_back(std::move(r));
    }

    // Per row: tok/s of each repetition, then mean / stdev (as llama-bench: avg_ts, stdev_ts).
    struct Stats { double tps, tps_sd, ms, gbs, pct; bool decode; };
    auto stats = [&](const Row& r) {
      const int64_t n = r.n_gen > 0 ? r.n_gen * std::max<int64_t>(r.streams, 1) : r.n_prompt;
      const int64_t steps = r.n_gen > 0 ? r.n_gen : r.n_prompt;  // ms column: per step (a token unless batched)
      std::vector<double> tps;
      for (double s : r.secs) tps.push_back(n / s);
      Stats st{mean(tps), stdev(tps), 1e3 * mean(r.secs) / steps, 0, 0, r.n_gen > 0};
      if (st.decode) {
        st.gbs = r.bytes_per_tok * st.tps / double(std::max<int64_t>(r.streams, 1)) / 1e9;  // bytes/step x steps/s
        st.pct = floor > 0 ? 100.0 * st.gbs / floor : 0.0;
      }
      return st;
    };
    {
      nlohmann::json j;
      j["model"] = loaded->path;
      j["model_summary"] = m.summary();
      j["random_weights"] = loaded->builtin || loaded->synthetic;
      j["device"] = device_name(loaded->device);
      j["backend"] = loaded->device_desc;
      j["threads"] = m.backend().n_threads();
      j["kv_type"] = std::string(dtype_name(m.kv_cache().type()));
      j["reps"] = o->reps;
      j["load_s"] = loaded->load_s;
      j["floor_gb_s"] = floor;
      j["floor_method"] = floor_method;
      j["weight_bytes_per_token"] = wbytes;
      j["rows"] = nlohmann::json::array();
      for (const Row& r : rows) {
        const Stats st = stats(r);
        nlohmann::json row = {{"test", r.test},     {"n_prompt", r.n_prompt}, {"n_gen", r.n_gen},
                              {"depth", r.depth},   {"tok_s", st.tps},        {"tok_s_stdev", st.tps_sd},
                              {"ms_per_tok", st.ms}, {"samples_s", r.secs}};
        if (r.streams > 0) {
          row["streams"] = r.streams;
          row["ms_per_step"] = st.ms;
          row["bytes_per_step"] = r.bytes_per_tok;
          std::vector<double> pre;
          for (double s : r.prefill_secs) pre.push_back(double(r.streams * r.n_prompt) / s);
          row["prefill_tok_s"] = mean(pre);
        }
        if (st.decode) {
          row["bytes_per_tok"] = r.streams > 0 ? r.bytes_per_tok / double(r.streams) : r.bytes_per_tok;
          row["gb_s"] = st.gbs;
          row["pct_floor"] = st.pct;
        } else {
          row["bytes_per_tok"] = nullptr;
          row["gb_s"] = nullptr;
          row["pct_floor"] = nullptr;
        }
        j["rows"].push_back(std::move(row));
      }
      if (!o->json_file.empty()) {
        std::FILE* f = std::fopen(o->json_file.c_str(), "w");
        if (!f) return fail(fmt::format("--json-file: cannot write {}: {}", o->json_file, std::strerror(errno)));
        const std::string text = j.dump(2) + "\n";
        const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
        if (std::fclose(f) != 0 || !ok) return fail(fmt::format("--json-file: error writing {}", o->json_file));
      }
      if (o->json) {
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
      }
    }
    std::printf("model: %s (%s)%s\n", loaded->path.c_str(), m.summary().c_str(),
                loaded->builtin || loaded->synthetic ? " [random weights]" : "");
    std::printf("device: %s | kv %s | floor %.1f GB/s (%s) | weights read per decoded token %.3f GB\n\n",
                loaded->device_desc.c_str(), std::string(dtype_name(m.kv_cache().type())).c_str(), floor, floor_method.c_str(),
                wbytes / 1e9);
    const std::string dev_name = device_name(loaded->device);
    const size_t wm = std::max<size_t>(5, model_name.size()), wd = std::max<size_t>(6, dev_name.size());
    std::printf("| %-*s | %-*s | %14s | %18s | %9s | %8s | %7s |\n", int(wm), "model", int(wd), "device", "test", "tok/s",
                "ms/tok", "GB/s", "% floor");
    std::printf("| %s | %s | -------------: | -----------------: | --------: | -------: | ------: |\n",
                std::string(wm, '-').c_str(), std::string(wd, '-').c_str());
    for (const Row& r : rows) {
      const Stats st = stats(r);
      const std::string tps = fmt::format("{:.2f} ± {:.2f}", st.tps, st.tps_sd);
      const std::string gbs = st.decode ? fmt::format("{:.1f}", st.gbs) : "-";
      const std::string pct = st.decode ? fmt::format("{:.1f}", st.pct) : "-";
      // fmt pads by display width ("±" is two bytes).
      fmt::print("| {:<{}} | {:<{}} | {:>14} | {:>18} | {:>9.3f} | {:>8} | {:>7} |\n", model_name, wm, dev_name, wd, r.test,
                 tps, st.ms, gbs, pct);
    }
    return 0;
  };
}

}  // namespace brass::cli
