// How `brass run --chat` shows a streamed Harmony answer: parse events in, text out.
//   final channel (or no channel) of an assistant message: plain text
//   analysis (reasoning): dimmed with ANSI \x1b[2m ... \x1b[0m when `color` (stdout is a
//     terminal and NO_COLOR is unset), else prefixed "[reasoning] "
//   any other channel, recipient or role: a "[channel to=recipient] " label (dimmed when
//     `color`); a tool call adds a line saying the chat has no tools
// Every message starts on a new line and the output of a turn ends with a newline.
#pragma once

#include <cstdio>
#include <string>

#include "harmony/parser.h"

namespace brass::cli {

class ChatDisplay {
 public:
  ChatDisplay(std::FILE* out, bool color) : out_(out), color_(color) {}

  void on_event(const harmony::ParseEvent& e);
  // Raw text, for a turn in which nothing parsed as a message: "[unparsed] TEXT".
  void unparsed(const std::string& text);
  // Closes any open style and line.
  void end_turn();
  // Whether any message content has been shown.
  bool shown_content() const { return shown_content_; }

 private:
  void write(const std::string& s);
  void dim();
  void undim();
  void newline_if_needed();

  std::FILE* out_;
  bool color_;
  bool dimmed_ = false;
  bool shown_content_ = false;
  char last_ = '\n';
};

}  // namespace brass::cli
