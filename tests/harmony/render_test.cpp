// Renderer details not pinned by the goldens (piece boundaries, errors, training
// render, both analysis-dropping rules on hand-worked conversations), and a random
// render -> tokens -> parse round trip (fresh seed, printed on failure).
#include <gtest/gtest.h>

#include <random>

#include "harmony/parser.h"
#include "harmony/render.h"
#include "test_tokenizer.h"

namespace brass::harmony {
namespace {

using testing::ByteTokenizer;

Piece T(std::string s) { return Piece{Piece::Kind::kText, std::move(s)}; }
Piece S(std::string s) { return Piece{Piece::Kind::kSpecial, std::move(s)}; }

TEST(HarmonyRender, ToolCallPieces) {
  Message call = Message::from_role_and_content(Role::kAssistant, "{\"x\": 1}")
                     .with_channel("commentary")
                     .with_recipient("functions.f")
                     .with_content_type("<|constrain|>json");
  auto r = render_message(call);
  ASSERT_TRUE(r.is_ok());
  Pieces want = {S("<|start|>"), T("assistant"), T(" to=functions.f"), S("<|channel|>"),
                 T("commentary"), T(" "), S("<|constrain|>"), T("json"), S("<|message|>"),
                 T("{\"x\": 1}"), S("<|call|>")};
  EXPECT_EQ(r.value(), want);

  Message result = Message::from_author_and_content(Author{Role::kTool, "functions.f"}, "42")
                       .with_channel("commentary")
                       .with_recipient("assistant");
  r = render_message(result);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(pieces_to_text(r.value()),
            "<|start|>functions.f to=assistant<|channel|>commentary<|message|>42<|end|>");
}

TEST(HarmonyRender, HeaderVariants) {
  auto text = [](const Message& m) { return pieces_to_text(render_message(m).value()); };
  Message named = Message::from_author_and_content(Author{Role::kUser, "alice"}, "hi");
  EXPECT_EQ(text(named), "<|start|>user:alice<|message|>hi<|end|>");
  Message all = Message::from_role_and_content(Role::kAssistant, "x").with_recipient("all");
  EXPECT_EQ(text(all), "<|start|>assistant<|message|>x<|call|>");  // "all" hidden, still a call
  Message typed = Message::from_role_and_content(Role::kAssistant, "x").with_content_type("code");
  EXPECT_EQ(text(typed), "<|start|>assistant code<|message|>x<|end|>");
  Message only_marker =
      Message::from_role_and_content(Role::kAssistant, "x").with_content_type("<|constrain|>");
  auto p = render_message(only_marker).value();
  EXPECT_EQ(p[2], T(" "));
  EXPECT_EQ(p[3], S("<|constrain|>"));
  EXPECT_EQ(p[4], S("<|message|>"));
  Message two = Message::from_role_and_content(Role::kUser, "a").adding_content(TextContent{"b"});
  EXPECT_EQ(text(two), "<|start|>user<|message|>ab<|end|>");
}

TEST(HarmonyRender, Errors) {
  Message nameless = Message::from_role_and_content(Role::kTool, "x");
  EXPECT_FALSE(render_message(nameless).is_ok());
  Message sys_in_user = Message::from_role_and_content(Role::kUser, Content(SystemContent{}));
  auto r = render_message(sys_in_user);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("system content in a user message"), std::string::npos);
  Message dev_in_sys = Message::from_role_and_content(Role::kSystem, Content(DeveloperContent{}));
  EXPECT_FALSE(render_message(dev_in_sys).is_ok());
  std::vector<Message> convo = {Message::from_role_and_content(Role::kUser, "ok"), nameless};
  auto c = render_conversation(convo);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("message 1"), std::string::npos);
}

TEST(HarmonyRender, TrainingEndsFinalWithReturn) {
  std::vector<Message> convo = {
      Message::from_role_and_content(Role::kUser, "hi"),
      Message::from_role_and_content(Role::kAssistant, "hello").with_channel("final")};
  auto regular = render_conversation(convo).value();
  auto training = render_conversation_for_training(convo).value();
  ASSERT_EQ(regular.size(), training.size());
  EXPECT_EQ(regular.back(), S("<|end|>"));
  EXPECT_EQ(training.back(), S("<|return|>"));
  EXPECT_TRUE(std::equal(regular.begin(), regular.end() - 1, training.begin()));
  std::vector<Message> user_only = {Message::from_role_and_content(Role::kUser, "hi")};
  EXPECT_EQ(render_conversation_for_training(user_only).value(), render_conversation(user_only).value());
}

// Channels: U user, A analysis, F final, C commentary call, T tool result.
std::vector<Message> convo_from(std::string_view pattern) {
  std::vector<Message> out;
  for (char c : pattern) {
    switch (c) {
      case 'U': out.push_back(Message::from_role_and_content(Role::kUser, "u")); break;
      case 'A': out.push_back(Message::from_role_and_content(Role::kAssistant, "a").with_channel("analysis")); break;
      case 'F': out.push_back(Message::from_role_and_content(Role::kAssistant, "f").with_channel("final")); break;
      case 'C':
        out.push_back(Message::from_role_and_content(Role::kAssistant, "{}")
                          .with_channel("commentary").with_recipient("functions.f"));
        break;
      case 'T':
        out.push_back(Message::from_author_and_content(Author{Role::kTool, "functions.f"}, "r")
                          .with_channel("commentary").with_recipient("assistant"));
        break;
    }
  }
  return out;
}

TEST(HarmonyRender, AnalysisDroppingRules) {
  using V = std::vector<size_t>;
  RenderConfig harmony_rule, last_final, off;
  last_final.drop_rule = AnalysisDropRule::kBeforeLastFinal;
  off.auto_drop_analysis = false;
  //                                   0123456
  auto two_turns = convo_from("UAFUAF");
  EXPECT_EQ(kept_message_indices(two_turns, harmony_rule), (V{0, 2, 3, 4, 5}));  // first final only
  EXPECT_EQ(kept_message_indices(two_turns, last_final), (V{0, 2, 3, 5}));
  EXPECT_EQ(kept_message_indices(two_turns, off), (V{0, 1, 2, 3, 4, 5}));
  // An unfinished tool-call chain in the second turn: harmony drops nothing (the last
  // assistant message is not final); last-final drops only the first turn's analysis.
  auto chain = convo_from("UAFUACTA");
  EXPECT_EQ(kept_message_indices(chain, harmony_rule), (V{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(kept_message_indices(chain, last_final), (V{0, 2, 3, 4, 5, 6, 7}));
  // The chain completes with a final: its reasoning goes too under last-final.
  auto done = convo_from("UACTAF");
  EXPECT_EQ(kept_message_indices(done, harmony_rule), (V{0, 2, 3, 5}));
  EXPECT_EQ(kept_message_indices(done, last_final), (V{0, 2, 3, 5}));
  EXPECT_EQ(kept_message_indices(convo_from("UA"), harmony_rule), (V{0, 1}));
}

TEST(HarmonyRender, PiecesToTokensAndStopTokens) {
  ByteTokenizer bt;
  Pieces p = {S("<|start|>"), T("ab"), S("<|end|>"), T("")};
  auto t = pieces_to_tokens(p, bt);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t.value(), (std::vector<tok::Token>{200006, 'a', 'b', 200007}));
  EXPECT_FALSE(pieces_to_tokens({S("<|nonsense|>")}, bt).is_ok());
  EXPECT_EQ(stop_tokens(bt).value(), (std::vector<tok::Token>{200002, 200012, 200007}));
  EXPECT_EQ(stop_tokens_for_assistant_actions(bt).value(), (std::vector<tok::Token>{200002, 200012}));
}

// ---- random round trip ----

std::string random_text(std::mt19937& rng) {
  static const char* atoms[] = {"a", "Z", " ", "\n", "{", "\"", "to=", "<|end|>", "<|start|>",
                                "<|call|>", "\xC3\xA9", "\xE2\x80\x9C", "\xF0\x9F\x92\x96",
                                "functions.x", "<", "|>", "\t", "0"};
  std::uniform_int_distribution<int> len(0, 12), pick(0, std::size(atoms) - 1);
  std::string s;
  for (int i = len(rng); i > 0; --i) s += atoms[pick(rng)];
  return s;
}

std::string random_word(std::mt19937& rng, const char* alphabet) {
  std::uniform_int_distribution<int> len(1, 8);
  std::uniform_int_distribution<size_t> pick(0, std::strlen(alphabet) - 1);
  std::string s;
  for (int i = len(rng); i > 0; --i) s += alphabet[pick(rng)];
  return s;
}

// A message that harmony's header grammar can carry back: no user names, tools always
// address someone, a bare content type only with a recipient (alone it reads as one).
Message random_message(std::mt19937& rng) {
  const char* ident = "abcxyz_.0123";
  std::uniform_int_distribution<int> kind(0, 4), coin(0, 1);
  Message m;
  switch (kind(rng)) {
    case 0: m = Message::from_role_and_content(Role::kUser, random_text(rng)); break;
    case 1: m = Message::from_role_and_content(Role::kSystem, random_text(rng)); break;
    case 2: m = Message::from_role_and_content(Role::kDeveloper, random_text(rng)); break;
    case 3:
      m = Message::from_author_and_content(Author{Role::kTool, "functions." + random_word(rng, ident)},
                                           random_text(rng));
      m.recipient = "assistant";
      break;
    default: m = Message::from_role_and_content(Role::kAssistant, random_text(rng)); break;
  }
  if (coin(rng)) m.channel = random_word(rng, "abcdefghij_-");
  if (m.author.role == Role::kAssistant && coin(rng)) {
    m.recipient = "functions." + random_word(rng, ident);
    if (coin(rng)) m.content_type = coin(rng) ? "<|constrain|>json" : random_word(rng, "jsonce");
  } else if (m.author.role == Role::kAssistant && coin(rng)) {
    m.content_type = "<|constrain|>" + random_word(rng, "jsonyaml");
  }
  return m;
}

TEST(HarmonyRoundTrip, RandomConversationsRenderThenParse) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ByteTokenizer bt;
  RenderConfig keep_all;
  keep_all.auto_drop_analysis = false;
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<Message> convo;
    for (int n = std::uniform_int_distribution<int>(1, 6)(rng); n > 0; --n) {
      convo.push_back(random_message(rng));
    }
    auto pieces = render_conversation(convo, keep_all);
    ASSERT_TRUE(pieces.is_ok()) << pieces.status().message();
    auto tokens = pieces_to_tokens(pieces.value(), bt).value();
    for (bool strict : {true, false}) {
      auto parser = StreamParser::create(bt, ParseOptions{strict, std::nullopt});
      ASSERT_TRUE(parser.is_ok());
      std::vector<ParseEvent> events;
      for (auto t : tokens) ASSERT_TRUE(parser->push(t, &events).is_ok());
      ASSERT_TRUE(parser->finish(&events).is_ok());
      ASSERT_EQ(parser->messages().size(), convo.size()) << "iteration " << iter;
      for (size_t i = 0; i < convo.size(); ++i) {
        EXPECT_EQ(parser->messages()[i], convo[i])
            << "iteration " << iter << " message " << i << "\n  parsed:   "
            << debug_string(parser->messages()[i]) << "\n  rendered: " << debug_string(convo[i]);
      }
      EXPECT_TRUE(parser->warnings().empty());
      // Streaming: the deltas of each message concatenate to its content.
      std::vector<std::string> streamed;
      for (const auto& e : events) {
        if (e.kind == ParseEvent::Kind::kMessageStart) streamed.emplace_back();
        if (e.kind == ParseEvent::Kind::kContentDelta) streamed.back() += e.delta;
      }
      ASSERT_EQ(streamed.size(), convo.size());
      for (size_t i = 0; i < convo.size(); ++i) EXPECT_EQ(streamed[i], convo[i].text());
    }
    if (::testing::Test::HasFailure()) break;
  }
}

// Random token soup: strict either parses or fails at an index inside the stream;
// recovering never fails. (The libFuzzer target explores this much further.)
TEST(HarmonyRoundTrip, RandomTokenStreamsNeverCrash) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  ByteTokenizer bt;
  const tok::Token interesting[] = {200006, 200007, 200008, 200005, 200003, 200002, 200012,
                                    200100, 'a', ' ', 't', 'o', '=', 0xE2, 0x80, 0x9C, -1};
  std::uniform_int_distribution<size_t> pick(0, std::size(interesting) - 1);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<tok::Token> stream;
    for (int n = std::uniform_int_distribution<int>(0, 40)(rng); n > 0; --n) {
      stream.push_back(interesting[pick(rng)]);
    }
    auto strict = parse_messages(bt, stream, ParseOptions{true, std::nullopt});
    if (!strict.is_ok()) {
      EXPECT_NE(strict.status().message().find("token "), std::string::npos);
    }
    auto rec = parse_messages(bt, stream, ParseOptions{false, Role::kAssistant});
    EXPECT_TRUE(rec.is_ok()) << rec.status().message();
  }
}

}  // namespace
}  // namespace brass::harmony
