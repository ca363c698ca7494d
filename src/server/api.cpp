// JSON -> request types for /v1/chat/completions, /v1/completions and /v1/responses.
// Every accessor checks the JSON type and range and reports the parameter path
// ("messages[2].role") in the ApiError, the way OpenAI's `param` field does.
#include "server/api.h"
#include "server/constraint_schema.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

namespace brass::server {

Json ApiError::to_json() const {
  Json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? Json(nullptr) : Json(param);
  e["code"] = code.empty() ? Json(nullptr) : Json(code);
  return Json{{"error", e}};
}

ApiError invalid_param(std::string param, std::string message) {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = "invalid_value";
  return e;
}

std::optional<ApiError> parse_json_body(const std::string& text, Json* out) {
  try {
    *out = Json::parse(text);
  } catch (const Json::parse_error& e) {
    ApiError err;
    err.message = fmt::format("request body is not valid JSON (byte {}): {}", e.byte, e.what());
    err.code = "invalid_json";
    return err;
  }
  if (!out->is_object()) {
    ApiError err;
    err.message = "request body must be a JSON object";
    err.code = "invalid_json";
    return err;
  }
  return std::nullopt;
}

namespace {

using Err = std::optional<ApiError>;

const char* type_name(const Json& j) { return j.type_name(); }

Err wrong_type(const std::string& param, const char* expected, const Json& got) {
  return invalid_param(param, fmt::format("'{}' must be {}, got {}", param, expected, type_name(got)));
}

// Present and not null.
const Json* field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Err get_string(const Json& obj, const char* key, const std::string& path, std::optional<std::string>* out) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return wrong_type(path, "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

Err get_bool(const Json& obj, const char* key, bool* out) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

Err get_number(const Json& obj, const char* key, double lo, double hi, std::optional<double>* out) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return wrong_type(key, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return invalid_param(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, d));
  }
  *out = d;
  return std::nullopt;
}

Err get_int(const Json& obj, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return wrong_type(key, "an integer", *v);
  const int64_t i = v->is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), INT64_MAX))
                                            : v->get<int64_t>();
  if (i < lo || i > hi) {
    return invalid_param(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, i));
  }
  *out = i;
  return std::nullopt;
}

// Message content: a string, or an array of text parts ({"type":"text"|"input_text"|
// "output_text", "text": ...}); null/absent is "".
Err get_content(const Json& msg, const std::string& path, std::string* out) {
  const Json* v = field(msg, "content");
  out->clear();
  if (!v) return std::nullopt;
  if (v->is_string()) {
    *out = v->get<std::string>();
    return std::nullopt;
  }
  if (!v->is_array()) return wrong_type(path + ".content", "a string or an array of content parts", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& part = (*v)[i];
    const std::string pp = fmt::format("{}.content[{}]", path, i);
    if (!part.is_object()) return wrong_type(pp, "an object", part);
    const Json* type = field(part, "type");
    if (!type || !type->is_string()) return invalid_param(pp + ".type", "content part needs a string 'type'");
    const std::string t = type->get<std::string>();
    if (t != "text" && t != "input_text" && t != "output_text" && t != "reasoning_text") {
      return invalid_param(pp + ".type", fmt::format("content part type '{}' is not supported (text only)", t));
    }
    const Json* text = field(part, "text");
    if (!text || !text->is_string()) return invalid_param(pp + ".text", "text part needs a string 'text'");
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

Err parse_effort(const std::string& s, const std::string& param, std::optional<harmony::ReasoningEffort>* out) {
  if (s == "low") *out = harmony::ReasoningEffort::kLow;
  else if (s == "medium") *out = harmony::ReasoningEffort::kMedium;
  else if (s == "high") *out = harmony::ReasoningEffort::kHigh;
  else return invalid_param(param, fmt::format("'{}' must be low, medium or high, got '{}'", param, s));
  return std::nullopt;
}

// Shared sampling/generation fields.
Err parse_gen(const Json& b, bool allow_test_hooks, bool chat, GenParams* g) {
  std::optional<double> d;
  std::optional<int64_t> i;
  auto& s = g->sampling;
  if (auto e = get_number(b, "temperature", 0, 2, &d)) return e;
  if (d) s.temperature = static_cast<float>(*d), d.reset();
  if (auto e = get_number(b, "top_p", 0, 1, &d)) return e;
  if (d) s.top_p = static_cast<float>(*d), d.reset();
  if (auto e = get_number(b, "min_p", 0, 1, &d)) return e;
  if (d) s.min_p = static_cast<float>(*d), d.reset();
  if (auto e = get_int(b, "top_k", -1, 1 << 20, &i)) return e;
  if (i) s.top_k = static_cast<int32_t>(std::max<int64_t>(*i, 0)), i.reset();
  if (auto e = get_number(b, "presence_penalty", -2, 2, &d)) return e;
  if (d) s.presence_penalty = static_cast<float>(*d), d.reset();
  if (auto e = get_number(b, "frequency_penalty", -2, 2, &d)) return e;
  if (d) s.frequency_penalty = static_cast<float>(*d), d.reset();
  if (auto e = get_number(b, "repetition_penalty", 0.01, 10, &d)) return e;
  if (d) s.repetition_penalty = static_cast<float>(*d), d.reset();
  if (const Json* v = field(b, "seed")) {
    if (!v->is_number_integer()) return wrong_type("seed", "an integer", *v);
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
    g->seed_given = true;
  } else {
    s.seed = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  }
  const char* max_keys[] = {"max_tokens", "max_completion_tokens", "max_output_tokens"};
  for (const char* k : max_keys) {
    if (auto e = get_int(b, k, 1, int64_t{1} << 31, &i)) return e;
    if (i) g->max_tokens = *i, i.reset();
  }
  if (auto e = get_int(b, "n", 1, 16, &i)) return e;
  if (i) g->n = static_cast<int32_t>(*i), i.reset();
  if (const Json* v = field(b, "stop")) {
    if (v->is_string()) {
      g->stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 4) return invalid_param("stop", "'stop' takes at most 4 sequences");
      for (const Json& x : *v) {
        if (!x.is_string()) return wrong_type("stop", "a string or an array of strings", x);
        g->stop.push_back(x.get<std::string>());
      }
    } else {
      return wrong_type("stop", "a string or an array of strings", *v);
    }
    for (const auto& st : g->stop) {
      if (st.empty()) return invalid_param("stop", "stop sequences must not be empty");
    }
  }
  // logprobs: chat takes a boolean (+ top_logprobs); completions an integer 0..5.
  if (const Json* v = field(b, "logprobs")) {
    if (chat) {
      if (!v->is_boolean()) return wrong_type("logprobs", "a boolean", *v);
      g->logprobs = v->get<bool>();
    } else {
      if (!v->is_number_integer()) return wrong_type("logprobs", "an integer", *v);
      const int64_t n = v->get<int64_t>();
      if (n < 0 || n > 20) return invalid_param("logprobs", "'logprobs' must be between 0 and 20");
      g->logprobs = true;
      g->top_logprobs = static_cast<int32_t>(n);
    }
  }
  if (chat) {
    if (auto e = get_int(b, "top_logprobs", 0, 20, &i)) return e;
    if (i) {
      if (!g->logprobs && *i > 0) return invalid_param("top_logprobs", "'top_logprobs' requires 'logprobs': true");
      g->top_logprobs = static_cast<int32_t>(*i);
    }
  }
  s.n_logprobs = g->logprobs ? g->top_logprobs : 0;
  if (auto e = get_bool(b, "stream", &g->stream)) return e;
  if (const Json* v = field(b, "stream_options")) {
    if (!v->is_object()) return wrong_type("stream_options", "an object", *v);
    if (const Json* u = field(*v, "include_usage")) {
      if (!u->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *u);
      g->include_usage = u->get<bool>();
    }
  }
  if (const Json* v = field(b, "brass_test_force")) {
    if (!allow_test_hooks) {
      return invalid_param("brass_test_force", "'brass_test_force' is a test hook: start the server with --test-hooks");
    }
    if (!v->is_string()) return wrong_type("brass_test_force", "a string", *v);
    g->test_force = v->get<std::string>();
  }
  return std::nullopt;
}

Err parse_tools(const Json& b, bool responses_shape, std::vector<FunctionTool>* tools) {
  const Json* v = field(b, "tools");
  if (!v) return std::nullopt;
  if (!v->is_array()) return wrong_type("tools", "an array", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& t = (*v)[i];
    const std::string p = fmt::format("tools[{}]", i);
    if (!t.is_object()) return wrong_type(p, "an object", t);
    const Json* type = field(t, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "function") {
      return invalid_param(p + ".type", "only tools of type 'function' are supported");
    }
    const Json* fn = responses_shape ? &t : field(t, "function");
    if (!fn || !fn->is_object()) return invalid_param(p + ".function", "tool needs a 'function' object");
    FunctionTool ft;
    const Json* name = field(*fn, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty()) {
      return invalid_param(p + ".function.name", "function needs a non-empty string 'name'");
    }
    ft.name = name->get<std::string>();
    for (char c : ft.name) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) {
        return invalid_param(p + ".function.name", "function names may contain only a-z, A-Z, 0-9, _ and -");
      }
    }
    if (const Json* d = field(*fn, "description")) {
      if (!d->is_string()) return wrong_type(p + ".function.description", "a string", *d);
      ft.description = d->get<std::string>();
    }
    if (const Json* prm = field(*fn, "parameters")) {
      if (!prm->is_object()) return wrong_type(p + ".function.parameters", "a JSON Schema object", *prm);
      ft.parameters = *prm;
      if (auto e = check_json_schema(*prm, p + ".function.parameters")) return invalid_param(e->path, e->message);
    }
    tools->push_back(std::move(ft));
  }
  return std::nullopt;
}

Err parse_tool_choice(const Json& b, bool responses_shape, const std::vector<FunctionTool>& tools,
                      ToolChoice* choice, std::string* name) {
  const Json* v = field(b, "tool_choice");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "auto") *choice = ToolChoice::kAuto;
    else if (s == "none") *choice = ToolChoice::kNone;
    else if (s == "required") *choice = ToolChoice::kRequired;
    else return invalid_param("tool_choice", fmt::format("'tool_choice' must be auto, none, required or a function, got '{}'", s));
  } else if (v->is_object()) {
    const Json* fn = responses_shape ? v : field(*v, "function");
    const Json* n = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!n || !n->is_string()) return invalid_param("tool_choice", "named tool_choice needs function.name");
    *choice = ToolChoice::kNamed;
    *name = n->get<std::string>();
  } else {
    return wrong_type("tool_choice", "a string or an object", *v);
  }
  if (*choice == ToolChoice::kRequired || *choice == ToolChoice::kNamed) {
    if (tools.empty()) return invalid_param("tool_choice", "'tool_choice' requires 'tools'");
  }
  if (*choice == ToolChoice::kNamed) {
    bool found = false;
    for (const auto& t : tools) found |= t.name == *name;
    if (!found) return invalid_param("tool_choice", fmt::format("tool_choice names '{}', which is not in 'tools'", *name));
  }
  return std::nullopt;
}

Err parse_chat_message(const Json& m, const std::string& path, ChatMessage* out) {
  if (!m.is_object()) return wrong_type(path, "an object", m);
  const Json* role = field(m, "role");
  if (!role || !role->is_string()) return invalid_param(path + ".role", "message needs a string 'role'");
  const std::string r = role->get<std::string>();
  auto parsed = harmony::parse_role(r);
  if (!parsed) {
    return invalid_param(path + ".role", fmt::format("unknown role '{}' (system, developer, user, assistant, tool)", r));
  }
  out->role = *parsed;
  if (auto e = get_content(m, path, &out->content)) return e;
  if (out->role == harmony::Role::kAssistant) {
    std::optional<std::string> rc;
    if (auto e = get_string(m, "reasoning_content", path + ".reasoning_content", &rc)) return e;
    if (!rc) {
      if (auto e = get_string(m, "reasoning", path + ".reasoning", &rc)) return e;
    }
    out->reasoning = rc;
    if (const Json* tc = field(m, "tool_calls")) {
      if (!tc->is_array()) return wrong_type(path + ".tool_calls", "an array", *tc);
      for (size_t i = 0; i < tc->size(); ++i) {
        const Json& c = (*tc)[i];
        const std::string p = fmt::format("{}.tool_calls[{}]", path, i);
        if (!c.is_object()) return wrong_type(p, "an object", c);
        const Json* fn = field(c, "function");
        if (!fn || !fn->is_object()) return invalid_param(p + ".function", "tool call needs a 'function' object");
        ToolCall call;
        std::optional<std::string> s;
        if (auto e = get_string(c, "id", p + ".id", &s)) return e;
        call.id = s.value_or("");
        s.reset();
        if (auto e = get_string(*fn, "name", p + ".function.name", &s)) return e;
        if (!s || s->empty()) return invalid_param(p + ".function.name", "tool call needs a function name");
        call.name = *s;
        s.reset();
        if (auto e = get_string(*fn, "arguments", p + ".function.arguments", &s)) return e;
        call.arguments = s.value_or("{}");
        out->tool_calls.push_back(std::move(call));
      }
    }
  } else if (out->role == harmony::Role::kTool) {
    if (auto e = get_string(m, "tool_call_id", path + ".tool_call_id", &out->tool_call_id)) return e;
    if (auto e = get_string(m, "name", path + ".name", &out->name)) return e;
    if (!out->tool_call_id && !out->name) {
      return invalid_param(path + ".tool_call_id", "tool message needs 'tool_call_id'");
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_chat_request(const Json& b, bool allow_test_hooks, ChatRequest* out) {
  std::optional<std::string> model;
  if (auto e = get_string(b, "model", "model", &model)) return e;
  out->model = model.value_or("");
  const Json* msgs = field(b, "messages");
  if (!msgs) return invalid_param("messages", "'messages' is required");
  if (!msgs->is_array()) return wrong_type("messages", "an array", *msgs);
  if (msgs->empty()) return invalid_param("messages", "'messages' must not be empty");
  for (size_t i = 0; i < msgs->size(); ++i) {
    ChatMessage m;
    if (auto e = parse_chat_message((*msgs)[i], fmt::format("messages[{}]", i), &m)) return e;
    out->messages.push_back(std::move(m));
  }
  if (auto e = parse_tools(b, false, &out->tools)) return e;
  if (auto e = parse_tool_choice(b, false, out->tools, &out->tool_choice, &out->tool_choice_name)) return e;
  std::optional<std::string> effort;
  if (auto e = get_string(b, "reasoning_effort", "reasoning_effort", &effort)) return e;
  if (effort) {
    if (auto e = parse_effort(*effort, "reasoning_effort", &out->reasoning_effort)) return e;
  }
  if (const Json* rf = field(b, "response_format")) {
    if (!rf->is_object()) return wrong_type("response_format", "an object", *rf);
    const Json* t = field(*rf, "type");
    if (!t || !t->is_string()) return invalid_param("response_format.type", "response_format needs a string 'type'");
    const std::string ts = t->get<std::string>();
    if (ts == "text") {
      out->response_format = ResponseFormat::kText;
    } else if (ts == "json_object") {
      out->response_format = ResponseFormat::kJsonObject;
    } else if (ts == "json_schema") {
      out->response_format = ResponseFormat::kJsonSchema;
      const Json* js = field(*rf, "json_schema");
      if (!js || !js->is_object()) return invalid_param("response_format.json_schema", "json_schema format needs a 'json_schema' object");
      const Json* schema = field(*js, "schema");
      if (schema && !schema->is_object()) return wrong_type("response_format.json_schema.schema", "an object", *schema);
      out->json_schema = schema ? *schema : Json::object();
      if (auto e = check_json_schema(*out->json_schema, "response_format.json_schema.schema"))
        return invalid_param(e->path, e->message);
    } else {
      return invalid_param("response_format.type", fmt::format("unknown response_format type '{}'", ts));
    }
  }
  return parse_gen(b, allow_test_hooks, true, &out->gen);
}

std::optional<ApiError> parse_completion_request(const Json& b, bool allow_test_hooks, CompletionRequest* out) {
  std::optional<std::string> model;
  if (auto e = get_string(b, "model", "model", &model)) return e;
  out->model = model.value_or("");
  const Json* p = field(b, "prompt");
  if (!p) return invalid_param("prompt", "'prompt' is required");
  if (p->is_string()) {
    out->prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    std::vector<int32_t> ids;
    for (const Json& x : *p) {
      if (!x.is_number_integer()) return wrong_type("prompt", "a string or an array of token ids", x);
      const int64_t v = x.get<int64_t>();
      if (v < 0 || v > INT32_MAX) return invalid_param("prompt", "token id out of range");
      ids.push_back(static_cast<int32_t>(v));
    }
    out->prompt_tokens = std::move(ids);
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    out->prompt_text = (*p)[0].get<std::string>();
  } else {
    return invalid_param("prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
  }
  if (!out->prompt_tokens && out->prompt_text.empty()) return invalid_param("prompt", "'prompt' must not be empty");
  bool echo = false;
  if (auto e = get_bool(b, "echo", &echo)) return e;
  if (echo) return invalid_param("echo", "'echo' is not supported");
  if (const Json* bo = field(b, "best_of"); bo && !(bo->is_number_integer() && bo->get<int64_t>() == 1)) {
    return invalid_param("best_of", "'best_of' is not supported (only 1)");
  }
  if (auto e = parse_gen(b, allow_test_hooks, false, &out->gen)) return e;
  if (out->gen.max_tokens < 0) out->gen.max_tokens = 16;  // the OpenAI default for completions
  return std::nullopt;
}

std::optional<ApiError> parse_responses_request(const Json& b, bool allow_test_hooks, ResponsesRequest* out) {
  std::optional<std::string> model;
  if (auto e = get_string(b, "model", "model", &model)) return e;
  out->model = model.value_or("");
  if (auto e = get_string(b, "instructions", "instructions", &out->instructions)) return e;
  if (field(b, "previous_response_id")) {
    return invalid_param("previous_response_id", "'previous_response_id' is not supported (the server stores no responses): send the items");
  }
  const Json* in = field(b, "input");
  if (!in) return invalid_param("input", "'input' is required");
  if (in->is_string()) {
    ChatMessage m;
    m.content = in->get<std::string>();
    out->messages.push_back(std::move(m));
  } else if (in->is_array()) {
    for (size_t i = 0; i < in->size(); ++i) {
      const Json& item = (*in)[i];
      const std::string p = fmt::format("input[{}]", i);
      if (!item.is_object()) return wrong_type(p, "an object", item);
      std::string type = "message";
      if (const Json* t = field(item, "type")) {
        if (!t->is_string()) return wrong_type(p + ".type", "a string", *t);
        type = t->get<std::string>();
      }
      if (type == "message") {
        ChatMessage m;
        if (auto e = parse_chat_message(item, p, &m)) return e;
        if (m.role == harmony::Role::kTool) return invalid_param(p + ".role", "use function_call_output items for tool results");
        out->messages.push_back(std::move(m));
      } else if (type == "function_call") {
        ToolCall c;
        std::optional<std::string> s;
        if (auto e = get_string(item, "call_id", p + ".call_id", &s)) return e;
        c.id = s.value_or("");
        s.reset();
        if (auto e = get_string(item, "name", p + ".name", &s)) return e;
        if (!s) return invalid_param(p + ".name", "function_call item needs 'name'");
        c.name = *s;
        s.reset();
        if (auto e = get_string(item, "arguments", p + ".arguments", &s)) return e;
        c.arguments = s.value_or("{}");
        // Consecutive function calls (and a preceding reasoning item) join one assistant turn.
        if (!out->messages.empty() && out->messages.back().role == harmony::Role::kAssistant &&
            out->messages.back().content.empty()) {
          out->messages.back().tool_calls.push_back(std::move(c));
        } else {
          ChatMessage m;
          m.role = harmony::Role::kAssistant;
          m.tool_calls.push_back(std::move(c));
          out->messages.push_back(std::move(m));
        }
      } else if (type == "function_call_output") {
        ChatMessage m;
        m.role = harmony::Role::kTool;
        std::optional<std::string> s;
        if (auto e = get_string(item, "call_id", p + ".call_id", &s)) return e;
        if (!s) return invalid_param(p + ".call_id", "function_call_output needs 'call_id'");
        m.tool_call_id = s;
        s.reset();
        if (auto e = get_string(item, "output", p + ".output", &s)) return e;
        m.content = s.value_or("");
        out->messages.push_back(std::move(m));
      } else if (type == "reasoning") {
        std::string text;
        if (auto e = get_content(item, p, &text)) return e;
        ChatMessage m;
        m.role = harmony::Role::kAssistant;
        m.reasoning = text;
        out->messages.push_back(std::move(m));
      } else {
        return invalid_param(p + ".type", fmt::format("input item type '{}' is not supported", type));
      }
    }
  } else {
    return wrong_type("input", "a string or an array of items", *in);
  }
  // A reasoning item followed by an assistant message: one assistant turn.
  std::vector<ChatMessage> merged;
  for (auto& m : out->messages) {
    if (!merged.empty() && merged.back().role == harmony::Role::kAssistant && m.role == harmony::Role::kAssistant &&
        merged.back().content.empty() && merged.back().tool_calls.empty() && !m.reasoning) {
      m.reasoning = merged.back().reasoning;
      merged.back() = std::move(m);
    } else {
      merged.push_back(std::move(m));
    }
  }
  out->messages = std::move(merged);
  if (out->messages.empty()) return invalid_param("input", "'input' must not be empty");
  if (auto e = parse_tools(b, true, &out->tools)) return e;
  if (auto e = parse_tool_choice(b, true, out->tools, &out->tool_choice, &out->tool_choice_name)) return e;
  if (const Json* r = field(b, "reasoning")) {
    if (!r->is_object()) return wrong_type("reasoning", "an object", *r);
    std::optional<std::string> effort;
    if (auto e = get_string(*r, "effort", "reasoning.effort", &effort)) return e;
    if (effort) {
      if (auto e = parse_effort(*effort, "reasoning.effort", &out->reasoning_effort)) return e;
    }
  }
  if (field(b, "n")) return invalid_param("n", "'n' is not a Responses API parameter");
  return parse_gen(b, allow_test_hooks, true, &out->gen);
}

}  // namespace brass::server
