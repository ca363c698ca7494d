// Constrained decoding. Oracle for "is this a prefix of some valid JSON text":
// nlohmann::json's parser, which stops at the first offending byte — a text is a valid
// prefix iff it parses, or its parse error is at end of input. Checked: every prefix of
// random JSON documents is accepted; random byte strings are accepted exactly when the
// oracle says so; and a random walk through the real vocabulary under HarmonyConstraint
// only ever builds valid JSON, while sampled masked tokens really would break it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/constraint.h"
#include "test_util.h"

namespace brass::server {
namespace {

using testing::o200k;
using testing::Seeded;

// Oracle: `s` is a valid JSON prefix iff, after closing the token it may end inside (an
// open string, escape, \u sequence, literal or number, by appending one of a few fixed
// completions), nlohmann's parser either accepts it or fails with "unexpected end of
// input" (its parser reached EOF with no error before). A lexer error at EOF alone is
// not enough: the token would have to be complete to know whether it fits.
bool g_overflow = false;  // the oracle met a number beyond double range (completeness unknown)
bool parses_or_eof(const std::string& s, bool* complete) {
  try {
    (void)nlohmann::json::parse(s);
    if (complete) *complete = true;
    return true;
  } catch (const nlohmann::json::parse_error& e) {
    return std::string(e.what()).find("unexpected end of input") != std::string::npos;
  } catch (const nlohmann::json::out_of_range&) {  // syntax fine, number too large for a double
    g_overflow = true;
    return true;
  }
}
bool oracle_prefix(const std::string& s, bool* complete) {
  *complete = false;
  if (parses_or_eof(s, complete)) return true;
  static const char* kClose[] = {"\"", "n\"", "0\"", "00\"", "000\"", "0000\"", "0", "rue", "ue", "e",
                                 "alse", "lse", "se", "ull", "ll", "l"};
  for (const char* c : kClose) {
    if (parses_or_eof(s + c, nullptr)) return true;
  }
  return false;
}

std::string random_json(std::mt19937_64& rng, int depth) {
  auto ws = [&] { static const char* w[] = {"", "", " ", "\n  ", "\t"}; return std::string(w[rng() % 5]); };
  const int kind = depth >= 4 ? static_cast<int>(rng() % 4) : static_cast<int>(rng() % 6);
  switch (kind) {
    case 0: { static const char* n[] = {"0", "-1", "12.5e-3", "3.25", "-0.0E-2", "7"}; return n[rng() % 6]; }
    case 1: { static const char* s[] = {"\"\"", "\"a b\"", "\"\\u00e9\\n\"", "\"caf\xc3\xa9\"", "\"q\\\"x\""}; return s[rng() % 5]; }
    case 2: { static const char* l[] = {"true", "false", "null"}; return l[rng() % 3]; }
    case 3: return "\"k\"";
    case 4: {
      std::string out = "[" + ws();
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) out += (i ? "," + ws() : "") + random_json(rng, depth + 1) + ws();
      return out + "]";
    }
    default: {
      std::string out = "{" + ws();
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) out += (i ? "," + ws() : "") + "\"k" + std::to_string(i) + "\"" + ws() + ":" + ws() + random_json(rng, depth + 1);
      return out + ws() + "}";
    }
  }
}

TEST(JsonValidator, AcceptsEveryPrefixOfValidDocuments) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  for (int iter = 0; iter < 300; ++iter) {
    const std::string doc = random_json(s.rng, 0);
    bool complete = false;
    ASSERT_TRUE(oracle_prefix(doc, &complete) && complete) << doc;
    JsonValidator v;
    for (size_t i = 0; i < doc.size(); ++i) {
      ASSERT_TRUE(v.feed(static_cast<uint8_t>(doc[i]))) << doc << " at " << i;
    }
    EXPECT_TRUE(v.complete()) << doc;
  }
}

TEST(JsonValidator, AgreesWithOracleOnRandomBytes) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  const std::string alphabet = "{}[]\":,.-+eE0123456789 tfnrulasx\\\n";
  int n_accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    // Start from a valid prefix half the time, so acceptance is not trivially rare.
    std::string text;
    if (iter % 2) {
      const std::string doc = random_json(s.rng, 0);
      text = doc.substr(0, s.rng() % (doc.size() + 1));
    }
    const int extra = 1 + static_cast<int>(s.rng() % 4);
    for (int i = 0; i < extra; ++i) text += alphabet[s.rng() % alphabet.size()];
    if (text[0] != '[' && text[0] != '{') text = "[" + text;
    // Bytes >= 0x80 are not UTF-8-validated by design (see constraint.h); nlohmann does.
    if (std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) continue;
    JsonValidator v;
    bool ok = v.feed(text);
    bool complete = false;
    g_overflow = false;
    const bool want = oracle_prefix(text, &complete);
    if (g_overflow) continue;  // nlohmann stops at a number it cannot represent: no verdict
    ASSERT_EQ(ok, want) << "text: [" << text << "]";
    if (ok) {
      ++n_accepted;
      // A complete top-level document the oracle accepts must be complete for us too,
      // except a bare number, which may still grow ("12" -> "123").
      EXPECT_EQ(v.complete(), complete) << text;
    }
  }
  EXPECT_GT(n_accepted, 1000);
}

TEST(JsonValidator, RootObjectAndLimits) {
  JsonValidator v(/*root_object=*/true);
  EXPECT_FALSE(v.feed('['));
  EXPECT_FALSE(v.feed('"'));
  EXPECT_TRUE(v.feed(std::string_view("  {")));
  JsonValidator tight(true, /*tight=*/true);
  EXPECT_FALSE(tight.feed(' '));
  EXPECT_TRUE(tight.feed(std::string_view("{ }")));
  EXPECT_TRUE(tight.done());
  EXPECT_FALSE(tight.feed('\n'));
  JsonValidator deep;
  std::string open(JsonValidator::kMaxDepth, '[');
  EXPECT_TRUE(deep.feed(open));
  EXPECT_FALSE(deep.feed('['));
  JsonValidator ws;
  EXPECT_TRUE(ws.feed(std::string(JsonValidator::kMaxWhitespace, ' ')));
  EXPECT_FALSE(ws.feed(' '));
}

// Bytes >= 0x80 -> 'a': the validator does not check UTF-8 inside strings (by design);
// the oracle does, and random tokens split characters.
std::string ascii(std::string s) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) c = 'a';
  }
  return s;
}

std::shared_ptr<const TokenTable> table() {
  static auto t = std::make_shared<const TokenTable>(o200k());
  return t;
}

// Random walk over the allowed set in the final channel: the content stays a valid JSON
// prefix (oracle), masked tokens sampled at each step really break it, and once the
// object is complete only <|return|> is allowed.
TEST(HarmonyConstraint, FinalChannelJsonRandomWalk) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  const tok::Tokenizer& tk = o200k();
  const int32_t ret = *tk.special("<|return|>");
  ConstraintPlan plan;
  plan.json = ConstraintPlan::JsonWhere::kFinalChannel;
  plan.json_end_tokens = {ret};
  for (int walk = 0; walk < 3; ++walk) {
    auto c = HarmonyConstraint::create(table(), tk, plan);
    ASSERT_TRUE(c.is_ok());
    std::vector<int32_t> gen = tk.encode("<|channel|>analysis<|message|>think {[<|end|><|start|>assistant<|channel|>final<|message|>", true);
    std::vector<uint8_t> mask;
    // Before the final content: free (analysis is not constrained).
    ASSERT_TRUE((*c)->allowed(std::span<const int32_t>(gen.data(), 3), &mask).is_ok());
    std::string content;
    for (int step = 0; step < 40; ++step) {
      ASSERT_TRUE((*c)->allowed(gen, &mask).is_ok());
      std::vector<int32_t> ok_ids, bad_ids;
      for (int32_t t = 0; t < static_cast<int32_t>(mask.size()); ++t) (mask[t] ? ok_ids : bad_ids).push_back(t);
      ASSERT_FALSE(ok_ids.empty());
      bool complete = false;
      const bool valid = oracle_prefix(ascii(content), &complete);
      ASSERT_TRUE(valid || content.empty()) << content;
      if (std::find(ok_ids.begin(), ok_ids.end(), ret) != ok_ids.end()) {
        EXPECT_TRUE(complete) << "<|return|> allowed but the JSON is not complete: " << content;
      }
      // Masked ordinary tokens must break the JSON (once complete, everything but the end
      // token is masked by design: no trailing whitespace).
      for (int k = 0; k < 30 && !complete; ++k) {
        const int32_t t = bad_ids[s.rng() % bad_ids.size()];
        if (tk.is_special(t) || tk.token_bytes(t).empty()) continue;
        bool cc = false;
        const std::string next = content + std::string(tk.token_bytes(t));
        // The oracle must reject it, or it breaks our documented limits (root object,
        // whitespace runs, depth) — check the first two cheaply.
        const bool oracle_ok = oracle_prefix(ascii(next), &cc);
        // (The constraint also forbids whitespace before the root object.)
        const bool starts_object = !next.empty() && next[0] == '{';
        size_t run = 0, max_run = 0;  // (whitespace runs are capped at kMaxWhitespace)
        for (char ch : next) {
          run = (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') ? run + 1 : 0;
          max_run = std::max(max_run, run);
        }
        const bool trailing_ws = cc && (next.back() == ' ' || next.back() == '\t' || next.back() == '\n' || next.back() == '\r');
        if (oracle_ok && starts_object && !trailing_ws && max_run <= static_cast<size_t>(JsonValidator::kMaxWhitespace)) {
          ADD_FAILURE() << "masked token " << t << " [" << tk.token_bytes(t) << "] would keep [" << content << "] valid";
        }
      }
      if (std::find(ok_ids.begin(), ok_ids.end(), ret) != ok_ids.end() && ok_ids.size() == 1) {
        gen.push_back(ret);
        break;
      }
      // Prefer closing brackets late in the walk so some walks complete.
      int32_t pick = ok_ids[s.rng() % ok_ids.size()];
      if (step > 25) {
        for (int32_t t : ok_ids) {
          const auto b = tk.token_bytes(t);
          if (b == "}" || b == "]" || b == "\"" || t == ret) pick = t;
        }
      }
      gen.push_back(pick);
      if (pick == ret) break;
      content += std::string(tk.token_bytes(pick));
    }
  }
}

TEST(HarmonyConstraint, ForcedToolHeaderThenJsonArguments) {
  const tok::Tokenizer& tk = o200k();
  const int32_t call = *tk.special("<|call|>");
  ConstraintPlan plan;
  plan.prefix_options.push_back(tk.encode("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>", true));
  plan.prefix_options.push_back(tk.encode("<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>", true));
  plan.json = ConstraintPlan::JsonWhere::kAfterPrefix;
  plan.json_end_tokens = {call};
  auto c = HarmonyConstraint::create(table(), tk, plan);
  ASSERT_TRUE(c.is_ok());
  std::vector<int32_t> gen;
  std::vector<uint8_t> mask;
  // Walk the shared prefix: exactly one allowed token per step until the names differ.
  const auto& a = plan.prefix_options[0];
  const auto& b = plan.prefix_options[1];
  size_t i = 0;
  for (; i < std::min(a.size(), b.size()) && a[i] == b[i]; ++i) {
    ASSERT_TRUE((*c)->allowed(gen, &mask).is_ok());
    EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 1);
    EXPECT_TRUE(mask[a[i]]);
    gen.push_back(a[i]);
  }
  ASSERT_TRUE((*c)->allowed(gen, &mask).is_ok());
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 2);  // the two tool names
  EXPECT_TRUE(mask[a[i]] && mask[b[i]]);
  for (; i < b.size(); ++i) gen.push_back(b[i]);
  // Arguments: must start an object; <|call|> only once it closes.
  ASSERT_TRUE((*c)->allowed(gen, &mask).is_ok());
  EXPECT_TRUE(mask[tk.encode("{")[0]]);
  EXPECT_FALSE(mask[tk.encode("[")[0]]);
  EXPECT_FALSE(mask[call]);
  for (int32_t t : tk.encode("{\"tz\": \"UTC\"}")) {
    ASSERT_TRUE((*c)->allowed(gen, &mask).is_ok());
    ASSERT_TRUE(mask[t]) << t;
    gen.push_back(t);
  }
  ASSERT_TRUE((*c)->allowed(gen, &mask).is_ok());
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 1);
  EXPECT_TRUE(mask[call]);
}

}  // namespace
}  // namespace brass::server
