// Streaming Harmony parser: completion tokens in, message events out.
//
// A message is `<|start|>HEADER<|message|>CONTENT STOP` with STOP one of <|end|>,
// <|return|>, <|call|>. The header holds the role (or a tool's name), an optional
// `<|channel|>NAME`, an optional `to=RECIPIENT` (before or after the channel, as models
// emit both), and an optional content type (`code`, `json`, `<|constrain|>json`, with
// or without a space before <|constrain|>). Control is decided by token id only: an
// ordinary token whose text spells "<|end|>" is content, never a stop.
// When the prompt ended with `<|start|>assistant`, construct with `role` set: the parser
// then starts inside that message's header (harmony's StreamableParser(…, Some(role))).
//
// Header semantics are openai/harmony's (recipient/content type from the last
// whitespace-separated parts, unknown role + recipient => tool message named by the
// role string). On well-formed streams both modes give harmony's messages.
//
// Strict mode (default): the first malformed token makes push()/finish() return an
// error naming the 0-based token index; the parser then stays failed. Malformed means:
// a token other than <|start|> between messages; <|start|> or a stop token inside a
// header; a header that does not parse (unknown role, empty channel, leftover words,
// invalid UTF-8); a special token other than a stop inside content; an id the tokenizer
// does not know; EOS inside a header; a header longer than max_header_bytes.
//
// Recovering mode never fails. It records a ParseWarning for each problem and:
//  - between messages: skips ordinary tokens; a bare <|channel|> starts an assistant
//    message (the model left out `<|start|>assistant`);
//  - <|start|> inside a header or content: ends the current message (content so far) and
//    starts a new header; <|channel|> inside content likewise starts a new message of
//    the same role with that channel;
//  - a stop token inside a header: as harmony's non-strict mode, the header's channel is
//    kept and its remaining words become the message content (if a role is known);
//  - a header that does not parse: keeps what parsed (an unknown role becomes assistant),
//    ignores leftover words;
//  - other special tokens in a header or content, and unknown ids in a header: dropped;
//    unknown ids in content become U+FFFD (as harmony);
//  - EOS inside a header, or a header over max_header_bytes: the header is discarded.
// Content bytes are decoded incrementally; a character split across tokens waits for its
// last byte, invalid UTF-8 becomes U+FFFD in both modes (not an error: the model may
// sample any bytes).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "harmony/chat.h"
#include "tokenizer/tokenizer.h"

namespace brass::harmony {

struct ParsedHeader {
  Author author;
  std::optional<std::string> recipient;
  std::optional<std::string> channel;
  std::optional<std::string> content_type;
  bool operator==(const ParsedHeader&) const = default;
};

enum class StopReason { kEnd, kReturn, kCall, kEos, kImplicit };  // kImplicit: recovering only

struct ParseOptions {
  bool strict = true;
  std::optional<Role> role;       // start inside the header of a message of this role
  size_t max_header_bytes = 1 << 16;
};

struct ParseEvent {
  enum class Kind {
    kMessageStart,  // header parsed (at <|message|>): role, channel, recipient, content type
    kContentDelta,  // delta: newly decoded text (whole UTF-8 characters)
    kMessageEnd,    // message complete; stop says why
    kToolCall,      // after kMessageEnd of an assistant message with a recipient
  };
  Kind kind = Kind::kMessageStart;
  size_t token_index = 0;  // token that caused it; for EOS, the number of tokens pushed
  ParsedHeader header;
  std::string delta;
  Message message;  // kMessageEnd / kToolCall: the complete message (text content)
  StopReason stop = StopReason::kEnd;
};

struct ParseWarning {
  size_t token_index = 0;
  std::string what;
};

class StreamParser {
 public:
  static Result<StreamParser> create(const tok::Tokenizer& tok, ParseOptions options = {});

  // Feed one token; events (if given) receive what it produced. Strict-mode errors say
  // "token N: ...".
  Status push(tok::Token token, std::vector<ParseEvent>* events = nullptr);
  // End of stream: completes a message whose content was open (harmony's process_eos).
  Status finish(std::vector<ParseEvent>* events = nullptr);

  const std::vector<Message>& messages() const { return messages_; }
  const std::vector<ParseWarning>& warnings() const { return warnings_; }
  size_t n_tokens() const { return n_tokens_; }
  bool in_content() const { return state_ == State::kContent; }
  bool failed() const { return failed_.has_value(); }
  // Header and decoded content of the message being read (content state only).
  const std::optional<ParsedHeader>& current_header() const { return current_; }
  const std::string& current_content() const { return content_; }

 private:
  enum class State { kExpectStart, kHeader, kContent };
  struct Ids {
    tok::Token start, message, end, ret, call, channel, constrain;
  };
  StreamParser(const tok::Tokenizer& tok, ParseOptions options, Ids ids);

  // Strict: record and return the error. Recovering: record a warning, return ok.
  Status problem(size_t index, std::string what);
  void begin_header(std::optional<Role> role);
  Status on_message_token(size_t index, std::vector<ParseEvent>* events);
  void on_stop_in_header(size_t index, std::vector<ParseEvent>* events);
  void end_message(size_t index, StopReason stop, std::vector<ParseEvent>* events);
  void append_content(size_t index, std::string_view bytes, bool flush,
                      std::vector<ParseEvent>* events);

  const tok::Tokenizer* tok_;
  ParseOptions options_;
  Ids ids_;
  State state_ = State::kExpectStart;
  std::optional<Role> next_role_;
  std::string header_;  // header bytes; <|channel|>/<|constrain|> as marker bytes
  std::optional<ParsedHeader> current_;
  std::string content_;  // decoded content of the current message
  std::string pending_;  // bytes of an unfinished UTF-8 character
  bool skipping_ = false;  // recovering: inside a run of skipped tokens (one warning)
  size_t n_tokens_ = 0;
  std::vector<Message> messages_;
  std::vector<ParseWarning> warnings_;
  std::optional<Status> failed_;
};

// Parse a whole completion (tokens, then EOS) into messages.
Result<std::vector<Message>> parse_messages(const tok::Tokenizer& tok,
                                            std::span<const tok::Token> tokens,
                                            ParseOptions options = {});

// ---- building blocks, exposed for tests ----

// Header parse on text in which the special tokens <|channel|> and <|constrain|> appear
// as the marker bytes below (0xFE / 0xFF never occur in UTF-8). With
// parse_recipient_and_type false (harmony's malformed-message path) everything after the
// role and channel is returned as `remaining` instead.
inline constexpr char kChannelMark = '\xFE';
inline constexpr char kConstrainMark = '\xFF';
struct HeaderParse {
  ParsedHeader header;
  std::optional<std::string> remaining;  // leftover words (an error when parsing types)
  std::string error;                     // empty when the header is well-formed
};
HeaderParse parse_header(std::string_view marked, std::optional<Role> role,
                         bool parse_recipient_and_type = true);

// Decode the complete UTF-8 prefix of `pending` (removing it), like harmony: invalid
// sequences become one U+FFFD per maximal ill-formed subpart; an incomplete final
// character stays in `pending` unless `flush`, when it becomes U+FFFD.
std::string drain_utf8(std::string& pending, bool flush);

}  // namespace brass::harmony
