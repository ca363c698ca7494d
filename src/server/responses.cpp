// /v1/responses: the OpenAI Responses API over the same engine and OutputMapper as chat.
// Each Harmony message the model writes becomes one output item: analysis -> a
// `reasoning` item (content: reasoning_text), final/preamble text -> a `message` item
// (content: output_text), a message to functions.X -> a `function_call` item. Streaming
// emits the API's events with increasing sequence_number: response.created,
// response.in_progress, response.output_item.added, response.content_part.added,
// response.output_text.delta / response.reasoning_text.delta /
// response.function_call_arguments.delta, the matching *.done events,
// response.output_item.done, and response.completed (or response.incomplete when
// max_output_tokens cut it, response.failed on an engine error).
#include <ctime>

#include <fmt/format.h>

#include "server/server_impl.h"

namespace brass::server {

std::string today_utc();

namespace {

using runtime::Event;

// Builds the output items from mapper deltas and reports each step as a stream event.
class ResponseBuilder {
 public:
  using Emit = std::function<bool(const std::string& type, Json data)>;
  explicit ResponseBuilder(Emit emit) : emit_(std::move(emit)) {}

  Json output = Json::array();

  bool on(const OutputDelta& d) {
    using T = OutputDelta::Target;
    using K = OutputDelta::Kind;
    if (d.kind == K::kStart) {
      Json item;
      if (d.target == T::kReasoning) {
        item = {{"type", "reasoning"}, {"id", random_id("rs_")}, {"summary", Json::array()}, {"content", Json::array()}};
      } else if (d.target == T::kContent) {
        item = {{"type", "message"}, {"id", random_id("msg_")}, {"status", "in_progress"}, {"role", "assistant"}, {"content", Json::array()}};
      } else {
        item = {{"type", "function_call"}, {"id", random_id("fc_")}, {"call_id", d.call_id}, {"name", d.name},
                {"arguments", ""}, {"status", "in_progress"}};
      }
      output.push_back(item);
      open_ = static_cast<int>(output.size()) - 1;
      target_ = d.target;
      if (!emit_("response.output_item.added", {{"output_index", open_}, {"item", item}})) return false;
      if (d.target != T::kToolCall) {
        Json part = d.target == T::kReasoning ? Json{{"type", "reasoning_text"}, {"text", ""}}
                                              : Json{{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}};
        output[open_]["content"].push_back(part);
        if (!emit_("response.content_part.added", {{"item_id", item["id"]}, {"output_index", open_}, {"content_index", 0}, {"part", part}})) return false;
      }
      return true;
    }
    if (open_ < 0) return true;
    Json& item = output[open_];
    if (d.kind == K::kDelta) {
      if (target_ == T::kToolCall) {
        item["arguments"] = item["arguments"].get<std::string>() + d.text;
        return emit_("response.function_call_arguments.delta", {{"item_id", item["id"]}, {"output_index", open_}, {"delta", d.text}});
      }
      Json& part = item["content"][0];
      part["text"] = part["text"].get<std::string>() + d.text;
      const char* type = target_ == T::kReasoning ? "response.reasoning_text.delta" : "response.output_text.delta";
      Json ev{{"item_id", item["id"]}, {"output_index", open_}, {"content_index", 0}, {"delta", d.text}};
      if (target_ == T::kContent) ev["logprobs"] = Json::array();
      return emit_(type, ev);
    }
    // kEnd
    const int idx = open_;
    open_ = -1;
    if (target_ == T::kToolCall) {
      item["status"] = "completed";
      if (!emit_("response.function_call_arguments.done", {{"item_id", item["id"]}, {"output_index", idx}, {"name", item["name"]}, {"arguments", item["arguments"]}})) return false;
    } else {
      const Json& part = item["content"][0];
      const char* type = target_ == T::kReasoning ? "response.reasoning_text.done" : "response.output_text.done";
      if (!emit_(type, {{"item_id", item["id"]}, {"output_index", idx}, {"content_index", 0}, {"text", part["text"]}})) return false;
      if (!emit_("response.content_part.done", {{"item_id", item["id"]}, {"output_index", idx}, {"content_index", 0}, {"part", part}})) return false;
      if (target_ == T::kContent) item["status"] = "completed";
    }
    return emit_("response.output_item.done", {{"output_index", idx}, {"item", item}});
  }

 private:
  Emit emit_;
  int open_ = -1;
  OutputDelta::Target target_ = OutputDelta::Target::kContent;
};

}  // namespace

void Server::Impl::handle_responses(const httplib::Request& req, httplib::Response& res) {
  Json body;
  if (auto e = parse_json_body(req.body, &body)) return send_error(res, *e);
  auto rr = std::make_shared<ResponsesRequest>();
  if (auto e = parse_responses_request(body, opt.test_hooks, rr.get())) return send_error(res, *e);
  ConversationSpec spec;
  spec.messages = &rr->messages;
  spec.tools = &rr->tools;
  spec.tool_choice = rr->tool_choice;
  spec.reasoning_effort = rr->reasoning_effort;
  spec.instructions = rr->instructions;
  spec.date = today_utc();
  std::vector<int32_t> prompt;
  if (auto e = render_prompt(spec, &prompt, nullptr)) return send_error(res, *e);
  GenParams& g = rr->gen;
  if (auto e = fit_context(*this, prompt.size(), g, "input")) return send_error(res, *e);
  runtime::Request r = make_request(std::move(prompt), g, chat_stop_tokens);
  // Same constraint planning as chat (forced tool header for named/required, test hook).
  attach_constraint(*this, r, plan_for(*this, g, rr->tool_choice, rr->tool_choice_name, rr->tools, ResponseFormat::kText));
  auto mapper_r = OutputMapper::create(*tokenizer, g.stop);
  if (!mapper_r) return send_error(res, server_error(mapper_r.status().message()));
  std::shared_ptr<OutputMapper> mapper = std::move(*mapper_r);
  runtime::Submitted sub = engine->submit(std::move(r));
  if (auto e = submit_error(sub)) return send_error(res, *e);
  auto handle = sub.handle;
  const std::string id = random_id("resp_");
  const int64_t created_at = static_cast<int64_t>(std::time(nullptr));

  auto response_obj = [this, id, created_at, rr](const Json& output, const std::string& status, const runtime::Usage* u,
                                                 const std::string& incomplete) {
    Json tools = Json::array();
    for (const auto& t : rr->tools) {
      tools.push_back({{"type", "function"}, {"name", t.name}, {"description", t.description},
                       {"parameters", t.parameters ? *t.parameters : Json(nullptr)}, {"strict", false}});
    }
    Json j{{"id", id}, {"object", "response"}, {"created_at", created_at}, {"status", status}, {"model", model_id},
           {"output", output}, {"instructions", rr->instructions ? Json(*rr->instructions) : Json(nullptr)},
           {"tools", tools}, {"parallel_tool_calls", false},
           {"tool_choice", "auto"}, {"temperature", rr->gen.sampling.temperature}, {"top_p", rr->gen.sampling.top_p},
           {"error", nullptr},
           {"incomplete_details", incomplete.empty() ? Json(nullptr) : Json{{"reason", incomplete}}}};
    if (rr->reasoning_effort) {
      j["reasoning"] = {{"effort", std::string(harmony::reasoning_effort_name(*rr->reasoning_effort))}, {"summary", nullptr}};
    }
    if (u) {
      int64_t reasoning_tokens = 0;
      (void)reasoning_tokens;
      j["usage"] = {{"input_tokens", u->prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", u->cached_prompt_tokens}}},
                    {"output_tokens", u->completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", u->prompt_tokens + u->completion_tokens}};
    } else {
      j["usage"] = nullptr;
    }
    return j;
  };

  // Runs the generation, emitting through `emit`; returns the final response object.
  auto run = [this, handle, mapper, response_obj](const ResponseBuilder::Emit& emit, bool* gone) {
    ResponseBuilder builder(emit);
    std::string error;
    std::string finish;
    struct Out {
      runtime::Usage usage;
    };
    Out pr = [&] {
      Out out;
      bool cancelled = false;
      for (;;) {
        Event ev;
        if (!handle->next(ev, std::chrono::milliseconds(50))) {
          if (!cancelled && (stopping || !emit(":", nullptr))) handle->cancel(), cancelled = true, *gone = !stopping;
          continue;
        }
        if (ev.kind == Event::Kind::kDone) {
          out.usage = ev.usage;
          return out;
        }
        if (cancelled) continue;
        std::vector<OutputDelta> deltas;
        if (ev.kind == Event::Kind::kToken) {
          mapper->push(ev.token, &deltas);
          if (mapper->stopped_by_string()) mapper->finish(&deltas), finish = "stop";
        } else if (ev.kind == Event::Kind::kFinish) {
          if (ev.finish == runtime::FinishReason::kStop && ev.token >= 0) mapper->push(ev.token, &deltas);
          mapper->finish(&deltas);
          if (finish.empty()) finish = runtime::finish_reason_name(ev.finish);
          if (ev.finish == runtime::FinishReason::kError) error = ev.error;
        }
        bool ok = emit(":", nullptr);
        for (const auto& d : deltas) ok = ok && builder.on(d);
        if (!ok) *gone = true;
        if (!ok || (finish == "stop" && mapper->stopped_by_string())) handle->cancel(), cancelled = true;
      }
    }();
    if (!error.empty()) {
      Json j = response_obj(builder.output, "failed", &pr.usage, "");
      j["error"] = {{"code", "server_error"}, {"message", "generation failed: " + error}};
      return j;
    }
    return response_obj(builder.output, finish == "length" ? "incomplete" : "completed", &pr.usage,
                         finish == "length" ? "max_output_tokens" : "");
  };

  if (!g.stream) {
    bool gone = false;
    Json out = run([](const std::string&, const Json&) { return true; }, &gone);
    std::string text;
    for (const auto& item : out["output"]) {
      if (item["type"] == "message") text += item["content"][0]["text"].get<std::string>();
    }
    out["output_text"] = text;
    if (out["status"] == "failed") return send_error(res, ApiError{500, out["error"]["message"].get<std::string>(), "server_error", "", ""});
    return send_json(res, 200, out);
  }
  start_sse(*this, res, [run, response_obj](const SseWrite& write) {
    int64_t seq = 0;
    auto emit = [&](const std::string& type, Json data) {
      if (type == ":") return write(":", nullptr);  // heartbeat (see start_sse)
      Json ev{{"type", type}, {"sequence_number", seq++}};
      for (auto& [k, v] : data.items()) ev[k] = v;
      return write(type, ev);
    };
    Json initial = response_obj(Json::array(), "in_progress", nullptr, "");
    if (!emit("response.created", {{"response", initial}})) return;
    if (!emit("response.in_progress", {{"response", initial}})) return;
    bool gone = false;
    Json final_obj = run(emit, &gone);
    if (gone) return;
    const std::string status = final_obj["status"];
    const std::string type = status == "completed" ? "response.completed" : status == "failed" ? "response.failed" : "response.incomplete";
    emit(type, {{"response", final_obj}});
  });
}

}  // namespace brass::server
