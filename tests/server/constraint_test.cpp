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

// Surrogate escapes are masked at their second hex digit (strict parsers reject lone
// ones); other \u escapes and raw UTF-8 beyond the BMP pass.
TEST(JsonValidator, SurrogateEscapesAreMasked) {
  for (const char* bad : {"\"\\ud8", "\"\\uDC", "\"a\\uDf"}) {
    JsonValidator v;
    EXPECT_FALSE(v.feed(std::string_view(bad))) << bad;
  }
  JsonValidator ok;
  EXPECT_TRUE(ok.feed(std::string_view("\"\\ud7ff\\u00e9\\uE000 \xf0\x9f\x98\x80\"")));
  EXPECT_TRUE(ok.complete());
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

namespace brass::server {
namespace {

using testing::Seeded;

// Naive JSON Schema check of a parsed value (the subset constraint.h documents),
// written independently of the byte-level validator.
bool naive_valid(const nlohmann::json& v, const nlohmann::json& s) {
  if (s.contains("type")) {
    std::vector<std::string> types;
    if (s["type"].is_array()) for (const auto& t : s["type"]) types.push_back(t);
    else types.push_back(s["type"]);
    bool ok = false;
    for (const auto& t : types) {
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
           (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) || (t == "number" && v.is_number()) ||
           (t == "integer" && v.is_number_integer());
    }
    if (!ok) return false;
  }
  if (v.is_object()) {
    for (const auto& r : s.value("required", nlohmann::json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (const auto& [k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (!naive_valid(x, s["properties"][k])) return false;
      } else if (s.contains("properties") && !(s.contains("additionalProperties") && s["additionalProperties"] == true)) {
        return false;
      }
    }
  }
  if (v.is_array() && s.contains("items")) {
    for (const auto& x : v) {
      if (!naive_valid(x, s["items"])) return false;
    }
  }
  return true;
}

const char* kPersonSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},"score":{"type":"number"},
  "tags":{"type":"array","items":{"type":"string"}},
  "addr":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":["string","null"]}},
          "required":["city"],"additionalProperties":false},
  "ok":{"type":"boolean"}},
  "required":["name","age"],"additionalProperties":false})";

// A random document near the schema: every property value is right or (sometimes) of a
// wrong type; keys in random order; sometimes a required key dropped or an unknown key.
std::string near_doc(std::mt19937_64& rng, const nlohmann::json& schema, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  auto scalar = [&](const std::string& type) -> std::string {
    if (type == "string") { static const char* v[] = {"\"a\"", "\"x y\"", "\"\""}; return v[pick(3)]; }
    if (type == "integer") { static const char* v[] = {"0", "-7", "42"}; return v[pick(3)]; }
    if (type == "number") { static const char* v[] = {"1.5", "-0.25e2", "3"}; return v[pick(3)]; }
    if (type == "boolean") return pick(2) ? "true" : "false";
    return "null";
  };
  static const char* kAnyType[] = {"string", "integer", "number", "boolean", "null"};
  auto value = [&](const nlohmann::json& s) -> std::string {
    if (pick(8) == 0) {  // a wrong (or random) type
      return scalar(kAnyType[pick(5)]);
    }
    const std::string t = s["type"].is_array() ? s["type"][pick(static_cast<int>(s["type"].size()))].get<std::string>()
                                               : s["type"].get<std::string>();
    if (t == "object" && depth < 3) return near_doc(rng, s, depth + 1);
    if (t == "array") {
      std::string out = "[";
      const int n = pick(3);
      for (int i = 0; i < n; ++i) out += (i ? "," : "") + (pick(6) ? scalar(s["items"]["type"]) : scalar(kAnyType[pick(5)]));
      return out + "]";
    }
    return scalar(t);
  };
  std::vector<std::string> keys;
  for (const auto& [k, sub] : schema["properties"].items()) {
    const bool required = std::find(schema["required"].begin(), schema["required"].end(), k) != schema["required"].end();
    if ((required && pick(10) != 0) || (!required && pick(2))) keys.push_back(k);
  }
  if (pick(10) == 0) keys.push_back("extra");
  std::shuffle(keys.begin(), keys.end(), rng);
  std::string out = "{";
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& sub = schema["properties"].contains(keys[i]) ? schema["properties"][keys[i]] : nlohmann::json{{"type", "string"}};
    out += (i ? ", " : "") + std::string("\"") + keys[i] + "\": " + value(sub);
  }
  return out + "}";
}

TEST(JsonSchema, AcceptsExactlyTheSchemaValidDocuments) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  const auto schema = nlohmann::ordered_json::parse(kPersonSchema);
  const auto plain = nlohmann::json::parse(kPersonSchema);
  int n_valid = 0, n_invalid = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string doc = near_doc(s.rng, plain, 0);
    const bool want = naive_valid(nlohmann::json::parse(doc), plain);
    JsonValidator v(true, true, &schema);
    const bool got = v.feed(doc) && v.complete();
    ASSERT_EQ(got, want) << doc;
    (want ? n_valid : n_invalid)++;
  }
  EXPECT_GT(n_valid, 300);
  EXPECT_GT(n_invalid, 300);
}

TEST(JsonSchema, KeysOnceAndRequiredBeforeClose) {
  const auto schema = nlohmann::ordered_json::parse(kPersonSchema);
  JsonValidator v(true, true, &schema);
  EXPECT_TRUE(v.feed(std::string_view("{\"na")));
  EXPECT_FALSE(v.feed('x'));  // no declared key starts with "nax"
  EXPECT_TRUE(v.feed(std::string_view("me\": \"a\"")));
  EXPECT_FALSE(v.feed('}'));  // "age" is required
  EXPECT_TRUE(v.feed(std::string_view(", \"age\": 5")));
  EXPECT_FALSE(v.feed('.'));  // integer
  JsonValidator dup = v;
  EXPECT_FALSE(dup.feed(std::string_view(", \"age\"")));  // each key once
  EXPECT_TRUE(v.feed('}'));
  EXPECT_TRUE(v.complete());
}

}  // namespace
}  // namespace brass::server
