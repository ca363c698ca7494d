// OpenAI API request types and their JSON parsing (the server layer is the only place
// JSON for the API lives). Parsing is strict about types: a field of the wrong JSON type,
// an unknown role, an out-of-range value or an unsupported feature is an ApiError (400,
// OpenAI-shaped) naming the parameter, never a crash or a silent default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harmony/chat.h"
#include "runtime/sampler.h"

namespace brass::server {

using Json = nlohmann::ordered_json;

// {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  Json to_json() const;
};
ApiError invalid_param(std::string param, std::string message);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

// One message of /v1/chat/completions (or an item of /v1/responses, converted).
struct ChatMessage {
  harmony::Role role = harmony::Role::kUser;
  std::string content;
  std::optional<std::string> reasoning;  // assistant: reasoning_content / reasoning
  std::vector<ToolCall> tool_calls;       // assistant
  std::optional<std::string> tool_call_id;  // tool
  std::optional<std::string> name;          // tool: function name (optional)
};

struct FunctionTool {
  std::string name;
  std::string description;
  std::optional<Json> parameters;
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

enum class ResponseFormat { kText, kJsonObject, kJsonSchema };

// Generation parameters shared by every endpoint.
struct GenParams {
  runtime::SamplerParams sampling;
  bool seed_given = false;
  int64_t max_tokens = -1;  // -1: until the context is full
  int32_t n = 1;
  std::vector<std::string> stop;  // stop strings (final-channel text / completion text)
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool stream = false;
  bool include_usage = false;
  // Test-only (--test-hooks): Harmony text whose tokens the completion is forced to start
  // with (special-token spellings allowed); sampling continues after it.
  std::optional<std::string> test_force;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<FunctionTool> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed
  std::optional<harmony::ReasoningEffort> reasoning_effort;
  ResponseFormat response_format = ResponseFormat::kText;
  std::optional<Json> json_schema;  // kJsonSchema
  GenParams gen;
};

struct CompletionRequest {
  std::string model;
  std::string prompt_text;                  // prompt as text (special spellings parsed)
  std::optional<std::vector<int32_t>> prompt_tokens;  // or as token ids
  GenParams gen;
};

// /v1/responses, already converted to chat messages (instructions become the developer
// message's instructions).
struct ResponsesRequest {
  std::string model;
  std::optional<std::string> instructions;
  std::vector<ChatMessage> messages;
  std::vector<FunctionTool> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;
  std::optional<harmony::ReasoningEffort> reasoning_effort;
  GenParams gen;
};

// Each returns the first problem found. `allow_test_hooks`: accept `brass_test_force`.
std::optional<ApiError> parse_chat_request(const Json& body, bool allow_test_hooks, ChatRequest* out);
std::optional<ApiError> parse_completion_request(const Json& body, bool allow_test_hooks,
                                                 CompletionRequest* out);
std::optional<ApiError> parse_responses_request(const Json& body, bool allow_test_hooks,
                                                ResponsesRequest* out);

// Parse a JSON body; malformed JSON -> 400 naming the byte offset.
std::optional<ApiError> parse_json_body(const std::string& text, Json* out);

}  // namespace brass::server
