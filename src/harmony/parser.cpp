// Streaming Harmony parser (see parser.h for the grammar, strict and recovering modes).
// State machine over token ids: ExpectStart -> Header (bytes + marker bytes for the
// <|channel|> / <|constrain|> specials) -> Content (incremental UTF-8) -> ExpectStart.
// Header text is parsed with harmony's rules by parse_header(); the marker bytes keep a
// special token distinct from ordinary text that happens to spell it.
#include "harmony/parser.h"

#include <fmt/format.h>

#include "harmony/render.h"

namespace brass::harmony {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_mark(unsigned char c) {
  return c == static_cast<unsigned char>(kChannelMark) ||
         c == static_cast<unsigned char>(kConstrainMark);
}

// Length (1..4) and code point of the UTF-8 character at s[i]; a marker or an invalid
// byte counts as one byte with code point 0xFFFD. `ok` reports validity.
size_t decode_at(std::string_view s, size_t i, char32_t* cp, bool* ok) {
  auto b = static_cast<unsigned char>(s[i]);
  *ok = true;
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  size_t width = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
  if (width == 0 || i + width > s.size()) {
    *ok = is_mark(b);
    *cp = 0xFFFD;
    return 1;
  }
  char32_t v = width == 2 ? (b & 0x1F) : width == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < width; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    unsigned char lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    }
    if (c < lo || c > hi) {
      *ok = false;
      *cp = 0xFFFD;
      return 1;
    }
    v = (v << 6) | (c & 0x3F);
  }
  *cp = v;
  return width;
}

// Rust char::is_whitespace (Unicode White_Space).
bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Rust u8::is_ascii_whitespace (no vertical tab).
bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\x0C' || c == '\r'; }

std::string trim_unicode(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    char32_t cp;
    bool ok;
    size_t n = decode_at(s, begin, &cp, &ok);
    if (!ok || !is_unicode_space(cp)) break;
    begin += n;
  }
  // Trailing: walk forward remembering where the final run of spaces starts.
  size_t i = begin, last_non_space_end = begin;
  while (i < end) {
    char32_t cp;
    bool ok;
    size_t n = decode_at(s, i, &cp, &ok);
    i += n;
    if (!ok || !is_unicode_space(cp)) last_non_space_end = i;
  }
  return std::string(s.substr(begin, last_non_space_end - begin));
}

std::string unmark(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == kChannelMark) {
      out += kChannel;
    } else if (c == kConstrainMark) {
      out += kConstrain;
    } else {
      out += c;
    }
  }
  return out;
}

// Printable rendering of header bytes / token text for messages.
std::string printable(std::string_view s) {
  std::string out;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (ch == kChannelMark) {
      out += kChannel;
    } else if (ch == kConstrainMark) {
      out += kConstrain;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  if (out.size() > 200) out = out.substr(0, 200) + "...";
  return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

std::string drain_utf8(std::string& pending, bool flush) {
  std::string out;
  size_t i = 0, n = pending.size();
  while (i < n) {
    auto b = static_cast<unsigned char>(pending[i]);
    if (b < 0x80) {
      out += pending[i++];
      continue;
    }
    size_t width = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (width == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;
    bool bad = false;
    for (; k < width; ++k) {
      if (i + k >= n) break;  // incomplete so far
      auto c = static_cast<unsigned char>(pending[i + k]);
      unsigned char lo = 0x80, hi = 0xBF;
      if (k == 1) {
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
      }
      if (c < lo || c > hi) {
        bad = true;
        break;
      }
    }
    if (bad) {  // maximal subpart of k bytes
      out += kReplacement;
      i += k;
    } else if (k < width) {  // ran out of bytes mid-character
      if (!flush) break;
      out += kReplacement;
      i = n;
    } else {
      out.append(pending, i, width);
      i += width;
    }
  }
  pending.erase(0, i);
  return out;
}

HeaderParse parse_header(std::string_view marked, std::optional<Role> role,
                         bool parse_recipient_and_type) {
  HeaderParse r;
  auto fail = [&](std::string what) {
    if (r.error.empty()) r.error = std::move(what);
  };
  std::string h(marked);
  for (size_t i = 0; i < h.size();) {
    char32_t cp;
    bool ok;
    i += decode_at(h, i, &cp, &ok);
    if (!ok) {
      fail("header is not valid UTF-8");
      break;
    }
  }
  // Channel: the first <|channel|>, up to whitespace, '<' or another special.
  if (size_t cm = h.find(kChannelMark); cm != std::string::npos) {
    size_t p = cm + 1, e = p;
    while (e < h.size()) {
      char32_t cp;
      bool ok;
      size_t n = decode_at(h, e, &cp, &ok);
      if (is_mark(static_cast<unsigned char>(h[e])) || cp == '<' || is_unicode_space(cp)) break;
      e += n;
    }
    if (e == p) {
      fail("channel marker present but no channel value found in header");
    } else {
      r.header.channel = unmark(std::string_view(h).substr(p, e - p));
    }
    h = h.substr(0, cm) + h.substr(e);
  }
  h = trim_unicode(h);
  // A content type glued to the recipient ("to=x<|constrain|>json") becomes its own word.
  if (h.find(kConstrainMark) != std::string::npos) {
    std::string spaced;
    for (char c : h) {
      if (c == kConstrainMark) spaced += ' ';
      spaced += c;
    }
    h = trim_unicode(spaced);
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < h.size();) {
    while (i < h.size() && is_ascii_space(h[i])) ++i;
    size_t j = i;
    while (j < h.size() && !is_ascii_space(h[j])) ++j;
    if (j > i) parts.push_back(h.substr(i, j - i));
    i = j;
  }
  std::optional<std::string> role_str;
  Role role_v = Role::kAssistant;
  if (role) {
    role_v = *role;
  } else if (parts.empty()) {
    fail("message header did not contain a role");
  } else {
    role_str = parts[0];
    if (auto pr = parse_role(parts[0])) {
      role_v = *pr;
    } else if (parts.size() > 1 || starts_with(parts[0], "to=")) {
      parts.erase(parts.begin());  // a tool's name in the role position
      role_v = Role::kTool;
    } else {
      fail(fmt::format("unknown role \"{}\"", printable(parts[0])));
      parts.erase(parts.begin());
      role_str.reset();
    }
  }
  if (!parts.empty() && parts[0] == role_name(role_v)) parts.erase(parts.begin());

  if (parse_recipient_and_type && !parts.empty()) {
    size_t n = parts.size();
    std::string last = parts.back();
    parts.pop_back();
    if (starts_with(last, "to=")) {
      r.header.recipient = unmark(std::string_view(last).substr(3));
    } else if (n == 1 && last[0] != kConstrainMark) {
      r.header.recipient = unmark(last);
    } else {
      r.header.content_type = unmark(last);
      if (!parts.empty()) {
        std::string raw = parts.back();
        parts.pop_back();
        r.header.recipient = unmark(starts_with(raw, "to=") ? std::string_view(raw).substr(3)
                                                            : std::string_view(raw));
      }
    }
  }
  if (!parts.empty()) {
    std::string rest;
    for (size_t i = 0; i < parts.size(); ++i) rest += (i ? " " : "") + parts[i];
    r.remaining = unmark(rest);
    if (parse_recipient_and_type) {
      fail(fmt::format("unexpected words left in the message header: \"{}\"", *r.remaining));
    }
  }
  r.header.author.role = role_v;
  if (role_v == Role::kTool) r.header.author.name = role_str;
  return r;
}

// ---- StreamParser ----

Result<StreamParser> StreamParser::create(const tok::Tokenizer& tok, ParseOptions options) {
  Ids ids{};
  struct Want {
    std::string_view name;
    tok::Token* slot;
  } wants[] = {{kStart, &ids.start}, {kMessage, &ids.message}, {kEnd, &ids.end},
               {kReturn, &ids.ret},  {kCall, &ids.call},       {kChannel, &ids.channel},
               {kConstrain, &ids.constrain}};
  for (auto& w : wants) {
    auto id = tok.special(w.name);
    if (!id) {
      return Status::errorf("harmony parser: tokenizer has no special token {} (expected the "
                            "o200k_harmony vocabulary)", w.name);
    }
    *w.slot = *id;
  }
  return StreamParser(tok, options, ids);
}

StreamParser::StreamParser(const tok::Tokenizer& tok, ParseOptions options, Ids ids)
    : tok_(&tok), options_(options), ids_(ids) {
  if (options_.role) begin_header(options_.role);
}

Status StreamParser::problem(size_t index, std::string what) {
  if (options_.strict) {
    failed_ = Status::errorf("harmony parser: token {}: {}", index, what);
    return *failed_;
  }
  warnings_.push_back(ParseWarning{index, std::move(what)});
  return Status::ok();
}

void StreamParser::begin_header(std::optional<Role> role) {
  state_ = State::kHeader;
  next_role_ = role;
  header_.clear();
}

Status StreamParser::on_message_token(size_t index, std::vector<ParseEvent>* events) {
  HeaderParse hp = parse_header(header_, next_role_, true);
  if (!hp.error.empty()) {
    BRASS_TRY(problem(index, fmt::format("bad message header \"{}\": {}", printable(header_),
                                         hp.error)));
  }
  current_ = hp.header;
  next_role_.reset();
  header_.clear();
  content_.clear();
  pending_.clear();
  state_ = State::kContent;
  if (events) {
    ParseEvent ev;
    ev.kind = ParseEvent::Kind::kMessageStart;
    ev.token_index = index;
    ev.header = *current_;
    events->push_back(std::move(ev));
  }
  return Status::ok();
}

void StreamParser::on_stop_in_header(size_t index, std::vector<ParseEvent>* events) {
  // Recovering only (harmony's non-strict path): keep the channel, the words after the
  // role become content. Without a known role the header is dropped.
  if (!header_.empty()) {
    HeaderParse hp = parse_header(header_, next_role_, false);
    if (next_role_ || hp.error.empty()) {
      current_ = hp.header;
      content_.clear();
      pending_.clear();
      if (events) {
        ParseEvent ev;
        ev.kind = ParseEvent::Kind::kMessageStart;
        ev.token_index = index;
        ev.header = *current_;
        events->push_back(std::move(ev));
      }
      append_content(index, hp.remaining.value_or(""), true, events);
      end_message(index, StopReason::kImplicit, events);
    }
  }
  header_.clear();
  next_role_.reset();
  state_ = State::kExpectStart;
}

void StreamParser::append_content(size_t index, std::string_view bytes, bool flush,
                                  std::vector<ParseEvent>* events) {
  pending_ += bytes;
  std::string delta = drain_utf8(pending_, flush);
  if (delta.empty()) return;
  content_ += delta;
  if (events) {
    ParseEvent ev;
    ev.kind = ParseEvent::Kind::kContentDelta;
    ev.token_index = index;
    ev.header = *current_;
    ev.delta = std::move(delta);
    events->push_back(std::move(ev));
  }
}

void StreamParser::end_message(size_t index, StopReason stop, std::vector<ParseEvent>* events) {
  append_content(index, "", true, events);
  Message m;
  m.author = current_->author;
  m.recipient = current_->recipient;
  m.channel = current_->channel;
  m.content_type = current_->content_type;
  m.content.push_back(TextContent{content_});
  bool tool_call = m.author.role == Role::kAssistant && m.recipient.has_value();
  if (events) {
    ParseEvent ev;
    ev.kind = ParseEvent::Kind::kMessageEnd;
    ev.token_index = index;
    ev.header = *current_;
    ev.message = m;
    ev.stop = stop;
    if (tool_call) {
      ParseEvent call = ev;
      call.kind = ParseEvent::Kind::kToolCall;
      events->push_back(std::move(ev));
      events->push_back(std::move(call));
    } else {
      events->push_back(std::move(ev));
    }
  }
  messages_.push_back(std::move(m));
  current_.reset();
  content_.clear();
  pending_.clear();
  state_ = State::kExpectStart;
}

Status StreamParser::push(tok::Token t, std::vector<ParseEvent>* events) {
  if (failed_) return *failed_;
  const size_t index = n_tokens_++;
  const bool is_stop = t == ids_.end || t == ids_.ret || t == ids_.call;
  const bool is_special = tok_->is_special(t);
  auto describe = [&] {
    return is_special ? std::string(tok_->token_bytes(t))
                      : fmt::format("{} \"{}\"", t, printable(tok_->token_bytes(t)));
  };
  switch (state_) {
    case State::kExpectStart: {
      if (t == ids_.start) {
        skipping_ = false;
        begin_header(std::nullopt);
        return Status::ok();
      }
      if (options_.strict) {
        return problem(index, fmt::format("expected <|start|> between messages, found {}", describe()));
      }
      if (t == ids_.channel) {
        skipping_ = false;
        warnings_.push_back({index, "<|channel|> without <|start|>assistant; assuming assistant"});
        begin_header(Role::kAssistant);
        header_ += kChannelMark;
        return Status::ok();
      }
      if (!skipping_) {
        warnings_.push_back({index, fmt::format("skipping tokens outside a message, from {}",
                                                describe())});
        skipping_ = true;
      }
      return Status::ok();
    }
    case State::kHeader: {
      if (t == ids_.message) return on_message_token(index, events);
      if (is_stop) {
        BRASS_TRY(problem(index, fmt::format("{} inside a message header (no <|message|>): \"{}\"",
                                             describe(), printable(header_))));
        on_stop_in_header(index, events);
        return Status::ok();
      }
      if (t == ids_.start) {
        BRASS_TRY(problem(index, fmt::format("<|start|> inside a message header \"{}\"; "
                                             "restarting", printable(header_))));
        begin_header(std::nullopt);
        return Status::ok();
      }
      if (t == ids_.channel) {
        header_ += kChannelMark;
      } else if (t == ids_.constrain) {
        header_ += kConstrainMark;
      } else if (is_special) {
        return problem(index, fmt::format("unexpected special token {} in a message header",
                                          describe()));
      } else {
        std::string_view bytes = tok_->token_bytes(t);
        if (bytes.empty()) return problem(index, fmt::format("unknown token id {}", t));
        header_ += bytes;
      }
      if (header_.size() > options_.max_header_bytes) {
        BRASS_TRY(problem(index, fmt::format("message header longer than {} bytes",
                                             options_.max_header_bytes)));
        header_.clear();
        next_role_.reset();
        state_ = State::kExpectStart;
      }
      return Status::ok();
    }
    case State::kContent: {
      if (is_stop) {
        end_message(index, t == ids_.end ? StopReason::kEnd
                           : t == ids_.ret ? StopReason::kReturn
                                           : StopReason::kCall,
                    events);
        return Status::ok();
      }
      if (t == ids_.start || t == ids_.channel) {
        BRASS_TRY(problem(index, fmt::format("{} inside message content (missing <|end|>); "
                                             "starting a new message", describe())));
        Role role = current_->author.role;
        end_message(index, StopReason::kImplicit, events);
        if (t == ids_.start) {
          begin_header(std::nullopt);
        } else {
          begin_header(role);
          header_ += kChannelMark;
        }
        return Status::ok();
      }
      if (is_special) {
        return problem(index, fmt::format("special token {} inside message content; dropped",
                                          describe()));
      }
      std::string_view bytes = tok_->token_bytes(t);
      if (bytes.empty()) {
        BRASS_TRY(problem(index, fmt::format("unknown token id {} in content; U+FFFD", t)));
        append_content(index, "", true, events);
        append_content(index, kReplacement, false, events);
        return Status::ok();
      }
      append_content(index, bytes, false, events);
      return Status::ok();
    }
  }
  return Status::ok();
}

Status StreamParser::finish(std::vector<ParseEvent>* events) {
  if (failed_) return *failed_;
  const size_t index = n_tokens_;
  if (state_ == State::kHeader) {
    BRASS_TRY(problem(index, fmt::format("end of stream inside a message header \"{}\"",
                                         printable(header_))));
    header_.clear();
    next_role_.reset();
    state_ = State::kExpectStart;
  } else if (state_ == State::kContent) {
    end_message(index, StopReason::kEos, events);
  }
  return Status::ok();
}

Result<std::vector<Message>> parse_messages(const tok::Tokenizer& tok,
                                            std::span<const tok::Token> tokens,
                                            ParseOptions options) {
  BRASS_ASSIGN_OR_RETURN(StreamParser parser, StreamParser::create(tok, options));
  for (tok::Token t : tokens) BRASS_TRY(parser.push(t));
  BRASS_TRY(parser.finish());
  return parser.messages();
}

}  // namespace brass::harmony
