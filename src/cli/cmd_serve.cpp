// `brass serve`: the OpenAI-compatible HTTP server and web chat UI (src/server). Binds
// the listener first (loopback by default), loads the model in the background with a
// progress bar (/health answers 503 until it is ready), and runs until SIGINT/SIGTERM.
// `--device cpu|cuda|auto` is resolved here, before binding (asking for cuda where it is
// unavailable fails at once), and the model is built through the CLI's shared loader
// (load_model_on), the same backend choice as run/chat/bench.
#include <csignal>
#include <cstdio>
#include <memory>
#include <pthread.h>

#include "cli/commands.h"
#include "cli/load_model.h"
#include "gguf/reader.h"
#include "server/server.h"

namespace brass::cli {

Runner add_serve(CLI::App& app) {
  auto o = std::make_shared<server::ServerOptions>();
  auto device = std::make_shared<std::string>("auto");
  auto kv_tokens = std::make_shared<int64_t>(0);
  auto moe_tiles = std::make_shared<std::string>("auto");
  o->progress = true;
  app.add_option("-m,--model", o->model_path,
                 "GGUF file (default: the built-in tiny model: real o200k vocabulary, RANDOM weights)");
  app.add_option("--device", *device, "cpu, cuda or auto (cuda when built with it and a GPU is present)")
      ->capture_default_str();
  app.add_option("--moe-tiles", *moe_tiles, kMoeTilesHelp)->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  app.add_option("--host", o->host, "address to listen on (loopback by default)")->capture_default_str();
  app.add_option("--port", o->port, "port (0: any free port, printed)")->capture_default_str();
  app.add_option("--parallel", o->parallel, "sequences generated at once (continuous batching)")->capture_default_str();
  app.add_flag("!--no-pipeline", o->pipeline,
               "one forward step at a time (default: decode steps are issued before the previous step's tokens "
               "are back)");
  app.add_option("-c,--ctx", o->n_ctx, "context size per sequence (prompt + completion)")->capture_default_str();
  app.add_option("--kv-tokens", *kv_tokens,
                 "positions the KV block pool holds across all sequences (0: automatic; full pool: requests wait "
                 "or are preempted and recomputed)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))->capture_default_str();
  app.add_option("--max-queue", o->max_queue, "waiting requests before answering 503")->capture_default_str();
  app.add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' (also $BRASS_API_KEY)");
  app.add_option("--alias", o->model_name, "model id reported by /v1/models (default: the file name)");
  app.add_option("-t,--threads", o->threads, "CPU threads (default: BRASS_THREADS or all cores)");
  app.add_option("--http-threads", o->http_threads, "HTTP worker threads (default: from --parallel)");
  app.add_option("--max-body", o->max_body_bytes, "largest request body in bytes (larger: 413)")->capture_default_str();
  // TEST ONLY: lets a request force the first generated tokens (brass_test_force), so
  // end-to-end tests can drive the real model path through known Harmony structure.
  app.add_flag("--test-hooks", o->test_hooks, "TEST ONLY: accept the brass_test_force request field")->group("");
  app.add_option("--test-load-delay-ms", o->test_load_delay_ms, "TEST ONLY: delay the model load")->group("");
  return [o, device, kv_tokens, moe_tiles]() -> int {
    server::ServerOptions opts = *o;
    auto requested = parse_device(*device);
    if (!requested) return fail(requested.status().message());
    auto resolved = resolve_device(*requested);
    if (!resolved) return fail(resolved.status().message());
    const Device dev = *resolved;
    auto tiles_req = parse_moe_tiles(*moe_tiles);
    if (!tiles_req) return fail(tiles_req.status().message());
    opts.load_model = [dev, kv = *kv_tokens, tiles = *tiles_req](std::unique_ptr<gguf::Reader> reader,
                                                                 const model::ModelOptions& mo) {
      model::ModelOptions with_pool = mo;
      with_pool.kv_tokens = kv;
      return load_model_on(std::move(reader), dev, with_pool, std::nullopt, tiles);
    };
    std::fprintf(stderr, "brass: serve: device %s\n", device_name(dev));
    if (opts.model_path.empty()) opts.model_path = builtin_model_path();
    if (opts.api_key.empty()) {
      if (const char* k = std::getenv("BRASS_API_KEY")) opts.api_key = k;
    }
    // Signals go to the thread that waits for them (sigwait), not to server threads.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    auto srv = server::Server::create(opts);
    if (!srv) return fail(srv.status().message());
    if (auto st = (*srv)->start(); !st) return fail(st.message());
    std::fprintf(stderr, "brass: serve: listening on http://%s:%d (web UI at /, API at /v1)\n", opts.host.c_str(),
                 (*srv)->port());
    std::fflush(stderr);
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "brass: serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    (*srv)->stop();
    return 0;
  };
}

}  // namespace brass::cli
