// ChatDisplay (chat_display.h): the chat's rendering of parse events.
#include "cli/chat_display.h"

namespace brass::cli {

namespace {
constexpr const char* kDim = "\x1b[2m";
constexpr const char* kReset = "\x1b[0m";
}  // namespace

void ChatDisplay::on_event(const harmony::ParseEvent& e) {
  using K = harmony::ParseEvent::Kind;
  switch (e.kind) {
    case K::kMessageStart: {
      newline_if_needed();
      const auto& h = e.header;
      const std::string channel = h.channel.value_or("");
      const bool assistant = h.author.role == harmony::Role::kAssistant;
      if (assistant && channel == "analysis" && !h.recipient) {
        if (color_) dim();
        else write("[reasoning] ");
      } else if (!(assistant && (channel == "final" || channel.empty()) && !h.recipient)) {
        std::string label = "[";
        label += channel.empty() ? std::string(harmony::role_name(h.author.role)) : channel;
        if (h.recipient) label += " to=" + *h.recipient;
        label += "] ";
        if (color_) dim();
        write(label);
      }
      break;
    }
    case K::kContentDelta:
      if (!e.delta.empty()) shown_content_ = true;
      write(e.delta);
      break;
    case K::kMessageEnd:
      undim();
      newline_if_needed();
      break;
    case K::kToolCall:
      if (color_) dim();
      write("[tool call to " + e.message.recipient.value_or("?") + ": brass chat has no tools; turn ended]");
      undim();
      newline_if_needed();
      break;
  }
  std::fflush(out_);
}

void ChatDisplay::unparsed(const std::string& text) {
  newline_if_needed();
  if (color_) dim();
  write("[unparsed] " + text);
  undim();
  newline_if_needed();
  std::fflush(out_);
}

void ChatDisplay::end_turn() {
  undim();
  newline_if_needed();
  std::fflush(out_);
}

void ChatDisplay::write(const std::string& s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), out_);
  last_ = s.back();
}

void ChatDisplay::dim() {
  if (dimmed_) return;
  std::fputs(kDim, out_);
  dimmed_ = true;
}

void ChatDisplay::undim() {
  if (!dimmed_) return;
  std::fputs(kReset, out_);
  dimmed_ = false;
}

void ChatDisplay::newline_if_needed() {
  if (last_ != '\n') write("\n");
}

}  // namespace brass::cli
