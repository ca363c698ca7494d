// JSON Schema -> TypeScript: one test per case harmony's json_schema_to_typescript
// handles. Expected strings are written by hand from harmony's rules (and, for the
// kitchensink shapes, cross-checked by the golden test_render_functions_with_parameters).
#include <gtest/gtest.h>

#include "harmony/schema_ts.h"

namespace brass::harmony {
namespace {

std::string ts(const char* schema_json, const char* indent = "") {
  return json_schema_to_typescript(Json::parse(schema_json), indent);
}

TEST(SchemaTs, Primitives) {
  EXPECT_EQ(ts(R"({"type": "string"})"), "string");
  EXPECT_EQ(ts(R"({"type": "number"})"), "number");
  EXPECT_EQ(ts(R"({"type": "integer"})"), "number");
  EXPECT_EQ(ts(R"({"type": "boolean"})"), "boolean");
  EXPECT_EQ(ts(R"({"type": "null"})"), "any");
  EXPECT_EQ(ts(R"({"type": 7})"), "any");
  EXPECT_EQ(ts(R"({})"), "any");
  EXPECT_EQ(ts("true"), "any");
  EXPECT_EQ(ts("[1, 2]"), "any");
  EXPECT_EQ(ts(R"({"anyOf": [{"type": "string"}, {"type": "number"}]})"), "any");
  EXPECT_EQ(ts(R"({"allOf": [{"type": "string"}]})"), "any");
}

TEST(SchemaTs, EnumsAreUnionsOfLiterals) {
  EXPECT_EQ(ts(R"({"type": "string", "enum": ["a", "b c", "d"]})"), R"("a" | "b c" | "d")");
  EXPECT_EQ(ts(R"({"type": "string", "enum": ["x", 3, null, "y"]})"), R"("x" | "y")");
  EXPECT_EQ(ts(R"({"type": "string", "enum": []})"), "string");
  EXPECT_EQ(ts(R"({"type": "string", "enum": [1, 2]})"), "string");
  // Only string enums are unions; a numeric enum is just its type.
  EXPECT_EQ(ts(R"({"type": "integer", "enum": [1, 2]})"), "number");
}

TEST(SchemaTs, ArraysAndTypeLists) {
  EXPECT_EQ(ts(R"({"type": "array", "items": {"type": "string"}})"), "string[]");
  EXPECT_EQ(ts(R"({"type": "array", "items": {"type": "array", "items": {"type": "integer"}}})"),
            "number[][]");
  EXPECT_EQ(ts(R"({"type": "array"})"), "Array<any>");
  EXPECT_EQ(ts(R"({"type": "array", "items": {"type": "string", "enum": ["p", "q"]}})"),
            R"("p" | "q"[])");  // harmony does not parenthesise
  EXPECT_EQ(ts(R"({"type": ["integer", "string"]})"), "number | string");
  EXPECT_EQ(ts(R"({"type": ["string", 5, "null"]})"), "string | null");
  EXPECT_EQ(ts(R"({"type": []})"), "any");
}

TEST(SchemaTs, ObjectRequiredOptionalAndComments) {
  EXPECT_EQ(ts(R"({"type": "object"})"), "{\n}");
  EXPECT_EQ(ts(R"({"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "number"}},
                   "required": ["a", 17]})"),
            "{\nb?: string,\na: number,\n}");
  EXPECT_EQ(ts(R"({"type": "object", "description": "top", "properties": {}})", "  "),
            "  // top\n{\n  }");
  EXPECT_EQ(ts(R"({"type": "object", "properties": {
                     "s": {"type": "string", "title": "T", "description": "D",
                           "examples": ["e1", 2, "e2"]},
                     "n": {"type": "number", "examples": []}}})"),
            "{\n// T\n//\n// D\n// Examples:\n// - \"e1\"\n// - \"e2\"\ns?: string,\nn?: number,\n}");
}

TEST(SchemaTs, NestedObjectsIndentByFour) {
  EXPECT_EQ(ts(R"({"type": "object", "properties": {
                     "outer": {"type": "object", "description": "inner obj",
                               "properties": {"x": {"type": "integer", "description": "an x"}},
                               "required": ["x"]}},
                   "required": ["outer"]})"),
            "{\n// inner obj\nouter:     // inner obj\n{\n    // an x\n    x: number,\n    },\n}");
  // The description appears twice: as the property comment above the name, and as the
  // nested object's own comment (at the nested indent) before its brace.
}

TEST(SchemaTs, Nullable) {
  EXPECT_EQ(ts(R"({"type": "object", "properties": {
                     "a": {"type": "string", "nullable": true},
                     "b": {"type": ["string", "null"], "nullable": true},
                     "c": {"type": "number", "nullable": false},
                     "d": {"type": "number", "nullable": "yes"}}})"),
            "{\na?: string | null,\nb?: string | null,\nc?: number,\nd?: number,\n}");
}

TEST(SchemaTs, Defaults) {
  EXPECT_EQ(ts(R"({"type": "object", "properties": {
                     "i": {"type": "integer", "default": 10},
                     "f": {"type": "number", "default": 0.5},
                     "g": {"type": "number", "default": 2.0},
                     "b": {"type": "boolean", "default": false},
                     "s": {"type": "string", "default": "hi \"there\""},
                     "e": {"type": "string", "enum": ["x", "y"], "default": "y"},
                     "o": {"type": "object", "default": {"k": [1, "v", null]}},
                     "z": {"type": "string", "default": null}}})"),
            "{\n"
            "i?: number, // default: 10\n"
            "f?: number, // default: 0.5\n"
            "g?: number, // default: 2.0\n"
            "b?: boolean, // default: false\n"
            "s?: string, // default: \"hi \"there\"\"\n"
            "e?: \"x\" | \"y\", // default: y\n"
            "o?: {\n    }, // default: {\"k\":[1,\"v\",null]}\n"
            "z?: string, // default: null\n"
            "}");
}

TEST(SchemaTs, PropertyOneOf) {
  // Property description above (once), default above, variants with their own comments.
  EXPECT_EQ(ts(R"({"type": "object", "properties": {
                     "v": {"oneOf": [{"type": "string", "description": "as text"},
                                     {"type": "integer", "description": "as id", "default": 3},
                                     {"type": "string", "enum": ["a"], "default": "a",
                                      "nullable": true}],
                           "description": "the value", "default": "dflt"}},
                   "required": ["v"]})"),
            "{\n// the value\n// default: \"dflt\"\nv:\n"
            " | string\n"  // first variant's own description suppressed: property desc is above
            " | number // as id default: 3\n"
            " | \"a\" | null // default: a\n"
            ",\n}");
  // When the first variant repeats the property description it is printed once, after it.
  EXPECT_EQ(ts(R"({"type": "object", "properties": {
                     "w": {"oneOf": [{"type": "string", "description": "same"},
                                     {"type": "boolean", "description": "same"}],
                           "description": "same"}}})"),
            "{\nw?:\n | string\n | boolean\n,\n}");
  // An enum-typed property default prints bare.
  EXPECT_EQ(ts(R"({"type": "object", "properties": {
                     "k": {"oneOf": [{"type": "string"}], "enum": ["p"], "default": "p",
                           "title": "K"}}})"),
            "{\n// K\n//\n// default: p\nk?:\n | string\n,\n}");
  // A non-array oneOf: no description comment, no default, type any.
  EXPECT_EQ(ts(R"({"type": "object", "properties": {
                     "q": {"oneOf": {"type": "string"}, "description": "d", "default": 1}}})"),
            "{\nq?: any,\n}");
}

TEST(SchemaTs, TopLevelOneOf) {
  EXPECT_EQ(ts(R"({"oneOf": [{"type": "string"},
                             {"type": "number", "description": "n", "default": 3},
                             {"type": "string", "enum": ["u"], "default": "u"},
                             {"type": "boolean", "nullable": true, "default": "t"}]})", "  "),
            "\n   | string\n   | number // n default: 3\n   | \"u\" // default: \"u\""
            "\n   | boolean | null // default: \"t\"");
  // Nested objects inside a union indent by three more spaces.
  EXPECT_EQ(ts(R"({"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}}]})"),
            "\n | {\n   a?: string,\n   }");
}

TEST(SchemaTs, DeepNestingIsBounded) {
  Json schema = {{"type", "string"}};
  for (int i = 0; i < 1000; ++i) schema = Json{{"type", "array"}, {"items", schema}};
  std::string out = json_schema_to_typescript(schema);
  // kMaxSchemaDepth levels of [] then "any" for the rest.
  std::string expected = "any";
  for (int i = 0; i <= kMaxSchemaDepth; ++i) expected += "[]";
  EXPECT_EQ(out, expected);
}

TEST(SchemaTs, JsonCompactMatchesSerdeJson) {
  auto c = [](const char* j) { return json_compact(Json::parse(j)); };
  EXPECT_EQ(c("10"), "10");
  EXPECT_EQ(c("-3"), "-3");
  EXPECT_EQ(c("18446744073709551615"), "18446744073709551615");
  EXPECT_EQ(c("1.0"), "1.0");
  EXPECT_EQ(c("-2.5"), "-2.5");
  EXPECT_EQ(c("0.1"), "0.1");
  EXPECT_EQ(c("0.0"), "0.0");
  EXPECT_EQ(c("-0.0"), "-0.0");
  EXPECT_EQ(c("1e15"), "1000000000000000.0");
  EXPECT_EQ(c("1e16"), "1e16");
  EXPECT_EQ(c("1.5e300"), "1.5e300");
  EXPECT_EQ(c("123456789012345680000.0"), "1.2345678901234568e20");
  EXPECT_EQ(c("0.0001"), "0.0001");
  EXPECT_EQ(c("0.00001"), "0.00001");
  EXPECT_EQ(c("0.000001"), "1e-6");
  EXPECT_EQ(c("2.5e-7"), "2.5e-7");
  EXPECT_EQ(c("123.456"), "123.456");
  EXPECT_EQ(c(R"({"a": [true, null, "x\ny\u0001\"\\"], "b": {}})"),
            R"({"a":[true,null,"x\ny\u0001\"\\"],"b":{}})");
  EXPECT_EQ(c(R"("caf\u00e9")"), "\"caf\xC3\xA9\"");
}

TEST(SchemaTs, RustLines) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(rust_lines(""), V{});
  EXPECT_EQ(rust_lines("a"), V{"a"});
  EXPECT_EQ(rust_lines("a\n"), V{"a"});
  EXPECT_EQ(rust_lines("a\n\nb"), (V{"a", "", "b"}));
  EXPECT_EQ(rust_lines("a\r\nb\r"), (V{"a", "b\r"}));
  EXPECT_EQ(rust_lines("\n"), V{""});
  EXPECT_EQ(rust_lines("x\n\n"), (V{"x", ""}));
}

TEST(SchemaTs, ToolsSection) {
  ToolNamespaces ns;
  ns["zeta"] = ToolNamespaceConfig{"zeta", std::string("Plain text.\nSecond line."), {}};
  ns["alpha"] = ToolNamespaceConfig{
      "alpha",
      std::string("About alpha."),
      {ToolDescription{"noargs", "Does it.\nTwice.", std::nullopt},
       ToolDescription{"args", "", Json::parse(R"({"type": "object",
                                                  "properties": {"n": {"type": "integer"}}})")}}};
  EXPECT_EQ(render_tools_section(ns),
            "# Tools\n\n"
            "## alpha\n\n// About alpha.\nnamespace alpha {\n\n"
            "// Does it.\n// Twice.\ntype noargs = () => any;\n\n"
            "type args = (_: {\nn?: number,\n}) => any;\n\n"
            "} // namespace alpha\n\n"
            "## zeta\n\nPlain text.\nSecond line.");
}

}  // namespace
}  // namespace brass::harmony
