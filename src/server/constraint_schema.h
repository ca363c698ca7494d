// JSON Schema compilation for constrained decoding (used by constraint.h's JsonValidator).
//
// CompiledSchema turns a request's JSON Schema into a graph of SchemaNodes, checking it at
// request time: an unsupported keyword, a malformed value, an unknown type name, a bad
// pattern or an unresolvable $ref gives a SchemaError naming the JSON path of the
// offending keyword (e.g. `response_format.json_schema.schema.properties.age.minimum`).
// Supported keywords: type, enum, const, properties, required, additionalProperties,
// items (a schema), minItems, maxItems, minLength, maxLength, pattern, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (number, or the draft-4 boolean), minProperties,
// maxProperties, anyOf, oneOf, allOf, $ref (local: "#", "#/$defs/X", "#/definitions/X",
// any "#/json/pointer"), $defs, definitions, uniqueItems: false. Ignored annotations:
// title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
// writeOnly, nullable, and x-* extensions. Everything else is rejected (uniqueItems: true,
// multipleOf, format, not, if/then/else, prefixItems, patternProperties, ...).
//
// allOf: when the node and all its members (through $ref and nested allOf, flattened)
// are plain object schemas (only type object / properties / required /
// additionalProperties / min/maxProperties), they are merged into one object schema
// (properties and required united; a property declared twice must satisfy both).
// Otherwise the members are kept as a conjunction the validator enforces together.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace brass::server {

struct SchemaError {
  std::string path;     // JSON path of the offending keyword
  std::string message;  // what was expected vs found
};

// A PCRE2 regex (UTF mode) for `pattern`. JSON Schema patterns are unanchored searches.
class SchemaRegex {
 public:
  static std::shared_ptr<const SchemaRegex> compile(const std::string& pattern, std::string* error);
  ~SchemaRegex();
  SchemaRegex(const SchemaRegex&) = delete;
  SchemaRegex& operator=(const SchemaRegex&) = delete;
  // The whole string (valid UTF-8) contains a match.
  bool matches(std::string_view s) const;
  // Some extension of `prefix` can still match (partial matching, PCRE2_PARTIAL_HARD).
  // Patterns not anchored at the start can always still match (a later match may be
  // appended), so only anchored ones are checked. A prefix ending inside a UTF-8
  // character is rejected (whether the character fits depends on its last bytes; a token
  // that splits a character is masked in such strings, so the model never gets stuck on
  // one); invalid UTF-8 cannot match.
  bool may_match(std::string_view prefix) const;

 private:
  SchemaRegex() = default;
  void* code_ = nullptr;  // pcre2_code_8*
  bool anchored_ = false;
};

struct SchemaNode {
  enum : uint8_t { kNull = 1, kBool = 2, kObject = 4, kArray = 8, kString = 16, kInteger = 32, kNumber = 64, kAll = 127 };
  static constexpr int kAny = -1;     // additionalProperties true / no items schema
  static constexpr int kFalse = -2;   // additionalProperties false
  static constexpr int kAbsent = -3;  // additionalProperties not given

  uint8_t types = kAll;         // allowed JSON types (kNumber admits integers too)
  std::vector<int> all_of;      // conjuncts ($ref target, allOf members not merged, oneOf/anyOf beside anyOf)
  std::vector<int> any_of;      // one of these (anyOf, or oneOf enforced as anyOf); empty: none
  bool has_literals = false;    // enum / const given
  std::vector<nlohmann::json> literal_values;  // allowed values (enum ∩ const)
  std::vector<std::string> literals;           // their canonical compact serializations
  // string
  int64_t min_length = 0, max_length = -1;  // Unicode code points; -1: none
  std::shared_ptr<const SchemaRegex> pattern;
  // number
  bool has_min = false, has_max = false, min_exclusive = false, max_exclusive = false;
  double minimum = 0, maximum = 0;
  // object
  bool has_properties = false;
  std::vector<std::pair<std::string, int>> properties;
  std::vector<std::string> required;
  int additional = kAbsent;
  int64_t min_properties = 0, max_properties = -1;
  // array
  int items = kAny;
  int64_t min_items = 0, max_items = -1;

  // Keys limited to the declared names: properties given and additionalProperties absent
  // or false (the strict OpenAI form), or additionalProperties false alone.
  bool closed() const { return additional == kFalse || (has_properties && additional == kAbsent); }
  int property(std::string_view name) const {
    for (const auto& [k, v] : properties) {
      if (k == name) return v;
    }
    return kAbsent;
  }
};

class CompiledSchema {
 public:
  // path: where the schema sits in the request (the prefix of error paths).
  static Result<std::shared_ptr<const CompiledSchema>> compile(const nlohmann::ordered_json& schema, const std::string& path,
                                                               SchemaError* error = nullptr);
  const SchemaNode& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  size_t size() const { return nodes_.size(); }
  static constexpr int kRoot = 0;

 private:
  friend class SchemaCompiler;
  std::vector<SchemaNode> nodes_;
};

// Request-time check for the server: nullopt when the schema compiles.
std::optional<SchemaError> check_json_schema(const nlohmann::ordered_json& schema, const std::string& path);

// Can a JSON number whose text so far is `text` (a syntactically valid prefix without an
// exponent, not yet complete or complete) still be extended to (or be) a value within the
// bounds? Infinite bounds are given as +-HUGE_VAL. int_only: only integer texts follow.
struct NumberBounds {
  double lo = -HUGE_VAL, hi = HUGE_VAL;
  bool lo_exclusive = false, hi_exclusive = false;
  bool any() const { return lo != -HUGE_VAL || hi != HUGE_VAL; }
  bool contains(double v) const {
    return (lo_exclusive ? v > lo : v >= lo) && (hi_exclusive ? v < hi : v <= hi);
  }
};
bool number_may_fit(std::string_view text, bool int_only, const NumberBounds& b);

}  // namespace brass::server
