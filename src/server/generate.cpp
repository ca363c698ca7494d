// The generation endpoints: /v1/chat/completions, /v1/completions, /v1/responses.
// Each: parse + validate (400s), render the prompt (Harmony for chat/responses; raw text
// or ids for completions), plan the logit constraint (tool_choice, response_format, the
// test hook), submit to the engine (503 + Retry-After when its queue is full), then pump
// engine events through per-completion mappers into one JSON response or an SSE stream.
// A stream whose client goes away (a failed write) cancels the request, so its sequences
// are freed at the engine's next step.
#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "harmony/render.h"
#include "server/server_impl.h"

namespace brass::server {

std::string today_utc();

ApiError server_error(std::string msg) {
  ApiError e;
  e.status = 500;
  e.type = "server_error";
  e.message = std::move(msg);
  return e;
}

std::optional<ApiError> submit_error(const runtime::Submitted& s) {
  ApiError e;
  switch (s.code) {
    case runtime::SubmitCode::kOk: return std::nullopt;
    case runtime::SubmitCode::kQueueFull:
      e.status = 503;
      e.type = "server_error";
      e.code = "queue_full";
      e.message = "the server is busy (request queue full); retry shortly";
      return e;
    case runtime::SubmitCode::kInvalid:
      return invalid_param("", "invalid request: " + s.message);
    case runtime::SubmitCode::kShutdown:
      e.status = 503;
      e.type = "server_error";
      e.message = "the engine is shutting down: " + s.message;
      return e;
  }
  return e;
}

namespace {

using runtime::Event;
using Clock = std::chrono::steady_clock;

// Pull events until kDone. `fn` returning false cancels the request (the rest is drained).
struct PumpResult {
  runtime::Usage usage;
  runtime::Timings timings;
  bool cancelled = false;
};
PumpResult pump(runtime::RequestHandle& h, const std::atomic<bool>& stopping, const std::function<bool(const Event&)>& fn,
               const std::function<bool()>& idle = {}) {
  PumpResult r;
  for (;;) {
    Event ev;
    if (!h.next(ev, std::chrono::milliseconds(50))) {
      if (!r.cancelled && (stopping || (idle && !idle()))) h.cancel(), r.cancelled = true;
      continue;
    }
    if (ev.kind == Event::Kind::kDone) {
      r.usage = ev.usage;
      r.timings = ev.timings;
      return r;
    }
    if (!r.cancelled && !fn(ev)) {
      h.cancel();
      r.cancelled = true;
    }
  }
}

Json logprob_entry(const tok::Tokenizer& tk, int32_t token, float logprob) {
  const std::string_view b = tk.token_bytes(token);
  Json bytes = Json::array();
  for (char c : b) bytes.push_back(static_cast<uint8_t>(c));
  return Json{{"token", std::string(b)}, {"logprob", logprob}, {"bytes", bytes}};
}

Json chat_logprob(const tok::Tokenizer& tk, const Event& ev) {
  Json e = logprob_entry(tk, ev.token, ev.logprob);
  Json top = Json::array();
  for (const auto& t : ev.top) top.push_back(logprob_entry(tk, t.token, t.logprob));
  e["top_logprobs"] = top;
  return e;
}

Json usage_json(const runtime::Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
}

// Tokens of `text` with special spellings as specials.
std::vector<int32_t> specials_text(const tok::Tokenizer& tk, const std::string& text) { return tk.encode(text, true); }

std::string finish_name(const Event& ev, bool stopped_by_string, bool tool_calls, int32_t tok_call) {
  if (stopped_by_string) return "stop";
  switch (ev.finish) {
    case runtime::FinishReason::kStop: return tool_calls && ev.token == tok_call ? "tool_calls" : "stop";
    case runtime::FinishReason::kLength: return "length";
    case runtime::FinishReason::kCancelled: return "stop";
    case runtime::FinishReason::kError: return "error";
  }
  return "stop";
}

}  // namespace

// ---- shared by every generating endpoint (declared in server_impl.h)

// Prompt length checks and the effective max_tokens.
std::optional<ApiError> fit_context(Server::Impl& s, size_t n_prompt, GenParams& g, const char* param) {
  const int64_t n_ctx = s.engine->n_ctx();
  if (static_cast<int64_t>(n_prompt) >= n_ctx) {
    ApiError e = invalid_param(param, fmt::format("the prompt has {} tokens; this server's context is {} tokens "
                                                       "(prompt + completion): shorten the prompt", n_prompt, n_ctx));
    e.code = "context_length_exceeded";
    return e;
  }
  const int64_t room = n_ctx - static_cast<int64_t>(n_prompt);
  g.max_tokens = g.max_tokens < 0 ? room : std::min(g.max_tokens, room);
  return std::nullopt;
}

runtime::Request make_request(std::vector<int32_t> prompt, const GenParams& g, std::vector<int32_t> stops) {
  runtime::Request r;
  r.prompt = std::move(prompt);
  r.sampling = g.sampling;
  r.max_tokens = g.max_tokens;
  r.stop_tokens = std::move(stops);
  r.n = g.n;
  r.token_logprob = g.logprobs;  // without logprobs, greedy requests pick on the GPU
  return r;
}

// tool_choice / response_format / test hook -> the constraint plan.
ConstraintPlan plan_for(Server::Impl& s, const GenParams& g, ToolChoice tc, const std::string& tc_name,
                        const std::vector<FunctionTool>& tools, ResponseFormat rf, const std::optional<Json>& schema) {
  const tok::Tokenizer& tk = *s.tokenizer;
  ConstraintPlan p;
  if (g.test_force) {
    p.prefix_options.push_back(specials_text(tk, *g.test_force));
  } else if (tc == ToolChoice::kNamed || tc == ToolChoice::kRequired) {
    // The model must open a tool call: the header is forced (one of the tools), then
    // the arguments are constrained to a JSON object ending with <|call|>.
    for (const auto& t : tools) {
      if (tc == ToolChoice::kNamed && t.name != tc_name) continue;
      p.prefix_options.push_back(
          specials_text(tk, "<|channel|>commentary to=functions." + t.name + " <|constrain|>json<|message|>"));
      p.prefix_schemas.push_back(t.parameters ? std::make_shared<const Json>(*t.parameters) : nullptr);
    }
    p.json = ConstraintPlan::JsonWhere::kAfterPrefix;
    p.json_end_tokens = {s.tok_call};
  }
  if (rf != ResponseFormat::kText && p.json == ConstraintPlan::JsonWhere::kNone) {
    p.json = ConstraintPlan::JsonWhere::kFinalChannel;
    p.json_end_tokens = {s.tok_return};
    if (rf == ResponseFormat::kJsonSchema && schema) p.json_schema = std::make_shared<const Json>(*schema);
  }
  return p;
}

void attach_constraint(Server::Impl& s, runtime::Request& r, ConstraintPlan plan) {
  if (!plan.active()) return;
  auto table = s.token_table;
  const tok::Tokenizer* tk = s.tokenizer.get();
  r.constraint = [table, tk, plan](int32_t) -> std::unique_ptr<runtime::LogitConstraint> {
    auto c = HarmonyConstraint::create(table, *tk, plan);
    if (!c) return nullptr;
    return std::move(*c);
  };
}


// SSE on a chunked response; `body` runs once and writes through `write` (false: the
// client is gone).
void start_sse(Server::Impl& s, httplib::Response& res, std::function<void(const SseWrite&)> body) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  ++s.streams_started;
  res.set_chunked_content_provider("text/event-stream", [&s, body = std::move(body)](size_t, httplib::DataSink& sink) {
    ++s.streams_open;
    bool gone = false;
    auto last_write = std::chrono::steady_clock::now();
    SseWrite write = [&](const std::string& event, const Json& data) {
      if (gone) return false;
      const auto now = std::chrono::steady_clock::now();
      if (event == ":") {
        // Heartbeat: an SSE comment when nothing was written for 100 ms. A client that
        // went away makes the second write after its close fail, so a generation that
        // streams no deltas (e.g. still in a Harmony header) is cancelled promptly too.
        if (now - last_write < std::chrono::milliseconds(100)) return true;
        last_write = now;
        static const char kPing[] = ": ping\n\n";
        if (!sink.write(kPing, sizeof kPing - 1)) gone = true;
        return !gone;
      }
      last_write = now;
      std::string msg;
      if (!event.empty()) msg += "event: " + event + "\n";
      msg += "data: " + (data.is_string() ? data.get<std::string>() : dump_json(data)) + "\n\n";
      if (!sink.write(msg.data(), msg.size())) gone = true;
      return !gone;
    };
    body(write);
    if (gone) ++s.client_disconnects;
    --s.streams_open;
    if (!gone) sink.done();
    return !gone;
  });
}

// ------------------------------------------------------------------ chat completions

void Server::Impl::handle_chat(const httplib::Request& req, httplib::Response& res) {
  Json body;
  if (auto e = parse_json_body(req.body, &body)) return send_error(res, *e);
  auto cr = std::make_shared<ChatRequest>();
  if (auto e = parse_chat_request(body, opt.test_hooks, cr.get())) return send_error(res, *e);
  ConversationSpec spec;
  spec.messages = &cr->messages;
  spec.tools = &cr->tools;
  spec.tool_choice = cr->tool_choice;
  spec.reasoning_effort = cr->reasoning_effort;
  spec.date = today_utc();
  std::vector<int32_t> prompt;
  if (auto e = render_prompt(spec, &prompt, nullptr)) return send_error(res, *e);
  GenParams& g = cr->gen;
  if (auto e = fit_context(*this, prompt.size(), g)) return send_error(res, *e);
  runtime::Request r = make_request(std::move(prompt), g, chat_stop_tokens);
  attach_constraint(*this, r, plan_for(*this, g, cr->tool_choice, cr->tool_choice_name, cr->tools, cr->response_format,
                                         cr->json_schema));

  struct ChoiceState {
    std::unique_ptr<OutputMapper> mapper;
    std::string finish;
    Json logprobs = Json::array();
    Json pending_lp = Json::array();
  };
  auto choices = std::make_shared<std::vector<ChoiceState>>(g.n);
  for (auto& c : *choices) {
    auto m = OutputMapper::create(*tokenizer, g.stop);
    if (!m) return send_error(res, server_error(m.status().message()));
    c.mapper = std::move(*m);
  }
  runtime::Submitted sub = engine->submit(std::move(r));
  if (auto e = submit_error(sub)) return send_error(res, *e);
  auto handle = sub.handle;
  const std::string id = random_id("chatcmpl-");
  const int64_t created_at = static_cast<int64_t>(std::time(nullptr));
  const tok::Tokenizer* tkp = tokenizer.get();

  // Feed one event to its choice; deltas go to `on_delta` (streaming) or are dropped
  // (the mapper keeps the totals). False: every choice is over (stop strings).
  auto feed = [this, choices, tkp, g](const Event& ev, std::vector<OutputDelta>* deltas) {
    ChoiceState& c = (*choices)[ev.index];
    if (ev.kind == Event::Kind::kToken) {
      c.mapper->push(ev.token, deltas);
      if (g.logprobs && c.mapper->last_was_content()) {
        Json lp = chat_logprob(*tkp, ev);
        c.logprobs.push_back(lp);
        c.pending_lp.push_back(lp);
      }
      if (c.mapper->stopped_by_string() && c.finish.empty()) {
        c.mapper->finish(deltas);
        c.finish = "stop";
      }
    } else if (ev.kind == Event::Kind::kFinish) {
      if (ev.finish == runtime::FinishReason::kStop && ev.token >= 0) c.mapper->push(ev.token, deltas);
      c.mapper->finish(deltas);
      if (c.finish.empty()) c.finish = finish_name(ev, c.mapper->stopped_by_string(), !c.mapper->tool_calls().empty(), tok_call);
      if (ev.finish == runtime::FinishReason::kError) c.finish = "error:" + ev.error;
    }
    for (const auto& cs : *choices) {
      if (cs.finish.empty()) return true;
    }
    return false;
  };

  if (!g.stream) {
    PumpResult pr = pump(*handle, stopping, [&](const Event& ev) {
      std::vector<OutputDelta> d;
      return feed(ev, &d);
    });
    Json out_choices = Json::array();
    for (size_t i = 0; i < choices->size(); ++i) {
      ChoiceState& c = (*choices)[i];
      if (c.finish.rfind("error:", 0) == 0) return send_error(res, server_error("generation failed: " + c.finish.substr(6)));
      const OutputMapper& m = *c.mapper;
      Json msg{{"role", "assistant"}};
      msg["content"] = (m.content().empty() && !m.tool_calls().empty()) ? Json(nullptr) : Json(m.content());
      if (m.has_reasoning()) {
        msg["reasoning_content"] = m.reasoning();
        msg["reasoning"] = m.reasoning();
      }
      if (!m.tool_calls().empty()) {
        Json calls = Json::array();
        for (const auto& tc : m.tool_calls()) {
          calls.push_back({{"id", tc.id}, {"type", "function"}, {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
        }
        msg["tool_calls"] = calls;
      }
      out_choices.push_back({{"index", i},
                             {"message", msg},
                             {"logprobs", g.logprobs ? Json{{"content", c.logprobs}} : Json(nullptr)},
                             {"finish_reason", c.finish.empty() ? "stop" : c.finish}});
    }
    Json out{{"id", id}, {"object", "chat.completion"}, {"created", created_at}, {"model", model_id},
             {"choices", out_choices}, {"usage", usage_json(pr.usage)}};
    out["timings"] = {{"ttft_ms", pr.timings.ttft_ms}, {"decode_tok_per_s", pr.timings.decode_tok_per_s},
                      {"prompt_tokens_computed", pr.usage.prompt_tokens_computed}};
    return send_json(res, 200, out);
  }

  start_sse(*this, res, [this, handle, choices, feed, id, created_at, g](const SseWrite& write) {
    auto chunk = [&](int index, Json delta, Json finish, Json logprobs) {
      Json c{{"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish)}};
      Json j{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created_at}, {"model", model_id},
             {"choices", Json::array({c})}};
      if (g.include_usage) j["usage"] = nullptr;
      return write("", j);
    };
    for (int i = 0; i < g.n; ++i) {
      if (!chunk(i, Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)) break;
    }
    std::string error;
    PumpResult pr = pump(*handle, stopping, [&](const Event& ev) {
      std::vector<OutputDelta> deltas;
      const bool more = feed(ev, &deltas);
      ChoiceState& c = (*choices)[ev.index];
      for (const auto& d : deltas) {
        Json delta;
        if (d.target == OutputDelta::Target::kToolCall) {
          if (d.kind == OutputDelta::Kind::kStart) {
            delta["tool_calls"] = Json::array({{{"index", d.tool_index}, {"id", d.call_id}, {"type", "function"},
                                                {"function", {{"name", d.name}, {"arguments", ""}}}}});
          } else if (d.kind == OutputDelta::Kind::kDelta) {
            delta["tool_calls"] = Json::array({{{"index", d.tool_index}, {"function", {{"arguments", d.text}}}}});
          }
        } else if (d.kind == OutputDelta::Kind::kDelta) {
          if (d.target == OutputDelta::Target::kReasoning) {
            delta["reasoning_content"] = d.text;
            delta["reasoning"] = d.text;
          } else {
            delta["content"] = d.text;
          }
        }
        if (delta.is_null()) continue;
        Json lp = nullptr;
        if (g.logprobs && d.target == OutputDelta::Target::kContent && !c.pending_lp.empty()) {
          lp = Json{{"content", c.pending_lp}};
          c.pending_lp = Json::array();
        }
        if (!chunk(ev.index, delta, nullptr, lp)) return false;
      }
      if (!write(":", nullptr)) return false;
      if (ev.kind == Event::Kind::kFinish || (!c.finish.empty() && ev.kind == Event::Kind::kToken)) {
        if (c.finish.rfind("error:", 0) == 0) {
          error = c.finish.substr(6);
          return false;
        }
        if (!c.finish.empty() && !c.pending_lp.is_null()) {
          Json lp = g.logprobs && !c.pending_lp.empty() ? Json{{"content", c.pending_lp}} : Json(nullptr);
          c.pending_lp = nullptr;  // finish chunk sent
          if (!chunk(ev.index, Json::object(), c.finish, lp)) return false;
        }
      }
      return more;
    }, [&] { return write(":", nullptr); });
    if (!error.empty()) {
      write("", server_error("generation failed: " + error).to_json());
      return;
    }
    // Choices ended by our cancel (stop strings) may still owe their finish chunk.
    for (int i = 0; i < g.n; ++i) {
      ChoiceState& c = (*choices)[i];
      if (!c.pending_lp.is_null()) {
        c.pending_lp = nullptr;
        chunk(i, Json::object(), c.finish.empty() ? "stop" : c.finish, nullptr);
      }
    }
    if (g.include_usage) {
      Json j{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created_at}, {"model", model_id},
             {"choices", Json::array()}, {"usage", usage_json(pr.usage)}};
      write("", j);
    }
    write("", Json("[DONE]"));
  });
}

// ------------------------------------------------------------------ completions (raw)

void Server::Impl::handle_completions(const httplib::Request& req, httplib::Response& res) {
  Json body;
  if (auto e = parse_json_body(req.body, &body)) return send_error(res, *e);
  CompletionRequest cr;
  if (auto e = parse_completion_request(body, opt.test_hooks, &cr)) return send_error(res, *e);
  std::vector<int32_t> prompt = cr.prompt_tokens ? *cr.prompt_tokens : tokenizer->encode(cr.prompt_text, true);
  for (int32_t t : prompt) {
    if (t >= tokenizer->n_vocab()) return send_error(res, invalid_param("prompt", fmt::format("token id {} is out of range", t)));
  }
  GenParams g = cr.gen;
  if (auto e = fit_context(*this, prompt.size(), g, "prompt")) return send_error(res, *e);
  runtime::Request r = make_request(std::move(prompt), g, chat_stop_tokens);
  if (g.test_force) attach_constraint(*this, r, plan_for(*this, g, ToolChoice::kAuto, "", {}, ResponseFormat::kText));

  struct ChoiceState {
    std::string text, held;
    std::string pending;  // undecoded bytes of a split UTF-8 character
    std::string finish;
    bool finish_sent = false;
    Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  };
  auto choices = std::make_shared<std::vector<ChoiceState>>(g.n);
  size_t max_stop = 0;
  for (const auto& s : g.stop) max_stop = std::max(max_stop, s.size());
  runtime::Submitted sub = engine->submit(std::move(r));
  if (auto e = submit_error(sub)) return send_error(res, *e);
  auto handle = sub.handle;
  const std::string id = random_id("cmpl-");
  const int64_t created_at = static_cast<int64_t>(std::time(nullptr));
  const tok::Tokenizer* tk = tokenizer.get();

  // Returns the newly released text of the choice; false from `more` when all are over.
  auto feed = [choices, tk, g, max_stop](const Event& ev, std::string* released, bool* more) {
    ChoiceState& c = (*choices)[ev.index];
    released->clear();
    if (!c.finish.empty()) {
    } else if (ev.kind == Event::Kind::kToken) {
      const std::string_view b = tk->token_bytes(ev.token);
      if (g.logprobs) {
        c.offsets.push_back(c.text.size() + c.held.size());
        c.tokens.push_back(std::string(b));
        c.token_lps.push_back(ev.logprob);
        Json top = Json::object();
        for (const auto& t : ev.top) top[std::string(tk->token_bytes(t.token))] = t.logprob;
        c.tops.push_back(top);
      }
      c.held += b;
      size_t best = std::string::npos;
      for (const auto& s : g.stop) best = std::min(best, c.held.find(s));
      if (best != std::string::npos) {
        c.held.resize(best);
        *released = c.held;
        c.text += c.held;
        c.held.clear();
        c.finish = "stop";
      } else {
        // Keep the last max_stop - 1 bytes (a stop may start there) and a split character.
        size_t cut = c.held.size() > (max_stop ? max_stop - 1 : 0) ? c.held.size() - (max_stop ? max_stop - 1 : 0) : 0;
        while (cut > 0 && cut < c.held.size() && (static_cast<unsigned char>(c.held[cut]) & 0xC0) == 0x80) --cut;
        *released = c.held.substr(0, cut);
        c.text += *released;
        c.held.erase(0, cut);
      }
    } else if (ev.kind == Event::Kind::kFinish) {
      *released = c.held;
      c.text += c.held;
      c.held.clear();
      c.finish = ev.finish == runtime::FinishReason::kLength ? "length"
                 : ev.finish == runtime::FinishReason::kError ? "error:" + ev.error : "stop";
    }
    *more = false;
    for (const auto& cs : *choices) *more |= cs.finish.empty();
  };
  auto lp_json = [g](const ChoiceState& c) -> Json {
    if (!g.logprobs) return nullptr;
    return Json{{"tokens", c.tokens}, {"token_logprobs", c.token_lps}, {"top_logprobs", c.tops}, {"text_offset", c.offsets}};
  };

  if (!g.stream) {
    PumpResult pr = pump(*handle, stopping, [&](const Event& ev) {
      std::string rel;
      bool more = true;
      feed(ev, &rel, &more);
      return more;
    });
    Json out_choices = Json::array();
    for (size_t i = 0; i < choices->size(); ++i) {
      ChoiceState& c = (*choices)[i];
      if (c.finish.rfind("error:", 0) == 0) return send_error(res, server_error("generation failed: " + c.finish.substr(6)));
      out_choices.push_back({{"text", c.text}, {"index", i}, {"logprobs", lp_json(c)}, {"finish_reason", c.finish.empty() ? "stop" : c.finish}});
    }
    return send_json(res, 200, Json{{"id", id}, {"object", "text_completion"}, {"created", created_at}, {"model", model_id},
                                    {"choices", out_choices}, {"usage", usage_json(pr.usage)}});
  }
  start_sse(*this, res, [this, handle, choices, feed, id, created_at, g](const SseWrite& write) {
    auto chunk = [&](int index, const std::string& text, Json finish) {
      Json j{{"id", id}, {"object", "text_completion"}, {"created", created_at}, {"model", model_id},
             {"choices", Json::array({{{"text", text}, {"index", index}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
      return write("", j);
    };
    PumpResult pr = pump(*handle, stopping, [&](const Event& ev) {
      std::string rel;
      bool more = true;
      feed(ev, &rel, &more);
      ChoiceState& c = (*choices)[ev.index];
      if (!rel.empty() && !chunk(ev.index, rel, nullptr)) return false;
      if (!write(":", nullptr)) return false;
      if (!c.finish.empty() && !c.finish_sent) {
        c.finish_sent = true;
        if (!chunk(ev.index, "", c.finish.rfind("error:", 0) == 0 ? "error" : c.finish)) return false;
      }
      return more;
    }, [&] { return write(":", nullptr); });
    for (int i = 0; i < g.n; ++i) {
      ChoiceState& c = (*choices)[i];
      if (!c.finish_sent) c.finish_sent = true, chunk(i, "", c.finish.empty() ? "stop" : c.finish);
    }
    if (g.include_usage) {
      write("", Json{{"id", id}, {"object", "text_completion"}, {"created", created_at}, {"model", model_id},
                     {"choices", Json::array()}, {"usage", usage_json(pr.usage)}});
    }
    write("", Json("[DONE]"));
  });
}

}  // namespace brass::server
