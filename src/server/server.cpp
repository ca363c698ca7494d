// Server lifecycle (bind, background model load with a progress bar, stop), routing,
// auth, OpenAI-shaped errors for every status >= 400 (including httplib's own 404/413),
// and the small endpoints: /health, /v1/models, /metrics, /tokenize, /detokenize and
// the embedded web UI. The generation endpoints are in generate.cpp.
#include "server/server_impl.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "core/timer.h"
#include "gguf/reader.h"
#include "harmony/render.h"
#include "model/config.h"
#include "model/model.h"
#include "runtime/metrics.h"
#include "server/webui_assets.h"

namespace brass::server {

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const Json& j) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status, e.to_json());
}

namespace {

ApiError make_error(int status, std::string type, std::string message, std::string code = "") {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

void progress_bar(int step, int n_steps, const std::string& what, double seconds) {
  const int width = 24;
  const int filled = width * step / n_steps;
  std::string bar(filled, '#');
  bar += std::string(width - filled, '.');
  std::fprintf(stderr, "\rbrass: loading [%s] %d/%d %-28s %6.1fs%s", bar.c_str(), step, n_steps, what.c_str(), seconds,
               step == n_steps ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace

void Server::Impl::load() {
  Timer timer;
  const int n_steps = 4;
  if (opt.test_load_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.test_load_delay_ms));
  auto fail = [&](const std::string& msg) {
    if (opt.progress) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "brass: serve: model load failed: %s\n", msg.c_str());
    std::lock_guard<std::mutex> lk(load_mu);
    load_error = msg;
    state = State::kFailed;
    load_cv.notify_all();
  };
  if (opt.progress) progress_bar(0, n_steps, "opening GGUF", timer.seconds());
  auto reader = gguf::Reader::open(opt.model_path);
  if (!reader) return fail(reader.status().message());
  if (opt.progress) progress_bar(1, n_steps, "tokenizer", timer.seconds());
  auto tk = tok::Tokenizer::from_gguf(**reader);
  if (!tk) return fail(tk.status().message());
  if (opt.progress) progress_bar(2, n_steps, "weights + KV cache", timer.seconds());
  model::ModelOptions mo;
  mo.n_threads = opt.threads;
  mo.n_ctx = opt.n_ctx;
  auto mdl = opt.load_model ? opt.load_model(std::move(*reader), mo) : model::Model::load(std::move(*reader), mo);
  if (!mdl) return fail(mdl.status().message());
  const std::string backend_name = (*mdl)->backend().name();
  if (opt.progress) progress_bar(3, n_steps, "engine + token table", timer.seconds());
  runtime::EngineOptions eo;
  eo.parallel = opt.parallel;
  eo.pipeline = opt.pipeline;
  eo.n_ctx = opt.n_ctx;
  eo.max_queue = opt.max_queue;
  auto eng = runtime::Engine::create(std::move(*mdl), eo);
  if (!eng) return fail(eng.status().message());
  tokenizer = std::move(*tk);
  token_table = std::make_shared<const TokenTable>(*tokenizer);
  auto sp = [&](const char* s) { return tokenizer->special(s).value_or(-1); };
  tok_return = sp("<|return|>");
  tok_call = sp("<|call|>");
  tok_end = sp("<|end|>");
  for (int32_t t : {tok_return, tok_call, sp("<|endoftext|>")}) {
    if (t >= 0) chat_stop_tokens.push_back(t);
  }
  engine = std::move(*eng);
  if (opt.progress) progress_bar(4, n_steps, "ready", timer.seconds());
  std::fprintf(stderr, "brass: serve: model '%s' ready on %s (context %lld, parallel %d) in %.1f s\n",
               model_id.c_str(), backend_name.c_str(), static_cast<long long>(engine->n_ctx()), opt.parallel,
               timer.seconds());
  std::lock_guard<std::mutex> lk(load_mu);
  state = State::kReady;
  load_cv.notify_all();
}

bool Server::Impl::check_auth(const httplib::Request& req, httplib::Response& res) {
  if (opt.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  if (h == "Bearer " + opt.api_key) return true;
  send_error(res, make_error(401, "invalid_request_error",
                             h.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "invalid API key",
                             "invalid_api_key"));
  return false;
}

bool Server::Impl::check_ready(const httplib::Request& req, httplib::Response& res) {
  if (!check_auth(req, res)) return false;
  const State s = state.load();
  if (s == State::kReady) return true;
  if (s == State::kLoading) {
    send_error(res, make_error(503, "server_error", "the model is loading; retry shortly", "model_loading"));
  } else {
    send_error(res, make_error(503, "server_error", "the model failed to load: " + load_error, "model_load_failed"));
  }
  return false;
}

std::optional<ApiError> Server::Impl::render_prompt(const ConversationSpec& spec, std::vector<int32_t>* tokens,
                                                    std::string* text) {
  std::vector<harmony::Message> conv;
  if (auto e = build_conversation(spec, &conv)) return e;
  auto pieces = harmony::render_conversation_for_completion(conv);
  if (!pieces) return invalid_param("messages", "cannot render the conversation: " + pieces.status().message());
  auto toks = harmony::pieces_to_tokens(*pieces, *tokenizer);
  if (!toks) return invalid_param("messages", "cannot tokenize the conversation: " + toks.status().message());
  *tokens = std::move(*toks);
  if (text) *text = harmony::pieces_to_text(*pieces);
  return std::nullopt;
}

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

void Server::Impl::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  Json body;
  if (auto e = parse_json_body(req.body, &body)) return send_error(res, *e);
  if (body.contains("messages")) {
    ChatRequest cr;
    if (auto e = parse_chat_request(body, opt.test_hooks, &cr)) return send_error(res, *e);
    ConversationSpec spec;
    spec.messages = &cr.messages;
    spec.tools = &cr.tools;
    spec.tool_choice = cr.tool_choice;
    spec.reasoning_effort = cr.reasoning_effort;
    spec.date = today_utc();
    std::vector<int32_t> toks;
    std::string text;
    if (auto e = render_prompt(spec, &toks, &text)) return send_error(res, *e);
    return send_json(res, 200, Json{{"tokens", toks}, {"prompt", text}});
  }
  const auto it = body.find("content");
  if (it == body.end() || !it->is_string()) return send_error(res, invalid_param("content", "'content' (a string) or 'messages' is required"));
  bool special = false;
  if (auto s = body.find("special"); s != body.end()) {
    if (!s->is_boolean()) return send_error(res, invalid_param("special", "'special' must be a boolean"));
    special = s->get<bool>();
  }
  const auto toks = tokenizer->encode(it->get<std::string>(), special);
  send_json(res, 200, Json{{"tokens", toks}});
}

void Server::Impl::routes() {
  http.set_payload_max_length(opt.max_body_bytes);
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    ++http_requests;
    res.set_header("Access-Control-Allow-Origin", "*");
    if (req.method == "OPTIONS") {
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every error status gets an OpenAI-shaped body (httplib's own 404/413/400 come here with none).
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (res.status >= 500) ++http_errors_5xx;
    else if (res.status >= 400) ++http_errors_4xx;
    {
      std::lock_guard<std::mutex> lk(status_mu);
      ++error_statuses[res.status];
    }
    if (res.status >= 500 && res.status != 503) {
      std::fprintf(stderr, "brass: serve: %d for %s %s\n", res.status, req.method.c_str(), req.path.c_str());
    }
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = fmt::format("no route for {} {}", req.method, req.path);
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = fmt::format("request body too large (limit {} bytes)", opt.max_body_bytes);
      e.code = "request_too_large";
    } else if (res.status == 405) {
      e.message = fmt::format("method {} not allowed on {}", req.method, req.path);
    } else {
      e.message = fmt::format("HTTP {}", res.status);
      if (res.status >= 500) e.type = "server_error";
    }
    res.set_content(dump_json(e.to_json()), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
    send_error(res, make_error(500, "server_error", what));
  });

  auto guarded = [this](void (Impl::*fn)(const httplib::Request&, httplib::Response&)) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      if (!check_ready(req, res)) return;
      try {
        (this->*fn)(req, res);
      } catch (const std::exception& ex) {
        send_error(res, make_error(500, "server_error", std::string("internal error: ") + ex.what()));
      }
    };
  };
  http.Post("/v1/chat/completions", guarded(&Impl::handle_chat));
  http.Post("/v1/completions", guarded(&Impl::handle_completions));
  http.Post("/v1/responses", guarded(&Impl::handle_responses));
  http.Post("/tokenize", guarded(&Impl::handle_tokenize));
  http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (!check_ready(req, res)) return;
    Json body;
    if (auto e = parse_json_body(req.body, &body)) return send_error(res, *e);
    const auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) return send_error(res, invalid_param("tokens", "'tokens' (an array of ids) is required"));
    std::vector<int32_t> ids;
    for (const Json& x : *it) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tokenizer->n_vocab()) {
        return send_error(res, invalid_param("tokens", fmt::format("token ids must be integers in 0..{}", tokenizer->n_vocab() - 1)));
      }
      ids.push_back(x.get<int32_t>());
    }
    send_json(res, 200, Json{{"content", tokenizer->decode(ids)}});
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const State s = state.load();
    if (s == State::kReady) return send_json(res, 200, Json{{"status", "ok"}});
    ApiError e = make_error(503, "server_error", s == State::kLoading ? "the model is loading" : "the model failed to load: " + load_error,
                            s == State::kLoading ? "model_loading" : "model_load_failed");
    Json j = e.to_json();
    j["status"] = s == State::kLoading ? "loading" : "error";
    res.set_header("Retry-After", "1");
    send_json(res, 503, j);
  });
  auto models = [this](const httplib::Request& req, httplib::Response& res) {
    if (!check_auth(req, res)) return;
    Json m{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "brass"}};
    if (req.matches.size() > 1) {
      const std::string want = req.matches[1];
      if (want != model_id) {
        return send_error(res, make_error(404, "invalid_request_error", fmt::format("model '{}' does not exist", want), "model_not_found"));
      }
      return send_json(res, 200, m);
    }
    send_json(res, 200, Json{{"object", "list"}, {"data", Json::array({m})}});
  };
  http.Get("/v1/models", models);
  http.Get(R"(/v1/models/(.+))", models);
  http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!check_auth(req, res)) return;
    std::string text;
    if (state.load() == State::kReady) text = runtime::render_prometheus(engine->metrics(), "brass");
    auto counter = [&](const char* name, const char* help, const char* type, double v) {
      text += fmt::format("# HELP brass_server_{} {}\n# TYPE brass_server_{} {}\nbrass_server_{} {}\n", name, help, name, type,
                          name, v);
    };
    counter("http_requests_total", "HTTP requests received", "counter", static_cast<double>(http_requests.load()));
    counter("http_client_errors_total", "responses with a 4xx status", "counter", static_cast<double>(http_errors_4xx.load()));
    counter("http_server_errors_total", "responses with a 5xx status", "counter", static_cast<double>(http_errors_5xx.load()));
    counter("streams_started_total", "SSE streams started", "counter", static_cast<double>(streams_started.load()));
    counter("streams_open", "SSE streams open now", "gauge", static_cast<double>(streams_open.load()));
    counter("client_disconnects_total", "streams ended by the client going away (generation cancelled)", "counter",
            static_cast<double>(client_disconnects.load()));
    {
      std::lock_guard<std::mutex> lk(status_mu);
      text += "# HELP brass_server_http_error_responses_total responses with a status >= 400, by status\n"
              "# TYPE brass_server_http_error_responses_total counter\n";
      for (const auto& [code, n] : error_statuses) {
        text += fmt::format("brass_server_http_error_responses_total{{code=\"{}\"}} {}\n", code, n);
      }
    }
    counter("model_ready", "1 once the model is loaded", "gauge", state.load() == State::kReady ? 1.0 : 0.0);
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(reinterpret_cast<const char*>(webui::kIndexHtml), webui::kIndexHtmlSize, "text/html; charset=utf-8");
  });
}

Result<std::unique_ptr<Server>> Server::create(const ServerOptions& o) {
  if (o.model_path.empty()) return Status::error("serve: no model file given");
  if (o.parallel < 1) return Status::errorf("serve: --parallel must be >= 1, got {}", o.parallel);
  if (o.max_queue < 0) return Status::errorf("serve: --max-queue must be >= 0, got {}", o.max_queue);
  if (o.port < 0 || o.port > 65535) return Status::errorf("serve: --port must be 0..65535, got {}", o.port);
  auto impl = std::make_unique<Impl>(o);
  impl->model_id = o.model_name.empty() ? std::filesystem::path(o.model_path).stem().string() : o.model_name;
  impl->created = static_cast<int64_t>(std::time(nullptr));
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { stop(); }

Status Server::start() {
  Impl& s = *impl_;
  const int n_threads = s.opt.http_threads > 0 ? s.opt.http_threads : 2 * std::max(s.opt.parallel, 8) + 48;
  s.http.new_task_queue = [n_threads] { return new httplib::ThreadPool(static_cast<size_t>(n_threads)); };
  s.http.set_keep_alive_timeout(30);
  s.http.set_read_timeout(60);
  s.http.set_write_timeout(60);
  s.routes();
  if (s.opt.port == 0) {
    s.bound_port = s.http.bind_to_any_port(s.opt.host);
    if (s.bound_port <= 0) return Status::errorf("serve: cannot bind {}: no free port", s.opt.host);
  } else {
    if (!s.http.bind_to_port(s.opt.host, s.opt.port)) {
      return Status::errorf("serve: cannot bind {}:{} (in use, or not an address of this machine)", s.opt.host, s.opt.port);
    }
    s.bound_port = s.opt.port;
  }
  s.listen_thread = std::thread([&s] { s.http.listen_after_bind(); });
  s.load_thread = std::thread([&s] { s.load(); });
  return Status::ok();
}

int Server::port() const { return impl_->bound_port; }

bool Server::wait_loaded() {
  std::unique_lock<std::mutex> lk(impl_->load_mu);
  impl_->load_cv.wait(lk, [&] { return impl_->state.load() != Impl::State::kLoading; });
  return impl_->state.load() == Impl::State::kReady;
}

void Server::stop() {
  Impl& s = *impl_;
  s.stopping = true;
  if (s.http.is_running() || s.listen_thread.joinable()) s.http.stop();
  if (s.listen_thread.joinable()) s.listen_thread.join();
  if (s.load_thread.joinable()) s.load_thread.join();
  s.engine.reset();
}

}  // namespace brass::server
