// Token-level conformance with the real o200k_harmony tokenizer (src/tokenizer): as
// harmony's own tests do, the rendered prompt's tokens must equal the golden text
// encoded with all specials allowed; harmony's token-id goldens must parse; and the
// streaming parser must give the same messages on real BPE token boundaries (multi-byte
// characters split across tokens) as on the rendered messages.
#include <gtest/gtest.h>

#include "harmony/parser.h"
#include "harmony/render.h"
#include "golden_convos.h"
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

void expect_tokens_match_golden(const tok::Tokenizer& tk, const std::vector<Message>& convo,
                                const char* golden) {
  auto tokens = render_prompt_tokens(convo, tk);
  ASSERT_TRUE(tokens.is_ok()) << tokens.status().message();
  auto expected = tk.encode(testing::read_golden(golden), /*allow_special=*/true);
  EXPECT_EQ(tokens.value(), expected) << golden;
}

TEST(HarmonyTokens, PromptTokensEqualGoldenEncoding) {
  REQUIRE_TOKENIZER();
  for (const auto& c : testing::shared_golden_convos()) expect_tokens_match_golden(*tk, c.messages, c.file.c_str());
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
