// The server's decode throughput through the Engine (continuous batching, the scheduler,
// sampling on the engine thread), pipelined steps on and off, on any backend:
//
//   engine_bench -m FILE [--device cpu|cuda] [--streams 1,8,32] [--prompt 128] [--gen 128]
//
// Per row: S requests of a --prompt-token random prompt, greedy with only the pick coming
// back (as a chat request without logprobs), --gen tokens each, submitted at once. The
// prompts are prefilled over the first steps (max(512, S) tokens a step, mixed with decode),
// so the clock starts when the last completion has its first token (every sequence then
// decodes) and stops at the last token; tokens are timed as the engine thread emits them
// (Request::on_event). Aggregate tok/s = tokens in that window / its seconds. The
// pipelined-steps count (of all steps) shows which mode ran. The two modes'
// completions are compared: greedy tokens differ only after a near tie (different batch
// shapes may round differently), so the number of differing completions is printed.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/load_model.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "runtime/engine.h"

using namespace brass;
using Clock = std::chrono::steady_clock;

namespace {

struct Row {
  double tps = 0;
  uint64_t pipelined = 0, steps = 0;
  std::vector<std::vector<int32_t>> tokens;
};

Result<Row> run_row(const std::string& path, cli::Device device, bool pipeline, int64_t streams,
                    int64_t n_prompt, int64_t n_gen, uint32_t seed) {
  model::ModelOptions mo;
  mo.n_ctx = n_prompt + n_gen + 8;
  mo.kv_tokens = streams * (n_prompt + n_gen + 64);
  BRASS_ASSIGN_OR_RETURN(auto reader, gguf::Reader::open(path));
  BRASS_ASSIGN_OR_RETURN(auto m, cli::load_model_on(std::move(reader), device, mo, std::nullopt));
  const int64_t n_vocab = m->config().n_vocab;
  runtime::EngineOptions eo;
  eo.parallel = static_cast<int32_t>(streams);
  eo.max_queue = static_cast<int32_t>(streams);
  eo.prefix_cache_seqs = 0;
  eo.step_tokens = std::max<int64_t>(512, streams);
  eo.pipeline = pipeline;
  BRASS_ASSIGN_OR_RETURN(auto e, runtime::Engine::create(std::move(m), eo));
  std::mt19937 gen(seed);
  std::vector<std::shared_ptr<runtime::RequestHandle>> hs;
  Row row;
  row.tokens.resize(static_cast<size_t>(streams));
  std::vector<std::vector<Clock::time_point>> times(static_cast<size_t>(streams));
  std::mutex mu;
  std::condition_variable cv;
  int64_t done = 0;
  for (int64_t i = 0; i < streams; ++i) {
    runtime::Request r;
    for (int64_t t = 0; t < n_prompt; ++t)
      r.prompt.push_back(std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(n_vocab) - 1)(gen));
    r.sampling.temperature = 0.0f;
    r.token_logprob = false;
    r.max_tokens = n_gen;
    r.on_event = [&, i](const runtime::Event& ev) {  // the engine thread
      std::lock_guard lk(mu);
      if (ev.kind == runtime::Event::Kind::kToken) {
        times[i].push_back(Clock::now());
        row.tokens[i].push_back(ev.token);
      } else if (ev.kind == runtime::Event::Kind::kDone) {
        ++done;
        cv.notify_all();
      }
    };
    auto s = e->submit(std::move(r));
    if (!s.ok()) return Status::errorf("submit: {}", s.message);
    hs.push_back(s.handle);
  }
  {
    std::unique_lock lk(mu);
    if (!cv.wait_for(lk, std::chrono::minutes(10), [&] { return done == streams; }))
      return Status::error("timed out waiting for the completions");
  }
  if (!e->wait_idle()) return Status::error("the engine did not go idle");
  Clock::time_point t0{}, t1{};
  for (const auto& t : times) {
    if (t.empty()) return Status::error("a completion produced no token");
    t0 = std::max(t0, t.front());
    t1 = std::max(t1, t.back());
  }
  int64_t in_window = 0;
  for (const auto& t : times) in_window += std::count_if(t.begin(), t.end(), [&](auto x) { return x > t0; });
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  row.tps = in_window / std::max(secs, 1e-9);
  const auto met = e->metrics();
  row.pipelined = met.pipelined_steps_total;
  row.steps = met.steps_total;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, device = "auto", streams_s = "1,8,32";
  int64_t n_prompt = 128, n_gen = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "-m") path = v;
    else if (a == "--device") device = v;
    else if (a == "--streams") streams_s = v;
    else if (a == "--prompt") n_prompt = std::atoll(v.c_str());
    else if (a == "--gen") n_gen = std::atoll(v.c_str());
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  if (path.empty() || n_prompt < 1 || n_gen < 2) {
    std::fprintf(stderr, "usage: engine_bench -m FILE [--device cpu|cuda|auto] [--streams 1,8,32] [--prompt N] [--gen N]\n");
    return 2;
  }
  auto streams = cli::parse_list("--streams", streams_s, 1, 4096);
  if (!streams.is_ok()) { std::fprintf(stderr, "%s\n", streams.status().message().c_str()); return 2; }
  auto dev = cli::parse_device(device);
  if (!dev.is_ok()) { std::fprintf(stderr, "%s\n", dev.status().message().c_str()); return 2; }
  auto resolved = cli::resolve_device(dev.value());
  if (!resolved.is_ok()) { std::fprintf(stderr, "%s\n", resolved.status().message().c_str()); return 2; }
  std::printf("%-8s %12s %12s %8s %10s %10s\n", "streams", "pipelined", "one-a-step", "gain", "pipe-steps", "differ");
  for (int64_t s : streams.value()) {
    auto on = run_row(path, resolved.value(), true, s, n_prompt, n_gen, 7);
    auto off = run_row(path, resolved.value(), false, s, n_prompt, n_gen, 7);
    if (!on.is_ok() || !off.is_ok()) {
      std::fprintf(stderr, "%s\n", (!on.is_ok() ? on.status() : off.status()).message().c_str());
      return 1;
    }
    int differ = 0;
    for (size_t i = 0; i < on.value().tokens.size(); ++i) differ += on.value().tokens[i] != off.value().tokens[i];
    std::printf("%-8lld %12.1f %12.1f %7.1f%% %5llu/%-4llu %10d\n", static_cast<long long>(s), on.value().tps,
                off.value().tps, 100.0 * (on.value().tps / off.value().tps - 1.0),
                static_cast<unsigned long long>(on.value().pipelined), static_cast<unsigned long long>(on.value().steps),
                differ);
  }
  return 0;
}
