// Token-level conformance with the real o200k_harmony tokenizer (src/tokenizer): as
// harmony's own tests do, the rendered prompt's tokens must equal the golden text
// encoded with all specials allowed; harmony's token-id goldens must parse; and the
// streaming parser must give the same messages on real BPE token boundaries (multi-byte
// characters split across tokens) as on the rendered messages.
#include <gtest/gtest.h>

#include "harmony/parser.h"
#include "harmony/render.h"
#include "test_tokenizer.h"

#ifdef BRASS_HARMONY_HAVE_TOKENIZER

namespace brass::harmony {
namespace {

const tok::Tokenizer* real_tokenizer() {
  static std::unique_ptr<tok::Tokenizer> t = [] {
    auto r = tok::Tokenizer::from_tiktoken(testing::o200k_rank_file(), tok::o200k_harmony_specials());
    return r.is_ok() ? std::move(r).value() : nullptr;
  }();
  return t.get();
}

#define REQUIRE_TOKENIZER()                                                         \
  const tok::Tokenizer* tk = real_tokenizer();                                       \
  if (!tk) GTEST_SKIP() << "o200k rank file not loadable: " << testing::o200k_rank_file()

constexpr const char* kIdentity = "You are ChatGPT, a large language model trained by OpenAI.";

void expect_tokens_match_golden(const tok::Tokenizer& tk, const std::vector<Message>& convo,
                                const char* golden) {
  auto tokens = render_prompt_tokens(convo, tk);
  ASSERT_TRUE(tokens.is_ok()) << tokens.status().message();
  auto expected = tk.encode(testing::read_golden(golden), /*allow_special=*/true);
  EXPECT_EQ(tokens.value(), expected) << golden;
}

TEST(HarmonyTokens, PromptTokensEqualGoldenEncoding) {
  REQUIRE_TOKENIZER();
  {
    SystemContent sys;
    sys.with_model_identity(kIdentity);
    expect_tokens_match_golden(*tk, {Message::from_role_and_content(Role::kSystem, sys),
                                     Message::from_role_and_content(Role::kUser, "What is 2 + 2?")},
                               "test_simple_convo.txt");
  }
  struct Case {
    ReasoningEffort effort;
    const char* file;
    bool instruction;
  } cases[] = {
      {ReasoningEffort::kLow, "test_simple_convo_low_effort.txt", true},
      {ReasoningEffort::kMedium, "test_simple_convo_medium_effort.txt", true},
      {ReasoningEffort::kHigh, "test_simple_convo_high_effort.txt", true},
      {ReasoningEffort::kLow, "test_simple_convo_low_effort_no_instruction.txt", false},
      {ReasoningEffort::kMedium, "test_simple_convo_medium_effort_no_instruction.txt", false},
      {ReasoningEffort::kHigh, "test_simple_convo_high_effort_no_instruction.txt", false},
  };
  for (const auto& c : cases) {
    SystemContent sys;
    sys.with_model_identity(kIdentity).with_reasoning_effort(c.effort);
    std::vector<Message> convo = {Message::from_role_and_content(Role::kSystem, sys)};
    if (c.instruction) {
      convo.push_back(Message::from_role_and_content(
          Role::kDeveloper, DeveloperContent().with_instructions("Answer the user's questions like a robot.")));
    }
    convo.push_back(Message::from_role_and_content(
        Role::kUser, "What is the capital of the largest country in the world?"));
    expect_tokens_match_golden(*tk, convo, c.file);
  }
  {
    SystemContent sys;
    sys.with_model_identity(kIdentity)
        .with_reasoning_effort(ReasoningEffort::kMedium)
        .with_conversation_start_date("2021-01-01")
        .with_knowledge_cutoff("2021-01")
        .with_required_channels({"analysis", "final"});
    expect_tokens_match_golden(*tk, {Message::from_role_and_content(Role::kSystem, sys),
                                     Message::from_role_and_content(Role::kUser, "What is 42 * pi?")},
                               "test_reasoning_system_message_with_dates.txt");
  }
  {
    // harmony: "ensure that <|constrain|>json part is tokenized correctly as special tokens".
    std::vector<Message> convo = {
        Message::from_role_and_content(Role::kUser, "What is the weather in SF?"),
        Message::from_role_and_content(
            Role::kAssistant,
            "User asks: \u201cWhat is the weather in SF?\u201d We need to use lookup_weather tool.")
            .with_channel("analysis"),
        Message::from_role_and_content(Role::kAssistant, "{\"location\": \"San Francisco\"}")
            .with_channel("commentary")
            .with_recipient("functions.lookup_weather")
            .with_content_type("<|constrain|>json"),
        Message::from_author_and_content(Author{Role::kTool, "functions.lookup_weather"},
                                         "{\"temperature\": 20, \"description\": \"sunny\"}")};
    expect_tokens_match_golden(*tk, convo, "test_does_not_drop_if_ongoing_analysis.txt");
  }
}

TEST(HarmonyTokens, ParseGoldenTokenListsWithRealTokenizer) {
  REQUIRE_TOKENIZER();
  std::vector<tok::Token> ids;
  std::istringstream in(testing::read_golden("test_simple_reasoning_response.txt"));
  long v;
  while (in >> v) ids.push_back(static_cast<tok::Token>(v));
  auto r = parse_messages(*tk, ids, ParseOptions{true, Role::kAssistant});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r.value().size(), 2u);
  EXPECT_EQ(r.value()[1].text(), "2 + 2 = 4.");
  // Streamable-parser golden on real BPE tokens: still three messages.
  auto tokens = tk->encode(testing::read_golden("test_streamable_parser.txt"), true);
  auto r2 = parse_messages(*tk, tokens, ParseOptions{true, Role::kAssistant});
  ASSERT_TRUE(r2.is_ok()) << r2.status().message();
  EXPECT_EQ(r2.value().size(), 3u);
}

TEST(HarmonyTokens, RoundTripOnBpeBoundaries) {
  REQUIRE_TOKENIZER();
  std::vector<Message> convo = {
      Message::from_role_and_content(Role::kUser, "\u00bfQu\u00e9 tiempo hace en \u6771\u4eac? \U0001F496"),
      Message::from_role_and_content(Role::kAssistant, "Necesito \u201cbuscar\u201d. <|end|> sigue")
          .with_channel("analysis"),
      Message::from_role_and_content(Role::kAssistant, "{\"ciudad\": \"\u6771\u4eac\"}")
          .with_channel("commentary")
          .with_recipient("functions.clima")
          .with_content_type("<|constrain|>json"),
      Message::from_author_and_content(Author{Role::kTool, "functions.clima"}, "\u2600\ufe0f 25\u00b0C")
          .with_channel("commentary")
          .with_recipient("assistant"),
      Message::from_role_and_content(Role::kAssistant, "Soleado \U0001F31E").with_channel("final")};
  RenderConfig keep;
  keep.auto_drop_analysis = false;
  auto pieces = render_conversation(convo, keep);
  ASSERT_TRUE(pieces.is_ok());
  auto tokens = pieces_to_tokens(pieces.value(), *tk);
  ASSERT_TRUE(tokens.is_ok());
  EXPECT_EQ(tk->decode(tokens.value()), pieces_to_text(pieces.value()));
  auto parsed = parse_messages(*tk, tokens.value());
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  ASSERT_EQ(parsed.value().size(), convo.size());
  for (size_t i = 0; i < convo.size(); ++i) {
    EXPECT_EQ(parsed.value()[i], convo[i]) << debug_string(parsed.value()[i]);
  }
}

}  // namespace
}  // namespace brass::harmony

#else

TEST(HarmonyTokens, NeedsTokenizer) { GTEST_SKIP() << "brass_tokenizer not built"; }

#endif
