// Server internals shared by server.cpp (lifecycle, routing, small endpoints) and
// generate.cpp (the generation endpoints). Not a public header.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "runtime/engine.h"
#include "server/api.h"
#include "server/constraint.h"
#include "server/harmony_map.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace brass::server {

// JSON text with invalid UTF-8 replaced (model output may hold any bytes).
std::string dump_json(const Json& j);
void send_json(httplib::Response& res, int status, const Json& j);
void send_error(httplib::Response& res, const ApiError& e);

// SSE on a chunked response: `body` runs once on the worker thread and writes events
// through the SseWrite (false: the client is gone; the body should cancel and return).
using SseWrite = std::function<bool(const std::string& event, const Json& data)>;
void start_sse(Server::Impl& s, httplib::Response& res, std::function<void(const SseWrite&)> body);

class Server::Impl {
 public:
  explicit Impl(ServerOptions o) : opt(std::move(o)) {}

  ServerOptions opt;
  httplib::Server http;
  std::thread listen_thread, load_thread;
  int bound_port = 0;

  enum class State { kLoading, kReady, kFailed };
  std::atomic<State> state{State::kLoading};
  std::string load_error;
  std::mutex load_mu;
  std::condition_variable load_cv;

  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::unique_ptr<runtime::Engine> engine;
  std::shared_ptr<const TokenTable> token_table;
  std::vector<int32_t> chat_stop_tokens;  // <|return|>, <|call|>, <|endoftext|>
  int32_t tok_return = -1, tok_call = -1, tok_end = -1;
  std::string model_id;
  int64_t created = 0;

  // Server-side counters for /metrics.
  std::atomic<uint64_t> http_requests{0}, http_errors_4xx{0}, http_errors_5xx{0};
  std::atomic<uint64_t> streams_started{0}, client_disconnects{0};
  std::atomic<int64_t> streams_open{0};
  std::atomic<bool> stopping{false};
  std::mutex status_mu;
  std::map<int, uint64_t> error_statuses;  // responses with status >= 400, by status

  void load();
  void routes();
  // 503 while loading / failed; 401 without the key. True: the handler may go on.
  bool check_ready(const httplib::Request& req, httplib::Response& res);
  bool check_auth(const httplib::Request& req, httplib::Response& res);

  // Render a conversation to prompt tokens (and text when asked); errors are 400s.
  std::optional<ApiError> render_prompt(const struct ConversationSpec& spec, std::vector<int32_t>* tokens,
                                        std::string* text);

  void handle_chat(const httplib::Request& req, httplib::Response& res);
  void handle_completions(const httplib::Request& req, httplib::Response& res);
  void handle_responses(const httplib::Request& req, httplib::Response& res);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res);
};

// Shared by every generating endpoint (generate.cpp).
ApiError server_error(std::string msg);  // 500
// The engine's refusal of a submitted request as the API says it: 503 + queue_full (full
// queue), 400 (invalid), 503 (shutting down); nullopt when it was taken.
std::optional<ApiError> submit_error(const runtime::Submitted& s);
// Refuses a prompt that leaves no room in the context (400, code context_length_exceeded,
// naming `param`); otherwise caps g.max_tokens to what is left.
std::optional<ApiError> fit_context(Server::Impl& s, size_t n_prompt, GenParams& g, const char* param = "messages");
runtime::Request make_request(std::vector<int32_t> prompt, const GenParams& g, std::vector<int32_t> stops);
// What decoding must follow: the test hook's forced prefix, a forced tool-call header +
// JSON arguments for tool_choice required/named, or JSON in the final channel for
// response_format.
ConstraintPlan plan_for(Server::Impl& s, const GenParams& g, ToolChoice tc, const std::string& tc_name,
                        const std::vector<FunctionTool>& tools, ResponseFormat rf, const std::optional<Json>& schema = {});
void attach_constraint(Server::Impl& s, runtime::Request& r, ConstraintPlan plan);

}  // namespace brass::server
