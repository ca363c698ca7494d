// brass HTTP server: the OpenAI-compatible API (/v1/chat/completions, /v1/completions,
// /v1/responses, /v1/models), /health, /metrics (Prometheus), /tokenize, /detokenize and
// the embedded web chat UI at /. cpp-httplib worker threads parse requests, render
// Harmony and tokenize; generation goes through the runtime::Engine (one engine thread
// owns the model). The listener starts first; the model loads in the background and
// every model endpoint answers 503 (+ Retry-After) until it is ready.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"

namespace brass::gguf {
class Reader;
}
namespace brass::model {
class Model;
struct ModelOptions;
}  // namespace brass::model

namespace brass::server {

// Builds the Model from the opened GGUF; the caller picks the backend (`brass serve
// --device` passes the CLI's shared loader, cli::load_model_on).
using ModelLoader =
    std::function<Result<std::unique_ptr<model::Model>>(std::unique_ptr<gguf::Reader>, const model::ModelOptions&)>;

struct ServerOptions {
  std::string model_path;         // GGUF file
  std::string model_name;         // id in /v1/models; empty: the file's stem
  std::string host = "127.0.0.1";
  int port = 8080;                // 0: any free port (see Server::port)
  int32_t parallel = 4;           // concurrent sequences in the engine
  bool pipeline = true;           // pipelined decode steps (EngineOptions::pipeline)
  int64_t n_ctx = 4096;           // per-sequence context
  int32_t max_queue = 64;         // waiting requests before 503
  int threads = 0;                // model CPU threads (0: default)
  std::string api_key;            // non-empty: require Authorization: Bearer KEY
  size_t max_body_bytes = size_t{8} << 20;  // larger bodies: 413
  int http_threads = 0;           // 0: 2 * max(parallel, 8) + 16
  bool test_hooks = false;        // TEST ONLY: accept `brass_test_force` in requests
  bool progress = true;           // loading progress bar on stderr
  int test_load_delay_ms = 0;     // TEST ONLY: stay "loading" this long first (503 tests)
  ModelLoader load_model;         // empty: model::Model::load on the CPU backend
};

class Server {
 public:
  static Result<std::unique_ptr<Server>> create(const ServerOptions& o);
  ~Server();
  // Bind the listener (port 0: pick a free one), start serving and start loading the
  // model in the background. Returns once the socket is bound.
  Status start();
  int port() const;
  // Block until the model finished loading (true) or failed (false).
  bool wait_loaded();
  // Stop serving and the engine; returns when every thread has ended.
  void stop();

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace brass::server
