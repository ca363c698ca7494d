// Harmony renderer: Conversation -> a sequence of pieces, each either ordinary text or
// one special token. Tokens come from pieces (text via Tokenizer::encode with
// allow_special=false, one encode call per piece exactly where harmony makes one, so
// token boundaries match; specials via Tokenizer::special), and the rendered text is
// their concatenation. Layout rules follow openai/harmony's encoding.rs:
//   <|start|>{role}[:name][ to={recipient}][<|channel|>{channel}][ {content_type}]
//   <|message|>{content}<|end|>   (<|call|> for assistant messages with a recipient)
// a tool message's header is its name (`functions.get_weather`), and a content type
// starting with `<|constrain|>` renders the marker as the special token after a space.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "harmony/chat.h"
#include "tokenizer/tokenizer.h"

namespace brass::harmony {

// Special-token spellings harmony uses.
inline constexpr std::string_view kStart = "<|start|>";
inline constexpr std::string_view kMessage = "<|message|>";
inline constexpr std::string_view kEnd = "<|end|>";
inline constexpr std::string_view kReturn = "<|return|>";
inline constexpr std::string_view kCall = "<|call|>";
inline constexpr std::string_view kChannel = "<|channel|>";
inline constexpr std::string_view kConstrain = "<|constrain|>";

struct Piece {
  enum class Kind { kText, kSpecial };
  Kind kind = Kind::kText;
  std::string text;  // the text, or the special token's spelling ("<|start|>")
  bool operator==(const Piece&) const = default;
};
using Pieces = std::vector<Piece>;

// Which analysis (chain-of-thought) messages a conversation render drops.
enum class AnalysisDropRule {
  // openai/harmony main: when the last assistant message is on `final`, drop analysis
  // messages that come before the FIRST `final` message; otherwise drop nothing (so an
  // unfinished tool-call chain keeps its reasoning). Matches every golden in harmony's
  // test-data/ except test_multi_turn_auto_drop_analysis.txt.
  kHarmony,
  // Drop every analysis message that has a later `final` message, whatever comes last
  // (the rule of harmony PR #96 and of the gpt-oss Hugging Face chat template): earlier
  // turns lose their reasoning, the current unfinished tool-call chain keeps it.
  kBeforeLastFinal,
};

struct RenderConfig {
  // harmony's RenderConversationConfig.auto_drop_analysis. Its Python API defaults to
  // true; its Rust API with `None` means false.
  bool auto_drop_analysis = true;
  AnalysisDropRule drop_rule = AnalysisDropRule::kHarmony;
};

// Per-message options (harmony's RenderOptions); the conversation renderers compute them.
struct MessageRenderOptions {
  // Adds "Calls to these tools must go to the commentary channel: 'functions'." to the
  // system message's channel line.
  bool conversation_has_function_tools = false;
};

Result<Pieces> render_message(const Message& message, const MessageRenderOptions& options = {});
Result<Pieces> render_conversation(std::span<const Message> messages,
                                   const RenderConfig& config = {});
// The prompt for the next turn: the conversation, then `<|start|>{next_role}`.
Result<Pieces> render_conversation_for_completion(std::span<const Message> messages,
                                                  Role next_role = Role::kAssistant,
                                                  const RenderConfig& config = {});
// For training targets: like render_conversation, but a trailing assistant `final`
// message ends with <|return|> instead of <|end|>.
Result<Pieces> render_conversation_for_training(std::span<const Message> messages,
                                                const RenderConfig& config = {});

// Indices of the messages a render with `config` keeps (the analysis-dropping rule).
std::vector<size_t> kept_message_indices(std::span<const Message> messages,
                                         const RenderConfig& config);

std::string pieces_to_text(const Pieces& pieces);
Result<std::vector<tok::Token>> pieces_to_tokens(const Pieces& pieces, const tok::Tokenizer& tok);

// Convenience: render_conversation_for_completion straight to tokens / text.
Result<std::vector<tok::Token>> render_prompt_tokens(std::span<const Message> messages,
                                                     const tok::Tokenizer& tok,
                                                     Role next_role = Role::kAssistant,
                                                     const RenderConfig& config = {});

// Tokens that end a message in a completion: <|return|>, <|call|>, <|end|> (harmony's
// stop_tokens), and those that end the model's turn: <|return|>, <|call|>.
Result<std::vector<tok::Token>> stop_tokens(const tok::Tokenizer& tok);
Result<std::vector<tok::Token>> stop_tokens_for_assistant_actions(const tok::Tokenizer& tok);

}  // namespace brass::harmony
