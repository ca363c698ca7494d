// JSON -> request types: random parameter values parse back exactly; every malformed
// field is a 400 naming its parameter; Responses items fold into chat turns.
#include <gtest/gtest.h>

#include "server/api.h"
#include "test_util.h"

namespace brass::server {
namespace {

using testing::Seeded;

TEST(Api, RandomSamplingFieldsRoundTrip) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int iter = 0; iter < 200; ++iter) {
    const double temperature = 2.0 * u01(s.rng), top_p = u01(s.rng), min_p = u01(s.rng);
    const double pres = 4.0 * u01(s.rng) - 2.0, freq = 4.0 * u01(s.rng) - 2.0;
    const int64_t top_k = static_cast<int64_t>(s.rng() % 500), max_tokens = 1 + static_cast<int64_t>(s.rng() % 5000);
    const uint64_t seed = s.rng() >> 1;
    const int n = 1 + static_cast<int>(s.rng() % 8), top_logprobs = static_cast<int>(s.rng() % 21);
    Json b{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"temperature", temperature},
           {"top_p", top_p}, {"min_p", min_p}, {"presence_penalty", pres}, {"frequency_penalty", freq},
           {"top_k", top_k}, {"seed", seed}, {"n", n}, {"logprobs", true}, {"top_logprobs", top_logprobs},
           {iter % 2 ? "max_tokens" : "max_completion_tokens", max_tokens}, {"stream", iter % 3 == 0},
           {"stream_options", {{"include_usage", iter % 5 == 0}}}, {"stop", {"ab", "c\nd"}}};
    ChatRequest r;
    auto e = parse_chat_request(b, false, &r);
    ASSERT_FALSE(e) << e->message;
    EXPECT_FLOAT_EQ(r.gen.sampling.temperature, static_cast<float>(temperature));
    EXPECT_FLOAT_EQ(r.gen.sampling.top_p, static_cast<float>(top_p));
    EXPECT_FLOAT_EQ(r.gen.sampling.min_p, static_cast<float>(min_p));
    EXPECT_FLOAT_EQ(r.gen.sampling.presence_penalty, static_cast<float>(pres));
    EXPECT_FLOAT_EQ(r.gen.sampling.frequency_penalty, static_cast<float>(freq));
    EXPECT_EQ(r.gen.sampling.top_k, top_k);
    EXPECT_EQ(r.gen.sampling.seed, seed);
    EXPECT_TRUE(r.gen.seed_given);
    EXPECT_EQ(r.gen.n, n);
    EXPECT_EQ(r.gen.max_tokens, max_tokens);
    EXPECT_EQ(r.gen.sampling.n_logprobs, top_logprobs);
    EXPECT_EQ(r.gen.stream, iter % 3 == 0);
    EXPECT_EQ(r.gen.include_usage, iter % 5 == 0);
    EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"ab", "c\nd"}));
  }
}

TEST(Api, MessagesToolsAndChoice) {
  Json b = Json::parse(R"({
    "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "weather "}, {"type": "text", "text": "in Paris?"}]},
      {"role": "assistant", "content": null, "reasoning_content": "need the tool",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18C"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "reasoning_effort": "high",
    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
  })");
  ChatRequest r;
  auto e = parse_chat_request(b, false, &r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "weather in Paris?");
  EXPECT_EQ(r.messages[2].reasoning, "need the tool");
  ASSERT_EQ(r.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[2].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(r.messages[3].tool_call_id, "call_1");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].description, "Weather now");
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tool_choice_name, "get_weather");
  EXPECT_EQ(r.reasoning_effort, harmony::ReasoningEffort::kHigh);
  EXPECT_EQ(r.response_format, ResponseFormat::kJsonSchema);
}

// Each bad body -> 400 with the expected `param`.
TEST(Api, ErrorsNameTheParameter) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({})", "messages"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": -0.1})", "top_p"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": 7})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]})", "stop"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "extreme"})", "reasoning_effort"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes",
           "tools": [{"type": "function", "function": {"name": "f"}}]})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "g"}},
           "tools": [{"type": "function", "function": {"name": "f"}}]})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]})", "tools[0].type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})",
       "tools[0].function.name"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})", "response_format.type"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].tool_call_id"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
           "json_schema": {"name": "s", "schema": {"type": "object", "properties": {"a": {"type": "wizard"}}}}}})",
       "response_format.json_schema.schema.properties.a.type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
           "json_schema": {"name": "s", "schema": {"$ref": "#/$defs/missing"}}}})",
       "response_format.json_schema.schema.$ref"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f",
           "parameters": {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}}}]})",
       "tools[0].function.parameters.properties.n.multipleOf"},
      {R"({"messages": [{"role": "user", "content": "x"}], "brass_test_force": "x"})", "brass_test_force"},
  };
  for (const auto& [text, param] : cases) {
    SCOPED_TRACE(text);
    Json body;
    ASSERT_FALSE(parse_json_body(text, &body));
    ChatRequest r;
    auto e = parse_chat_request(body, false, &r);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, param) << e->message;
    const Json j = e->to_json();
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
}

TEST(Api, MalformedJsonBody) {
  for (const char* text : {"{", "{\"messages\": [}", "[1,2]", "nul", "\"str\""}) {
    Json body;
    auto e = parse_json_body(text, &body);
    ASSERT_TRUE(e.has_value()) << text;
    EXPECT_EQ(e->status, 400);
  }
}

TEST(Api, CompletionPromptForms) {
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(Json::parse(R"({"prompt": "hello"})"), false, &r));
  EXPECT_EQ(r.prompt_text, "hello");
  EXPECT_EQ(r.gen.max_tokens, 16);  // the OpenAI default
  CompletionRequest r2;
  ASSERT_FALSE(parse_completion_request(Json::parse(R"({"prompt": [1, 2, 3], "logprobs": 2, "max_tokens": 5})"), false, &r2));
  EXPECT_EQ(*r2.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(r2.gen.logprobs);
  EXPECT_EQ(r2.gen.sampling.n_logprobs, 2);
  CompletionRequest r3;
  auto e = parse_completion_request(Json::parse(R"({"prompt": "x", "echo": true})"), false, &r3);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "echo");
}

TEST(Api, ResponsesItemsFoldIntoTurns) {
  Json b = Json::parse(R"({
    "instructions": "be kind", "reasoning": {"effort": "low"},
    "input": [
      {"role": "user", "content": "hi"},
      {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "use tool"}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"a\":1}"},
      {"type": "function_call_output", "call_id": "c1", "output": "one"},
      {"type": "function_call_output", "call_id": "c2", "output": "two"}
    ],
    "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}]
  })");
  ResponsesRequest r;
  auto e = parse_responses_request(b, false, &r);
  ASSERT_FALSE(e) << e->message;
  EXPECT_EQ(r.instructions, "be kind");
  EXPECT_EQ(r.reasoning_effort, harmony::ReasoningEffort::kLow);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].role, harmony::Role::kAssistant);
  EXPECT_EQ(r.messages[1].reasoning, "use tool");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[1].tool_calls[1].name, "g");
  EXPECT_EQ(r.messages[3].tool_call_id, "c2");
  EXPECT_EQ(r.tools.size(), 2u);
}

}  // namespace
}  // namespace brass::server
