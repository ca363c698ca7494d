// JSON Schema enforcement while decoding (constraint_schema.h + JsonValidator), against an
// independent oracle: a straightforward recursive validator over parsed nlohmann::json
// values written here (std::regex for `pattern`, code points counted by lead bytes,
// $ref through json_pointer, the documented allOf merge of object schemas and the
// closed-by-default objects of constraint.h). Random schemas of every supported kind:
//  - exactness: random near-valid documents (compact text) are accepted by the
//    byte-level validator exactly when the oracle says they are valid;
//  - random walks: bytes chosen at random among the allowed ones always build a
//    document the oracle accepts once complete;
//  - a token-level walk through HarmonyConstraint with the real o200k vocabulary;
//  - hand-picked violating continuations are masked at the first wrong byte;
//  - invalid / unsupported schemas are errors naming the JSON path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <regex>

#include "server/constraint.h"
#include "test_util.h"

namespace brass::server {
namespace {

using testing::o200k;
using testing::Seeded;
using J = nlohmann::json;
using OJ = nlohmann::ordered_json;

// ------------------------------------------------------------------ oracle

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

const J& deref(const J& s, const J& root) {
  const J* cur = &s;
  for (int i = 0; i < 20 && cur->is_object() && cur->contains("$ref") && cur->size() == 1; ++i) {
    cur = &root.at(J::json_pointer((*cur)["$ref"].get<std::string>().substr(1)));
  }
  return *cur;
}

bool object_only(const J& s) {
  for (const auto& [k, v] : s.items()) {
    if (k == "type" && v == "object") continue;
    if (k != "properties" && k != "required" && k != "additionalProperties" && k != "minProperties" && k != "maxProperties") return false;
  }
  return true;
}

// The plain object schemas an allOf member stands for, through $ref and nested allOf
// (documented: both flatten into the merge); false when one of them is not plain.
bool flatten_members(const J& m0, const J& root, std::vector<const J*>& out, int depth) {
  const J& m = deref(m0, root);
  if (depth > 16 || !m.is_object()) return false;
  J own = m;
  own.erase("allOf");
  own.erase("$ref");
  if (!object_only(own)) return false;
  out.push_back(&m);
  if (m.contains("$ref") &&
      !flatten_members(root.at(J::json_pointer(m["$ref"].get<std::string>().substr(1))), root, out, depth + 1))
    return false;
  if (m.contains("allOf")) {
    for (const auto& x : m["allOf"]) {
      if (!flatten_members(x, root, out, depth + 1)) return false;
    }
  }
  return true;
}

bool oracle(const J& v, const J& s, const J& root, int depth = 0);

bool oracle_one(const J& v, const J& s, const J& root, int depth) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    if (!oracle(v, root.at(J::json_pointer(ref.substr(1))), root, depth + 1)) return false;
  }
  if (s.contains("type")) {
    const J types = s["type"].is_array() ? s["type"] : J::array({s["type"]});
    bool ok = false;
    for (const auto& t : types) {
      ok = ok || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
           (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) || (t == "number" && v.is_number()) ||
           (t == "integer" && (v.is_number_integer() || v.is_number_unsigned()));
    }
    if (!ok) return false;
  }
  // enum/const: documented to match the canonical compact text (so 1.0 is not 1).
  if (s.contains("enum")) {
    bool in = false;
    for (const auto& e : s["enum"]) in = in || e.dump() == v.dump();
    if (!in) return false;
  }
  if (s.contains("const") && s["const"].dump() != v.dump()) return false;
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>()) return false;
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript))) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  if (v.is_object()) {
    if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>()) return false;
    if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>()) return false;
    for (const auto& r : s.value("required", J::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    const J ap = s.value("additionalProperties", J());
    const bool closed = ap == false || (s.contains("properties") && ap.is_null());
    for (const auto& [k, x] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (!oracle(x, s["properties"][k], root, depth + 1)) return false;
      } else if (closed) {
        return false;
      } else if (ap.is_object() && !oracle(x, ap, root, depth + 1)) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items")) {
      for (const auto& x : v) {
        if (!oracle(x, s["items"], root, depth + 1)) return false;
      }
    }
  }
  for (const char* k : {"anyOf", "oneOf"}) {  // oneOf as anyOf, as documented
    if (!s.contains(k)) continue;
    bool any = false;
    for (const auto& a : s[k]) any = any || oracle(v, a, root, depth + 1);
    if (!any) return false;
  }
  if (s.contains("allOf")) {
    // Documented: object-only members (through $ref) merge with the node into one object schema.
    J merged = J::object();
    for (const auto& [k, x] : s.items()) {
      if (k == "properties" || k == "required" || k == "additionalProperties" || k == "type") merged[k] = x;
    }
    bool merge = object_only(merged);
    std::vector<const J*> members;
    for (const auto& m : s["allOf"]) merge = merge && flatten_members(m, root, members, 0);
    if (merge) {
      for (const J* mp : members) {
        const J& m = *mp;
        const J props = m.value("properties", J::object());
        for (const auto& [k, x] : props.items()) {
          if (merged["properties"].contains(k)) merged["properties"][k] = J{{"allOf", {merged["properties"][k], x}}};
          else merged["properties"][k] = x;
        }
        for (const auto& r : m.value("required", J::array())) merged["required"].push_back(r);
        if (!merged.contains("additionalProperties") && m.contains("additionalProperties")) merged["additionalProperties"] = m["additionalProperties"];
        if (m.contains("minProperties")) merged["minProperties"] = std::max(merged.value("minProperties", 0), m["minProperties"].get<int>());
        if (m.contains("maxProperties")) merged["maxProperties"] = std::min(merged.value("maxProperties", 1 << 30), m["maxProperties"].get<int>());
      }
      merged["type"] = "object";
      if (!oracle(v, merged, root, depth + 1)) return false;
    } else {
      for (const auto& m : s["allOf"]) {
        if (!oracle(v, m, root, depth + 1)) return false;
      }
    }
  }
  return true;
}

bool oracle(const J& v, const J& s, const J& root, int depth) { return depth < 64 && oracle_one(v, s, root, depth); }

// ------------------------------------------------------------------ random schemas

struct PatternCase {
  const char* pattern;
  std::vector<const char*> samples;  // matching and not
};
const std::vector<PatternCase>& patterns() {
  static const std::vector<PatternCase> p = {
      {"^[a-c]{2,4}$", {"ab", "abca", "a", "abcab", "xy"}},
      {"^(foo|bar)-[0-9]{1,3}$", {"foo-1", "bar-042", "baz-1", "foo-", "foo-1234"}},
      {"^x[0-9]+", {"x1", "x12abc", "y1", "x"}},
      {"ab", {"ab", "zzabzz", "a", "ba"}},
      {"^[A-Z][a-z]*$", {"Hello", "H", "hello", "HeLlo"}},
  };
  return p;
}

const std::vector<OJ>& literal_pool() {
  static const std::vector<OJ> pool = {"a", "bc", "x y", "caf\xc3\xa9", "q\"t", 1, -2, 25, 2.5, true, false, nullptr,
                                       OJ{{"k", 1}, {"m", "v"}}, OJ::array({1, "z"}), OJ::array()};
  return pool;
}

struct Gen {
  std::mt19937_64& rng;
  OJ defs = OJ::object();
  int n_defs = 0;
  int pick(int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); }

  OJ schema(int depth) {
    const int k = depth >= 3 ? pick(6) : pick(12);
    switch (k) {
      case 0: {
        OJ s{{"type", "string"}};
        if (pick(2)) s["minLength"] = pick(3);
        if (pick(2)) s["maxLength"] = s.value("minLength", 0) + pick(5);
        if (pick(3) == 0) s["pattern"] = patterns()[pick(static_cast<int>(patterns().size()))].pattern;
        return s;
      }
      case 1: case 2: {
        OJ s{{"type", k == 1 ? "integer" : "number"}};
        const double half = k == 1 ? 1 : 0.5;
        const int lo = pick(41) - 20;
        if (pick(2)) s[pick(2) ? "minimum" : "exclusiveMinimum"] = lo * half;
        if (pick(2)) s[pick(2) ? "maximum" : "exclusiveMaximum"] = (lo + 1 + pick(40)) * half;
        return s;
      }
      case 3: {
        static const char* t[] = {"boolean", "null"};
        if (pick(3) == 0) return OJ{{"type", OJ::array({"string", "null"})}};
        return OJ{{"type", t[pick(2)]}};
      }
      case 4: {
        OJ e = OJ::array();
        const int n = 1 + pick(4);
        for (int i = 0; i < n; ++i) {
          const OJ& v = literal_pool()[pick(static_cast<int>(literal_pool().size()))];
          if (std::find(e.begin(), e.end(), v) == e.end()) e.push_back(v);
        }
        return OJ{{"enum", e}};
      }
      case 5: return OJ{{"const", literal_pool()[pick(static_cast<int>(literal_pool().size()))]}};
      case 6: case 7: return object(depth);
      case 8: {
        OJ s{{"type", "array"}, {"items", schema(depth + 1)}};
        if (pick(2)) s["minItems"] = pick(3);
        if (pick(2)) s["maxItems"] = s.value("minItems", 0) + pick(4);
        return s;
      }
      case 9: {
        OJ alts = OJ::array();
        const int n = 2 + pick(2);
        for (int i = 0; i < n; ++i) alts.push_back(schema(depth + 1));
        return OJ{{pick(2) ? "anyOf" : "oneOf", alts}};
      }
      case 10: {
        if (pick(2)) {  // object members: merged
          OJ a = object(depth + 1), b = object(depth + 1);
          a.erase("additionalProperties");
          b.erase("additionalProperties");
          return OJ{{"allOf", OJ::array({a, b})}};
        }
        const int lo = pick(21) - 10;  // a general conjunction
        return OJ{{"allOf", OJ::array({OJ{{"type", "integer"}, {"minimum", lo}}, OJ{{"maximum", lo + pick(30)}}})}};
      }
      default: {
        const std::string name = "D" + std::to_string(n_defs++);
        defs[name] = schema(depth + 1);
        return OJ{{"$ref", "#/$defs/" + name}};
      }
    }
  }

  OJ object(int depth) {
    static const char* kNames[] = {"a", "b", "c", "dd"};
    OJ s{{"type", "object"}, {"properties", OJ::object()}, {"required", OJ::array()}};
    const int n = 1 + pick(3);
    for (int i = 0; i < n; ++i) {
      const char* name = kNames[pick(4)];
      if (s["properties"].contains(name)) continue;
      s["properties"][name] = schema(depth + 1);
      if (pick(2)) s["required"].push_back(name);
    }
    const int ap = pick(4);
    if (ap == 0) s["additionalProperties"] = false;
    if (ap == 1) s["additionalProperties"] = true;
    if (pick(5) == 0) s["maxProperties"] = static_cast<int>(s["required"].size()) + pick(2);
    if (pick(5) == 0) s["minProperties"] = pick(2);
    return s;
  }

  OJ root() {
    OJ s = schema(0);
    if (!defs.empty()) {
      if (s.contains("$ref")) s = OJ{{"allOf", OJ::array({s})}};
      s["$defs"] = defs;
    }
    return s;
  }

  // A value near the schema: mostly valid, sometimes off.
  OJ doc(const OJ& s0, const OJ& root, int depth) {
    if (pick(12) == 0 || depth > 8) return literal_pool()[pick(static_cast<int>(literal_pool().size()))];
    const OJ* sp = &s0;
    for (int i = 0; i < 10 && sp->contains("$ref"); ++i) sp = &root.at(OJ::json_pointer((*sp)["$ref"].get<std::string>().substr(1)));
    const OJ& s = *sp;
    if (s.contains("anyOf")) return doc(s["anyOf"][pick(static_cast<int>(s["anyOf"].size()))], root, depth + 1);
    if (s.contains("oneOf")) return doc(s["oneOf"][pick(static_cast<int>(s["oneOf"].size()))], root, depth + 1);
    if (s.contains("allOf")) {
      OJ merged = OJ::object();
      for (const auto& m : s["allOf"]) merged.update(m.contains("$ref") ? root.at(OJ::json_pointer(m["$ref"].get<std::string>().substr(1))) : m);
      if (s["allOf"].size() == 2 && s["allOf"][0].contains("properties") && s["allOf"][1].contains("properties")) {
        merged["properties"] = s["allOf"][0]["properties"];
        merged["properties"].update(s["allOf"][1]["properties"]);
      }
      return doc(merged, root, depth + 1);
    }
    if (s.contains("enum")) return s["enum"][pick(static_cast<int>(s["enum"].size()))];
    if (s.contains("const")) return s["const"];
    std::string type = "any";
    if (s.contains("type")) type = s["type"].is_array() ? s["type"][pick(2)].get<std::string>() : s["type"].get<std::string>();
    if (type == "string") {
      if (s.contains("pattern") && pick(4)) {
        for (const auto& p : patterns()) {
          if (p.pattern == s["pattern"]) return p.samples[pick(static_cast<int>(p.samples.size()))];
        }
      }
      static const char* kChars[] = {"a", "b", "c", "z", " ", "\xc3\xa9", "\xf0\x9f\x98\x80", "\"", "\\", "\n"};
      const int n = pick(7);
      std::string out;
      for (int i = 0; i < n; ++i) out += kChars[pick(10)];
      return out;
    }
    if (type == "integer") return pick(61) - 30;
    if (type == "number") return pick(2) ? OJ(pick(61) - 30) : OJ((pick(121) - 60) * 0.25);
    if (type == "boolean") return pick(2) == 1;
    if (type == "null") return nullptr;
    if (type == "array") {
      OJ a = OJ::array();
      const int n = pick(5);
      for (int i = 0; i < n; ++i) a.push_back(s.contains("items") ? doc(s["items"], root, depth + 1) : OJ(i));
      return a;
    }
    if (type == "object") {
      OJ o = OJ::object();
      const OJ props = s.value("properties", OJ::object());
      for (const auto& [k, sub] : props.items()) {
        if (pick(3)) o[k] = doc(sub, root, depth + 1);
      }
      if (pick(8) == 0) o["zz"] = 1;
      return o;
    }
    return literal_pool()[pick(static_cast<int>(literal_pool().size()))];
  }
};

bool accepts(const OJ& schema, const std::string& text) {
  JsonValidator v(false, true, &schema);
  return v.feed(text) && v.complete();
}

TEST(SchemaKeywords, AcceptsExactlyTheOracleValidDocuments) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  int n_valid = 0, n_invalid = 0;
  for (int iter = 0; iter < 400; ++iter) {
    Gen g{s.rng};
    const OJ schema = g.root();
    ASSERT_FALSE(check_json_schema(schema, "schema")) << schema.dump();
    const J plain = J::parse(schema.dump());
    for (int d = 0; d < 25; ++d) {
      const std::string text = g.doc(schema, schema, 0).dump();
      const bool want = oracle(J::parse(text), plain, plain);
      ASSERT_EQ(accepts(schema, text), want) << "schema " << schema.dump() << "\ndoc " << text;
      (want ? n_valid : n_invalid)++;
    }
  }
  EXPECT_GT(n_valid, 1000);
  EXPECT_GT(n_invalid, 1000);
}

// Random walk over allowed bytes (printable ASCII + a few UTF-8 characters).
TEST(SchemaKeywords, RandomWalksBuildValidDocuments) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  std::vector<std::string> alphabet;
  for (int c = 0x20; c < 0x7f; ++c) alphabet.emplace_back(1, static_cast<char>(c));
  alphabet.push_back("\xc3\xa9");
  alphabet.push_back("\n");
  int n_complete = 0;
  for (int iter = 0; iter < 300; ++iter) {
    Gen g{s.rng};
    const OJ schema = g.root();
    const J plain = J::parse(schema.dump());
    JsonValidator v(false, true, &schema);
    std::string text;
    for (int step = 0; step < 300 && !v.done(); ++step) {
      std::vector<std::string> ok;
      for (const auto& a : alphabet) {
        JsonValidator t = v;
        if (t.feed(a)) ok.push_back(a);
      }
      if (ok.empty()) break;  // an unsatisfiable corner (e.g. an empty enum ∩ type)
      // Late in the walk, prefer bytes that close things so most walks complete.
      std::string pick = ok[g.pick(static_cast<int>(ok.size()))];
      if (step > 20 && g.pick(3)) {
        for (const char* c : {"\"", "]", "}", "0", "1", "t", "n"}) {
          if (std::find(ok.begin(), ok.end(), c) != ok.end()) { pick = c; break; }
        }
      }
      ASSERT_TRUE(v.feed(pick));
      text += pick;
      if (v.complete() && step > 10 && g.pick(4) == 0) break;  // a finished bare number
    }
    if (!v.complete()) continue;
    // The oracle's parser reads integers beyond 64 bits as doubles ("not an integer").
    if (std::regex_search(text, std::regex("[0-9]{19}"))) continue;
    ++n_complete;
    J parsed;
    try {
      parsed = J::parse(text);
    } catch (const J::out_of_range&) {
      continue;  // valid JSON, but a number beyond double range (no schema bound on it)
    } catch (const J::exception& e) {
      FAIL() << e.what() << ": " << text;
    }
    EXPECT_TRUE(oracle(parsed, plain, plain)) << "schema " << schema.dump() << "\nwalk " << text;
  }
  EXPECT_GT(n_complete, 150);
}

// Specific violating continuations are masked at the first byte that cannot lead to a
// valid document (each case: schema, accepted prefix, rejected next bytes).
TEST(SchemaKeywords, ViolationsMaskedEarly) {
  struct Case {
    const char* schema;
    const char* prefix;
    std::vector<const char*> bad;
    std::vector<const char*> good;
  };
  const Case cases[] = {
      {R"({"enum":["red","green",3,[1,2],{"a":null}]})", "\"gr", {"a", "\"", "E"}, {"een\""}},
      {R"({"enum":["red","green",3,[1,2],{"a":null}]})", "", {"4", "t", "{\"b"}, {"3", "[1,2]", "{\"a\":null}"}},
      {R"({"enum":["red","green",3,[1,2],{"a":null}]})", "[1,", {"3", " 2"}, {"2]"}},
      {R"({"const":{"x":[true]}})", "{\"x\":[", {"f", "]"}, {"true]}"}},
      {R"({"type":"string","maxLength":3})", "\"a\\u00e9", {"bc", "\\n\\n"}, {"b\""}},
      {R"({"type":"string","minLength":2})", "\"\xf0\x9f\x98\x80", {"\""}, {"x\""}},
      {R"({"type":"string","pattern":"^[a-c]{2,4}$"})", "\"ab", {"d", "\"cc", "cab"}, {"ca\""}},
      {R"({"type":"integer","minimum":10,"maximum":25})", "", {"-", "3", "0"}, {"1", "2"}},
      {R"({"type":"integer","minimum":10,"maximum":25})", "2", {"6", "."}, {"5"}},
      {R"({"type":"number","exclusiveMaximum":1.5})", "1.", {"5", "6", "e"}, {"49"}},
      {R"({"type":"number","minimum":-1})", "-1", {"0", ".5"}, {".0"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})", "[", {"]", "\"", "1.5"}, {"1,2]"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})", "[1,2", {",", ", 3"}, {"]"}},
      {R"({"type":"object","properties":{"a":{},"b":{}},"additionalProperties":true,"maxProperties":1})", "{\"a\":1",
       {",", ", \"c\""}, {"}"}},
      {R"({"anyOf":[{"type":"integer","maximum":3},{"type":"string","maxLength":1}]})", "", {"4", "t"}, {"3", "\"x\""}},
      {R"({"anyOf":[{"type":"integer","maximum":3},{"type":"string","maxLength":1}]})", "\"x", {"y"}, {"\""}},
      {R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"v":{"type":"integer"}},"required":["k","v"]},
                    {"type":"object","properties":{"k":{"const":"b"},"w":{"type":"string"}},"required":["k","w"]}]})",
       "{\"k\":\"a\",", {"\"w", "\"k"}, {"\"v\":1}"}},
      {R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}}}]})",
       "{\"b\":\"x\"", {"}"}, {",\"a\":1}"}},
      {R"({"allOf":[{"type":"integer","minimum":0},{"maximum":9}]})", "", {"-1", "10", "1.", "\"", "-0."}, {"7", "0", "9", "-0"}},
      {R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#/$defs/n"}},
          "required":["v"]}},"$ref":"#/$defs/n"})", "{\"next\":{\"next\":{", {"}", "\"w", "\"v\":1}}"}, {"\"v\":1},\"v\":2},\"v\":3}", "\"v\":1,\"next\":{\"v\":0}}"}},
      {R"({"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#"}}},"additionalProperties":false})",
       "{\"kids\":[{\"kids\":[", {"1", "{\"a"}, {"]}]}", "{}]}]}"}},
  };
  for (const auto& c : cases) {
    const OJ schema = OJ::parse(c.schema);
    JsonValidator v(false, true, &schema);
    ASSERT_TRUE(v.feed(std::string_view(c.prefix))) << c.schema << " prefix " << c.prefix;
    for (const char* b : c.bad) {
      JsonValidator t = v;
      EXPECT_FALSE(t.feed(std::string_view(b))) << c.schema << " prefix " << c.prefix << " accepted " << b;
    }
    for (const char* g : c.good) {
      JsonValidator t = v;
      EXPECT_TRUE(t.feed(std::string_view(g))) << c.schema << " prefix " << c.prefix << " rejected " << g;
    }
  }
}

TEST(SchemaKeywords, InvalidSchemasNameThePath) {
  struct Case {
    const char* schema;
    const char* path;
  };
  const Case cases[] = {
      {R"({"type":"strin"})", "s.type"},
      {R"({"properties":{"a":{"type":["string",3]}}})", "s.properties.a.type"},
      {R"({"properties":{"a":{"$ref":"#/$defs/missing"}}})", "s.properties.a.$ref"},
      {R"({"anyOf":[{"type":"string"},{"multipleOf":2}]})", "s.anyOf[1].multipleOf"},
      {R"({"items":{"uniqueItems":true}})", "s.items.uniqueItems"},
      {R"({"properties":{"a":5}})", "s.properties.a"},
      {R"({"type":"string","pattern":"(unclosed"})", "s.pattern"},
      {R"({"type":"string","minLength":-1})", "s.minLength"},
      {R"({"enum":[]})", "s.enum"},
      {R"({"$defs":{"x":{"not":{}}}})", "s.$defs.x.not"},
      {R"({"$ref":"http://example.com/s"})", "s.$ref"},
  };
  for (const auto& c : cases) {
    const auto e = check_json_schema(OJ::parse(c.schema), "s");
    ASSERT_TRUE(e.has_value()) << c.schema;
    EXPECT_EQ(e->path, c.path) << c.schema << ": " << e->message;
    EXPECT_FALSE(e->message.empty());
  }
  // HarmonyConstraint::create reports it too.
  ConstraintPlan plan;
  plan.json = ConstraintPlan::JsonWhere::kFinalChannel;
  plan.json_schema = std::make_shared<const OJ>(OJ::parse(R"({"type":"objekt"})"));
  auto table = std::make_shared<const TokenTable>(o200k());
  auto c = HarmonyConstraint::create(table, o200k(), plan);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("response_format.json_schema.schema.type"), std::string::npos) << c.status().message();
}

// Token-level: the real vocabulary under a schema mixing the new keywords; the content
// is always a valid prefix, completes, and validates; an unsatisfiable schema ends with
// an error from apply() instead of hanging.
TEST(SchemaKeywords, TokenWalkThroughHarmonyConstraint) {
  Seeded s;
  SCOPED_TRACE(s.trace());
  const tok::Tokenizer& tk = o200k();
  auto table = std::make_shared<const TokenTable>(tk);
  const int32_t ret = *tk.special("<|return|>");
  const char* kSchema = R"({"type":"object","additionalProperties":false,
    "properties":{"color":{"enum":["red","dark blue",7]},"n":{"type":"integer","minimum":-5,"maximum":120},
      "tag":{"type":"string","pattern":"^[a-z]{1,6}-[0-9]$"},"alt":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/pt"}]},
      "list":{"type":"array","items":{"type":"string","maxLength":4},"minItems":1,"maxItems":3}},
    "required":["color","n","tag","alt","list"],
    "$defs":{"pt":{"type":"object","properties":{"x":{"type":"number","exclusiveMinimum":0}},"required":["x"]}}})";
  ConstraintPlan plan;
  plan.json = ConstraintPlan::JsonWhere::kFinalChannel;
  plan.json_end_tokens = {ret};
  plan.json_schema = std::make_shared<const OJ>(OJ::parse(kSchema));
  const J plain = J::parse(kSchema);
  int n_complete = 0;
  for (int walk = 0; walk < 4; ++walk) {
    auto c = HarmonyConstraint::create(table, tk, plan);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    std::vector<int32_t> gen = tk.encode("<|channel|>final<|message|>", true);
    std::vector<uint8_t> mask;
    std::string content;
    for (int step = 0; step < 200; ++step) {
      ASSERT_TRUE((*c)->allowed(gen, &mask).is_ok());
      // (Picks are ASCII tokens: the constraint does not validate UTF-8 by design, the oracle's parser does.)
      std::vector<int32_t> ok_ids;
      for (int32_t t = 0; t < static_cast<int32_t>(mask.size()); ++t) {
        const auto b = tk.token_bytes(t);
        if (mask[t] && (t == ret || (!b.empty() && std::all_of(b.begin(), b.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; })))) {
          ok_ids.push_back(t);
        }
      }
      ASSERT_FALSE(ok_ids.empty()) << J(content).dump(-1, ' ', false, J::error_handler_t::replace);
      if (mask[ret]) {
        ++n_complete;
        J v;
        ASSERT_NO_THROW(v = J::parse(content)) << content;
        EXPECT_TRUE(oracle(v, plain, plain)) << content;
        break;
      }
      int32_t pick = ok_ids[s.rng() % ok_ids.size()];
      if (step > 15 && s.rng() % 3) {  // favour short tokens that close things
        for (int32_t t : ok_ids) {
          const auto b = tk.token_bytes(t);
          if (b == "\"" || b == "]" || b == "}" || b == "null" || b == "1") { pick = t; break; }
        }
      }
      gen.push_back(pick);
      content += std::string(tk.token_bytes(pick));
    }
  }
  EXPECT_GE(n_complete, 2);
  // Unsatisfiable: nothing is allowed, apply() errors (the engine ends the sequence).
  plan.json_schema = std::make_shared<const OJ>(OJ::parse(R"({"type":"string","minLength":3,"maxLength":1})"));
  plan.json_root_object = false;
  auto c = HarmonyConstraint::create(table, tk, plan);
  ASSERT_TRUE(c.is_ok());
  std::vector<int32_t> gen = tk.encode("<|channel|>final<|message|>\"x", true);
  std::vector<float> logits(static_cast<size_t>(tk.n_vocab()), 0.f);
  EXPECT_FALSE((*c)->apply(gen, logits).is_ok());
}

}  // namespace
}  // namespace brass::server
