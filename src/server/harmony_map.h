// OpenAI <-> Harmony mapping, both directions, with no HTTP or engine in sight (unit
// tested on hand-built token streams):
//  - build_conversation: chat messages + tools + reasoning effort -> the Harmony
//    conversation to render (system message with the effort and date; OpenAI system and
//    developer messages -> the developer message's instructions; function tools -> the
//    developer message's `functions` namespace; assistant reasoning -> an analysis
//    message; assistant tool_calls -> commentary messages to functions.NAME with
//    <|constrain|>json; tool messages -> `functions.NAME to=assistant` on commentary, the
//    name found through tool_call_id).
//  - OutputMapper: generated tokens -> OpenAI-level deltas. Analysis -> reasoning, final
//    (and commentary without a recipient, i.e. preambles) -> content, any message with a
//    recipient -> a tool call (functions.X -> name X) whose content streams as the
//    arguments. Stop strings cut the content (held back while a stop could still match).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "harmony/chat.h"
#include "harmony/parser.h"
#include "server/api.h"
#include "tokenizer/tokenizer.h"

namespace brass::server {

struct ConversationSpec {
  const std::vector<ChatMessage>* messages = nullptr;
  const std::vector<FunctionTool>* tools = nullptr;  // rendered unless tool_choice none
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::optional<harmony::ReasoningEffort> reasoning_effort;  // default medium
  std::optional<std::string> instructions;  // Responses API `instructions`
  std::string date;                         // YYYY-MM-DD (conversation start date)
};

// 400-style errors (unknown tool_call_id, ...) come back as ApiError.
std::optional<ApiError> build_conversation(const ConversationSpec& spec, std::vector<harmony::Message>* out);

// A fresh OpenAI-style id: prefix + 24 random alphanumerics ("call_...", "chatcmpl-...").
std::string random_id(const std::string& prefix);

struct OutputDelta {
  enum class Kind { kStart, kDelta, kEnd };
  enum class Target { kReasoning, kContent, kToolCall };
  Kind kind = Kind::kDelta;
  Target target = Target::kContent;
  std::string text;     // kDelta: the new text (arguments text for tool calls)
  int tool_index = -1;  // kToolCall: 0, 1, ... in call order
  std::string call_id;  // kToolCall
  std::string name;     // kToolCall: function name
};

struct MappedToolCall {
  std::string id, name, arguments;
};

class OutputMapper {
 public:
  // `stop` strings end the content when the decoded content contains one (trimmed).
  static Result<std::unique_ptr<OutputMapper>> create(const tok::Tokenizer& tok, std::vector<std::string> stop,
                                                      std::function<std::string()> make_call_id = {});

  // Feed one generated token (the final stop token too); appends what it produced.
  void push(int32_t token, std::vector<OutputDelta>* out);
  // End of generation: completes an open message and releases held-back content.
  void finish(std::vector<OutputDelta>* out);

  bool stopped_by_string() const { return stopped_; }
  // The last pushed token was content text of a content message (for chat logprobs).
  bool last_was_content() const { return last_was_content_; }
  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }
  bool has_reasoning() const { return has_reasoning_; }
  const std::vector<MappedToolCall>& tool_calls() const { return calls_; }

 private:
  OutputMapper(const tok::Tokenizer& tok, harmony::StreamParser parser, std::vector<std::string> stop,
               std::function<std::string()> make_call_id);
  void on_event(const harmony::ParseEvent& e, std::vector<OutputDelta>* out);
  void add_content(const std::string& text, std::vector<OutputDelta>* out);
  void flush_held(std::vector<OutputDelta>* out);

  const tok::Tokenizer* tok_;
  harmony::StreamParser parser_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::function<std::string()> make_call_id_;
  std::optional<OutputDelta::Target> current_;  // target of the open message
  std::string content_;    // content released so far
  std::string held_;       // content not yet released (a stop string could start here)
  std::string reasoning_;
  bool has_reasoning_ = false;
  std::vector<MappedToolCall> calls_;
  bool stopped_ = false;
  bool finished_ = false;
  bool last_was_content_ = false;
};

}  // namespace brass::server
