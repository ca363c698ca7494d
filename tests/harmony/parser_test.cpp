// Streaming parser: harmony's token-id and text parse goldens, harmony's header cases
// (recipient before/after channel, <|constrain|> with and without a space), strict
// errors with token indices, recovering mode, UTF-8 split across tokens, and ordinary
// text that spells a special token. Streams are hand-built with the byte-level test
// tokenizer (one token per byte), so token indices below are counted by hand.
#include <gtest/gtest.h>

#include "harmony/parser.h"
#include "test_tokenizer.h"

namespace brass::harmony {
namespace {

using testing::ByteTokenizer;
using testing::RankFileTokenizer;

const ByteTokenizer& bt() {
  static const ByteTokenizer t;
  return t;
}
std::vector<tok::Token> toks(std::string_view text, bool allow_special = true) {
  return bt().encode(text, allow_special);
}
std::vector<tok::Token> cat(std::initializer_list<std::vector<tok::Token>> parts) {
  std::vector<tok::Token> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Message assistant(std::string text, std::optional<std::string> channel = std::nullopt) {
  Message m = Message::from_role_and_content(Role::kAssistant, std::move(text));
  m.channel = std::move(channel);
  return m;
}

void expect_messages(const std::vector<Message>& actual, const std::vector<Message>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual[i], expected[i]) << "message " << i << "\n  actual:   "
                                      << debug_string(actual[i]) << "\n  expected: "
                                      << debug_string(expected[i]);
  }
}

std::vector<tok::Token> read_token_file(const std::string& name) {
  std::vector<tok::Token> out;
  std::istringstream in(testing::read_golden(name));
  long v;
  while (in >> v) out.push_back(static_cast<tok::Token>(v));
  return out;
}

// ---- harmony's goldens ----

TEST(HarmonyParseGolden, TokenLists) {
  auto rt = RankFileTokenizer::load(testing::o200k_rank_file());
  if (!rt) GTEST_SKIP() << "o200k rank file not found at " << testing::o200k_rank_file();
  ParseOptions opt;
  opt.role = Role::kAssistant;

  auto r1 = parse_messages(*rt, read_token_file("test_simple_reasoning_response.txt"), opt);
  ASSERT_TRUE(r1.is_ok()) << r1.status().message();
  expect_messages(r1.value(),
                  {assistant("User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.",
                             "analysis"),
                   assistant("2 + 2 = 4.", "final")});

  auto r2 = parse_messages(*rt, read_token_file("test_simple_tool_call.txt"), opt);
  ASSERT_TRUE(r2.is_ok()) << r2.status().message();
  Message call = assistant("{\"location\": \"Tokyo\"}", "analysis");
  call.recipient = "lookup_weather";
  call.content_type = "code";
  expect_messages(r2.value(),
                  {assistant("User asks: \"What is the weather in Tokyo?\" We need to use "
                             "lookup_weather tool.",
                             "analysis"),
                   call});
}

TEST(HarmonyParseGolden, StreamableParserText) {
  std::string text = testing::read_golden("test_streamable_parser.txt");
  ParseOptions opt;
  opt.role = Role::kAssistant;
  auto parser = StreamParser::create(bt(), opt);
  ASSERT_TRUE(parser.is_ok());
  std::vector<ParseEvent> events;
  for (auto t : toks(text)) ASSERT_TRUE(parser->push(t, &events).is_ok());
  ASSERT_EQ(parser->messages().size(), 3u);  // harmony's assertion
  const auto& m = parser->messages();
  EXPECT_EQ(m[0].channel, "analysis");
  EXPECT_NE(m[0].text().find("But w\ne need up to date info."), std::string::npos);
  EXPECT_EQ(m[1].recipient, "browser.search");
  EXPECT_EQ(m[1].content_type, "code");
  EXPECT_EQ(m[1].channel, "commentary");
  EXPECT_EQ(m[1].text(), "{\"query\": \"current US president July 2025\", \"topn\": 10, "
                         "\"source\": \"news\"}");
  EXPECT_EQ(m[2].author, (Author{Role::kTool, "browser.search"}));
  EXPECT_EQ(m[2].recipient, "assistant");
  EXPECT_EQ(m[2].text(), "{\"result\": \"https://openai.com/\"}");
  int tool_calls = 0;
  for (const auto& e : events) tool_calls += e.kind == ParseEvent::Kind::kToolCall;
  EXPECT_EQ(tool_calls, 1);  // only the assistant's message to browser.search
}

TEST(HarmonyParseGolden, ToolResponse) {
  auto r = parse_messages(bt(), toks(testing::read_golden("test_tool_response_parsing.txt")));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  Message expected = Message::from_author_and_content(Author{Role::kTool, "browser.search"},
                                                      "{\"result\": \"https://openai.com/\"}")
                         .with_channel("commentary")
                         .with_recipient("assistant");
  expect_messages(r.value(), {expected});
}

// ---- header forms models emit ----

TEST(HarmonyParser, RecipientBeforeOrAfterChannelAndConstrainSpacing) {
  Message expected = assistant("{\"location\": \"Tokyo\"}", "commentary");
  expected.recipient = "functions.get_weather";
  expected.content_type = "<|constrain|>json";
  const char* forms[] = {
      "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>",
      "<|start|>assistant to=functions.get_weather<|channel|>commentary<|constrain|>json<|message|>",
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
      "<|start|>assistant<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>",
  };
  for (const char* header : forms) {
    for (const char* stop : {"<|call|>", "<|end|>"}) {
      auto r = parse_messages(bt(), toks(std::string(header) + expected.text() + stop));
      ASSERT_TRUE(r.is_ok()) << header << ": " << r.status().message();
      expect_messages(r.value(), {expected});
    }
  }
  // Unconstrained content type after the recipient, and a bare recipient.
  auto r = parse_messages(bt(), toks("<|start|>assistant<|channel|>analysis to=python code<|message|>x=1<|call|>"));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value()[0].recipient, "python");
  EXPECT_EQ(r.value()[0].content_type, "code");
  r = parse_messages(bt(), toks("<|start|>assistant<|channel|>commentary to=functions.f<|message|>{}<|call|>"));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value()[0].recipient, "functions.f");
  EXPECT_FALSE(r.value()[0].content_type.has_value());
}

TEST(HarmonyParser, ParseHeaderDirect) {
  std::string ch(1, kChannelMark), co(1, kConstrainMark);
  auto h = parse_header("assistant" + ch + "final", std::nullopt);
  EXPECT_TRUE(h.error.empty()) << h.error;
  EXPECT_EQ(h.header, (ParsedHeader{{Role::kAssistant, std::nullopt}, std::nullopt, "final", std::nullopt}));
  // Channel value ends at Unicode whitespace (U+3000) and at '<'.
  // (the U+3000 left behind is trimmed as Unicode whitespace).
  h = parse_header("assistant" + ch + "commentary\u3000", std::nullopt);
  EXPECT_TRUE(h.error.empty()) << h.error;
  EXPECT_EQ(h.header.channel, "commentary");
  EXPECT_FALSE(h.header.recipient.has_value());
  h = parse_header("assistant " + ch + "final<x", std::nullopt);
  EXPECT_EQ(h.header.channel, "final");
  EXPECT_EQ(h.header.recipient, "<x");
  // Errors harmony reports.
  EXPECT_NE(parse_header("assistant" + ch + " x", std::nullopt).error.find("no channel value"),
            std::string::npos);
  EXPECT_NE(parse_header("wizard", std::nullopt).error.find("unknown role"), std::string::npos);
  EXPECT_NE(parse_header("", std::nullopt).error.find("did not contain a role"), std::string::npos);
  EXPECT_NE(parse_header("assistant a b c", std::nullopt).error.find("left in the message header"),
            std::string::npos);
  // Unknown role with a recipient: a tool message named by the role string.
  h = parse_header("functions.f to=assistant" + ch + "commentary", std::nullopt);
  EXPECT_TRUE(h.error.empty());
  EXPECT_EQ(h.header.author, (Author{Role::kTool, "functions.f"}));
  // A given role, and the malformed-message path returning leftover words.
  h = parse_header(ch + "commentary Hello there", Role::kAssistant, false);
  EXPECT_EQ(h.header.channel, "commentary");
  EXPECT_EQ(h.remaining, "Hello there");
  // Constrained content type without a recipient stays a content type.
  h = parse_header("assistant" + ch + "final " + co + "json", std::nullopt);
  EXPECT_EQ(h.header.content_type, "<|constrain|>json");
  EXPECT_FALSE(h.header.recipient.has_value());
}

// ---- control by token id only ----

TEST(HarmonyParser, TextSpellingSpecialTokensIsContent) {
  auto stream = cat({toks("<|start|>assistant<|channel|>final<|message|>"),
                     toks("say <|end|> and <|call|> and <|start|>user", /*allow_special=*/false),
                     toks("<|return|>")});
  auto r = parse_messages(bt(), stream);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  expect_messages(r.value(), {assistant("say <|end|> and <|call|> and <|start|>user", "final")});
}

TEST(HarmonyParser, StopReasonsAndToolCallEvents) {
  auto stream = toks("<|start|>assistant<|channel|>analysis<|message|>think<|end|>"
                     "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
                     "<|message|>{\"a\":1}<|call|>"
                     "<|start|>assistant<|channel|>final<|message|>done<|return|>");
  auto parser = StreamParser::create(bt());
  ASSERT_TRUE(parser.is_ok());
  std::vector<ParseEvent> ev;
  for (auto t : stream) ASSERT_TRUE(parser->push(t, &ev).is_ok());
  ASSERT_TRUE(parser->finish(&ev).is_ok());
  std::vector<std::pair<ParseEvent::Kind, StopReason>> ends;
  std::string deltas[3];
  int msg = 0;
  for (const auto& e : ev) {
    if (e.kind == ParseEvent::Kind::kContentDelta) deltas[msg] += e.delta;
    if (e.kind == ParseEvent::Kind::kMessageEnd || e.kind == ParseEvent::Kind::kToolCall) {
      ends.push_back({e.kind, e.stop});
      if (e.kind == ParseEvent::Kind::kMessageEnd) ++msg;
    }
  }
  using K = ParseEvent::Kind;
  std::vector<std::pair<K, StopReason>> want = {{K::kMessageEnd, StopReason::kEnd},
                                                {K::kMessageEnd, StopReason::kCall},
                                                {K::kToolCall, StopReason::kCall},
                                                {K::kMessageEnd, StopReason::kReturn}};
  EXPECT_EQ(ends, want);
  EXPECT_EQ(deltas[0], "think");
  EXPECT_EQ(deltas[1], "{\"a\":1}");
  EXPECT_EQ(deltas[2], "done");
  // The message start carries the header before any content arrives.
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0].kind, K::kMessageStart);
  EXPECT_EQ(ev[0].header.channel, "analysis");
}

// ---- UTF-8 ----

TEST(HarmonyParser, Utf8SplitAcrossTokensWaitsForTheLastByte) {
  auto parser = StreamParser::create(bt(), ParseOptions{true, Role::kAssistant});
  ASSERT_TRUE(parser.is_ok());
  for (auto t : toks("<|channel|>final<|message|>")) ASSERT_TRUE(parser->push(t).is_ok());
  const std::string heart = "\xF0\x9F\x92\x96";  // U+1F496, four byte tokens
  std::vector<ParseEvent> ev;
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(parser->push(static_cast<unsigned char>(heart[i]), &ev).is_ok());
    EXPECT_TRUE(ev.empty()) << "delta before the character was complete";
    EXPECT_EQ(parser->current_content(), "");
  }
  ASSERT_TRUE(parser->push(static_cast<unsigned char>(heart[3]), &ev).is_ok());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].delta, heart);
  EXPECT_EQ(parser->current_content(), heart);
}

TEST(HarmonyParser, InvalidUtf8BecomesReplacement) {
  const std::string fffd = "\xEF\xBF\xBD";
  std::string p = "a\xE2\x82" "b\xFF" "c\xF0\x9F";  // truncated 3-byte, invalid byte, truncated tail
  EXPECT_EQ(drain_utf8(p, false), "a" + fffd + "b" + fffd + "c");
  EXPECT_EQ(p, "\xF0\x9F");  // waits for more
  EXPECT_EQ(drain_utf8(p, true), fffd);
  EXPECT_TRUE(p.empty());
  std::string s = "\xED\xA0\x80";  // surrogate: E D then out-of-range continuation
  EXPECT_EQ(drain_utf8(s, true), fffd + fffd + fffd);
  std::string o = "\xC0\xAF";  // overlong lead bytes are invalid singly
  EXPECT_EQ(drain_utf8(o, true), fffd + fffd);
  // Harmony's EOS flush: " " + a dangling lead byte + "Hi" -> " \uFFFDHi".
  auto r = parse_messages(bt(), cat({toks("<|start|>assistant<|message|> "), {0xE2}, toks("Hi")}));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value()[0].text(), " " + fffd + "Hi");
  // Bytes left pending in one message never leak into the next.
  r = parse_messages(bt(), cat({toks("<|start|>assistant<|message|>"), {0xE2, 0x82},
                                toks("<|end|><|start|>assistant<|message|>Hi<|end|>")}));
  ASSERT_TRUE(r.is_ok());
  ASSERT_EQ(r.value().size(), 2u);
  EXPECT_EQ(r.value()[0].text(), fffd);
  EXPECT_EQ(r.value()[1].text(), "Hi");
}

// ---- strict errors (token indices counted by hand: one token per byte) ----

Status strict_status(const std::vector<tok::Token>& stream) {
  return parse_messages(bt(), stream).status();
}

TEST(HarmonyParser, StrictErrorsNameTheTokenIndex) {
  // <|start|>=0, "assistant"=1..9, <|message|>=10, "hi"=11..12, <|start|>=13
  Status s = strict_status(toks("<|start|>assistant<|message|>hi<|start|>user<|message|>x<|end|>"));
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("token 13:"), std::string::npos) << s.message();
  // Garbage before the first <|start|>.
  s = strict_status(toks("hello<|start|>assistant<|message|>x<|end|>"));
  EXPECT_NE(s.message().find("token 0:"), std::string::npos) << s.message();
  // Stop inside the header (harmony's missing-<|message|> case): <|end|> is token 27.
  s = strict_status(cat({toks("<|start|>assistant<|channel|>commentary Hello<|end|>")}));
  EXPECT_NE(s.message().find("token 27:"), std::string::npos) << s.message();
  // Unknown role: reported at <|message|> (token 7).
  s = strict_status(toks("<|start|>wizard<|message|>x<|end|>"));
  EXPECT_NE(s.message().find("token 7:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unknown role"), std::string::npos) << s.message();
  // A reserved special token inside content.
  s = strict_status(cat({toks("<|start|>user<|message|>ab"), {200100}, toks("<|end|>")}));
  EXPECT_NE(s.message().find("token 8:"), std::string::npos) << s.message();
  // An id the tokenizer does not know.
  s = strict_status(cat({toks("<|start|>user<|message|>"), {-5}}));
  EXPECT_NE(s.message().find("token 6:"), std::string::npos) << s.message();
  // EOS inside a header: index = number of tokens.
  s = strict_status(toks("<|start|>assistant<|channel|>fin"));
  EXPECT_NE(s.message().find("token 14:"), std::string::npos) << s.message();
  // After an error the parser stays failed.
  auto parser = StreamParser::create(bt());
  ASSERT_TRUE(parser.is_ok());
  EXPECT_FALSE(parser->push('x').is_ok());
  EXPECT_FALSE(parser->push(200006).is_ok());
  EXPECT_TRUE(parser->failed());
}

// ---- recovering mode ----

TEST(HarmonyParser, RecoveringModeKeepsGoing) {
  ParseOptions rec;
  rec.strict = false;
  rec.role = Role::kAssistant;
  // harmony's non-strict case: no <|message|>, content recovered from the header.
  auto r = parse_messages(bt(), toks("<|channel|>commentary Hello<|end|>"), rec);
  ASSERT_TRUE(r.is_ok());
  expect_messages(r.value(), {assistant("Hello", "commentary")});

  rec.role.reset();
  auto parser = StreamParser::create(bt(), rec);
  ASSERT_TRUE(parser.is_ok());
  auto stream = cat({toks("junk before"),
                     toks("<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b"),
                     {200100},
                     toks("c<|channel|>final<|message|>d<|end|>"),
                     toks("<|start|>assistant<|channel|>final<|message|>e<|end|>"),
                     toks("<|start|>assistant<|channel|>fin")});
  for (auto t : stream) ASSERT_TRUE(parser->push(t).is_ok());
  ASSERT_TRUE(parser->finish().is_ok());
  expect_messages(parser->messages(), {assistant("a", "analysis"), assistant("bc", "final"),
                                       assistant("d", "final"), assistant("e", "final")});
  // skipped run, missing <|start|>, <|start|> in content, reserved token, <|channel|> in
  // content, EOS in header.
  EXPECT_EQ(parser->warnings().size(), 6u);
  for (const auto& w : parser->warnings()) EXPECT_LT(w.token_index, stream.size() + 1);
  EXPECT_FALSE(parser->failed());
}

TEST(HarmonyParser, OverlongHeaderIsBounded) {
  ParseOptions opt;
  opt.max_header_bytes = 64;
  auto stream = toks("<|start|>assistant" + std::string(100, 'x') + "<|message|>hi<|end|>");
  EXPECT_FALSE(parse_messages(bt(), stream, opt).is_ok());
  opt.strict = false;
  auto r = parse_messages(bt(), stream, opt);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r.value().empty());  // header discarded; the rest skipped until a <|start|>
}

TEST(HarmonyParser, CreateRequiresHarmonySpecials) {
  struct NoSpecials : ByteTokenizer {
    std::optional<tok::Token> special(std::string_view) const override { return std::nullopt; }
  } t;
  auto r = StreamParser::create(t);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("<|start|>"), std::string::npos);
}

}  // namespace
}  // namespace brass::harmony
