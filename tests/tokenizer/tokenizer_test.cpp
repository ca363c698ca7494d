// Tokenizer behaviour that the corpus parity test does not pin down by itself: special
// tokens on/off and their ids (from the o200k_harmony table in tiktoken's
// openai_public.py), invalid UTF-8 == its U+FFFD repair, round trips, the streaming
// decoder (never half a character), loader errors, and time bounds on pathological input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "corpus_gen.h"
#include "test_util.h"
#include "tokenizer/unicode.h"

namespace brass::tok {
namespace {

using testing::o200k;

TEST(Specials, HarmonyTable) {
  const Tokenizer& t = o200k();
  EXPECT_EQ(t.n_vocab(), 201088);
  const std::pair<const char*, Token> named[] = {
      {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|return|>", 200002},
      {"<|constrain|>", 200003},   {"<|channel|>", 200005},   {"<|start|>", 200006},
      {"<|end|>", 200007},         {"<|message|>", 200008},   {"<|call|>", 200012},
      {"<|endofprompt|>", 200018}, {"<|reserved_200000|>", 200000},
      {"<|reserved_200013|>", 200013}, {"<|reserved_200018|>", 200018},
      {"<|reserved_201087|>", 201087}};
  for (const auto& [text, id] : named) {
    EXPECT_EQ(t.special(text), std::optional<Token>(id)) << text;
    EXPECT_TRUE(t.is_special(id)) << text;
  }
  EXPECT_EQ(t.special("<|reserved_201088|>"), std::nullopt);
  EXPECT_EQ(t.token_bytes(200018), "<|endofprompt|>");
  EXPECT_EQ(t.token_bytes(200006), "<|start|>");
  EXPECT_FALSE(t.is_special(199997));
  EXPECT_EQ(t.token_bytes(201088), "");
  EXPECT_EQ(t.token_bytes(-1), "");
  for (Token id = 199998; id < 201088; ++id) ASSERT_TRUE(t.is_special(id)) << id;
}

TEST(Specials, AllowedOrPlainText) {
  const Tokenizer& t = o200k();
  const std::string msg = "<|start|>user<|message|>Hi there<|end|>";
  const std::vector<Token> with = t.encode(msg, true);
  std::vector<Token> expect = {200006};
  for (Token x : t.encode("user")) expect.push_back(x);
  expect.push_back(200008);
  for (Token x : t.encode("Hi there")) expect.push_back(x);
  expect.push_back(200007);
  EXPECT_EQ(with, expect);
  const std::vector<Token> without = t.encode(msg, false);
  for (Token x : without) EXPECT_FALSE(t.is_special(x));
  EXPECT_EQ(t.decode(without), msg);
  EXPECT_EQ(t.decode(with), msg);
  // Broken or unknown spellings are text even when specials are allowed.
  for (const char* s : {"<|start", "<|START|>", "<| end |>", "<|reserved_201088|>"})
    for (Token x : t.encode(s, true)) EXPECT_FALSE(t.is_special(x)) << s;
  // Adjacent specials and a special inside a word.
  EXPECT_EQ(t.encode("<|end|><|start|>", true), (std::vector<Token>{200007, 200006}));
  const auto mid = t.encode("ab<|call|>cd", true);
  EXPECT_NE(std::find(mid.begin(), mid.end(), 200012), mid.end());
}

TEST(Encode, InvalidUtf8IsEncodedAsItsRepair) {
  const Tokenizer& t = o200k();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::CorpusGen gen(seed);
  for (int k = 0; k < 200; ++k) {
    std::string s = gen.document(200, true);
    // Extra random bytes anywhere.
    for (int j = 0; j < 5; ++j) s.insert(gen.uniform(s.size() + 1), 1, char(gen.uniform(256)));
    const std::string fixed = utf8_lossy(s);
    ASSERT_TRUE(is_valid_utf8(fixed));
    ASSERT_EQ(t.encode(s), t.encode(fixed)) << testing::escape(s);
    ASSERT_EQ(t.decode(t.encode(s)), fixed);
  }
  EXPECT_EQ(t.encode("\xFF"), t.encode("\xEF\xBF\xBD"));
}

TEST(Encode, RoundTripValidUtf8) {
  const Tokenizer& t = o200k();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::CorpusGen gen(seed);
  for (int k = 0; k < 100; ++k) {
    const std::string s = gen.document(2000, false);
    ASSERT_EQ(t.decode(t.encode(s)), s) << testing::escape(s);
  }
  EXPECT_TRUE(t.encode("").empty());
}

TEST(StreamDecoder, NeverEmitsHalfACharacter) {
  const Tokenizer& t = o200k();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::CorpusGen gen(seed);
  for (int k = 0; k < 50; ++k) {
    const std::string s = gen.document(1000, k % 2 == 1);
    const auto ids = t.encode(s);
    StreamDecoder sd(t);
    std::string all;
    for (Token id : ids) {
      const std::string out = sd.push(id);
      ASSERT_TRUE(is_valid_utf8(out));
      all += out;
    }
    all += sd.flush();
    ASSERT_EQ(all, utf8_lossy(s));
  }
  // Hand-made: the bytes of one emoji arriving one token per byte.
  StreamDecoder sd(t);
  const std::string e = "\xF0\x9F\x98\x80";
  std::string got;
  // Ordinary single-byte tokens: the rank of each byte.
  for (size_t i = 0; i < e.size(); ++i) {
    Token id = -1;
    for (Token c = 0; c < 256 * 4 && id < 0; ++c)
      if (t.token_bytes(c) == e.substr(i, 1)) id = c;
    ASSERT_GE(id, 0);
    const std::string out = sd.push(id);
    if (i < 3) EXPECT_EQ(out, "") << i;
    got += out;
  }
  EXPECT_EQ(got, e);
  // A lead byte followed by ASCII: U+FFFD at once, then the letter.
  StreamDecoder sd2(t);
  Token lead = -1, letter = t.encode("a")[0];
  for (Token c = 0; c < 1024 && lead < 0; ++c) if (t.token_bytes(c) == "\xE2") lead = c;
  ASSERT_GE(lead, 0);
  EXPECT_EQ(sd2.push(lead), "");
  EXPECT_EQ(sd2.push(letter), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(sd2.push(lead), "");
  EXPECT_EQ(sd2.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(sd2.flush(), "");
}

TEST(Encode, PathologicalInputsStayFast) {
  const Tokenizer& t = o200k();
  std::string emoji, nospace, digits;
  while (emoji.size() < 100000) emoji += "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x92\xBB";
  std::mt19937_64 rng(testing::fresh_seed());
  while (nospace.size() < 100000) nospace += char('a' + rng() % 26);
  while (digits.size() < 100000) digits += char('0' + rng() % 10);
  for (const std::string* s : {&emoji, &nospace, &digits}) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = t.encode(*s);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(sec, 2.0) << "100 KB took " << sec << " s: quadratic?";
    EXPECT_EQ(t.decode(ids), *s);
  }
  const std::string a(100000, 'a'), sp(100000, ' ');
  EXPECT_EQ(t.decode(t.encode(a)), a);
  EXPECT_EQ(t.decode(t.encode(sp)), sp);
}

// A tiny vocabulary: all 256 bytes (base64 of one byte) plus "ab" (YWI=) at rank 256.
std::string tiny_vocab() {
  static const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (int b = 0; b < 256; ++b) {
    out += kB64[b >> 2];
    out += kB64[(b & 3) << 4];
    out += "== " + std::to_string(b) + "\n";
  }
  return out;
}

TEST(Loader, TinyVocabularyWorks) {
  const testing::TempFile f("tiny.tiktoken", tiny_vocab() + "YWI= 256\nYWJj 257\n");
  auto r = Tokenizer::from_tiktoken(f.path(), {{"<|x|>", 300}});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Tokenizer& t = *r.value();
  EXPECT_EQ(t.n_vocab(), 301);
  EXPECT_EQ(t.encode("abcab"), (std::vector<Token>{257, 256}));
  EXPECT_EQ(t.encode("ab<|x|>c", true), (std::vector<Token>{256, 300, 'c'}));
  EXPECT_EQ(t.token_bytes(280), "");  // gap
}

TEST(Loader, ErrorsNameFileAndLine) {
  struct Case {
    std::string content, expect;
  };
  const std::vector<Case> cases = {
      {tiny_vocab() + "YWI=256\n", ":257: expected '<base64 token> <rank>'"},
      {tiny_vocab() + "Y!I= 256\n", ":257: token 'Y!I=' is not valid base64"},
      {tiny_vocab() + "YWI= 25x\n", ":257: rank '25x' is not a decimal number"},
      {tiny_vocab() + "YWI= 5\n", "rank 5 is given to two tokens"},
      {tiny_vocab() + "YQ== 300\n", "appear twice"},
      {"YQ== 0\n", "byte 0x00 has no token"},
      {"", "no tokens"},
  };
  for (const Case& c : cases) {
    const testing::TempFile f("bad.tiktoken", c.content);
    const std::string& p = f.path();
    auto r = Tokenizer::from_tiktoken(p, {});
    ASSERT_FALSE(r.is_ok()) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
  }
  auto missing = Tokenizer::from_tiktoken("/nonexistent/x.tiktoken", {});
  EXPECT_FALSE(missing.is_ok());
  const testing::TempFile ok("ok.tiktoken", tiny_vocab());
  auto clash = Tokenizer::from_tiktoken(ok.path(), {{"<|x|>", 5}});
  ASSERT_FALSE(clash.is_ok());
  EXPECT_NE(clash.status().message().find("ordinary token"), std::string::npos);
}

}  // namespace
}  // namespace brass::tok
