// ChatDisplay on well-formed Harmony completions (which the random-weight built-in model
// cannot produce): the completion text is encoded with the built-in model's real
// o200k_harmony tokenizer, streamed through a recovering StreamParser (as the chat
// does), and the display output is compared with the expected text written by hand.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/chat_display.h"
#include "gguf/reader.h"
#include "harmony/parser.h"
#include "tokenizer/tokenizer.h"

namespace brass::cli {
namespace {

std::unique_ptr<tok::Tokenizer> load_tokenizer() {
  auto r = gguf::Reader::open(std::string(BRASS_BINARY_DIR) + "/models/builtin-tiny.gguf");
  if (!r) return nullptr;
  auto t = tok::Tokenizer::from_gguf(**r);
  return t ? std::move(*t) : nullptr;
}

// Shows `completion` (prompt ended with <|start|>assistant) the way the chat does.
std::string show(const tok::Tokenizer& tk, const std::string& completion, bool color) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  {
    ChatDisplay d(f, color);
    harmony::ParseOptions po;
    po.strict = false;
    po.role = harmony::Role::kAssistant;
    auto p = harmony::StreamParser::create(tk, po);
    EXPECT_TRUE(p.is_ok());
    std::vector<harmony::ParseEvent> events;
    for (tok::Token t : tk.encode(completion, /*allow_special=*/true)) {
      events.clear();
      (void)p->push(t, &events);
      for (const auto& e : events) d.on_event(e);
    }
    events.clear();
    (void)p->finish(&events);
    for (const auto& e : events) d.on_event(e);
    if (!d.shown_content()) d.unparsed("?");
    d.end_turn();
  }
  std::fclose(f);
  std::string out(buf, size);
  std::free(buf);
  return out;
}

TEST(ChatDisplay, ReasoningDimmedOrPrefixedFinalPlain) {
  auto tk = load_tokenizer();
  ASSERT_TRUE(tk) << "built-in model missing";
  const std::string c =
      "<|channel|>analysis<|message|>User says hi.\nReply briefly.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hello! \xc3\xa9t\xc3\xa9<|return|>";
  EXPECT_EQ(show(*tk, c, false), "[reasoning] User says hi.\nReply briefly.\nHello! \xc3\xa9t\xc3\xa9\n");
  EXPECT_EQ(show(*tk, c, true), "\x1b[2mUser says hi.\nReply briefly.\x1b[0m\nHello! \xc3\xa9t\xc3\xa9\n");
}

TEST(ChatDisplay, ToolCallLabelled) {
  auto tk = load_tokenizer();
  ASSERT_TRUE(tk);
  const std::string c =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
  EXPECT_EQ(show(*tk, c, false),
            "[commentary to=functions.get_weather] {\"city\": \"Paris\"}\n"
            "[tool call to functions.get_weather: brass chat has no tools; turn ended]\n");
}

TEST(ChatDisplay, CutOffAndMalformedStreams) {
  auto tk = load_tokenizer();
  ASSERT_TRUE(tk);
  // Cut off by the token limit inside the final message: shown, line closed.
  EXPECT_EQ(show(*tk, "<|channel|>final<|message|>The answer is", false), "The answer is\n");
  // Cut off inside the header: nothing parsed, the raw fallback shows.
  EXPECT_EQ(show(*tk, "<|channel|>analy", false), "[unparsed] ?\n");
  // Cut off in the middle of dimmed reasoning: the style is reset.
  EXPECT_EQ(show(*tk, "<|channel|>analysis<|message|>hmm", true), "\x1b[2mhmm\x1b[0m\n");
}

}  // namespace
}  // namespace brass::cli
