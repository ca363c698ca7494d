// Constrained decoding for the server, through the engine's LogitConstraint hook.
//
// JsonValidator: an incremental JSON syntax checker over bytes (a pushdown automaton):
// feed() accepts a byte only if the bytes so far are still a prefix of some valid JSON
// text; complete() says they already are one. It checks syntax only (RFC 8259 grammar;
// string bytes >= 0x80 are not UTF-8-validated: the Harmony parser turns invalid UTF-8
// into U+FFFD, which keeps the text valid JSON). Nesting is limited to kMaxDepth and runs
// of whitespace to kMaxWhitespace bytes, so a constrained model cannot stall forever
// in whitespace or open brackets.
//
// HarmonyConstraint: one completion's constraint, in phases:
//  1. forced prefix: the completion must start with one of `prefix_options` (token
//     sequences; a token-level trie). Used for tool_choice named/required (the header
//     `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`) and for the
//     test hook `brass_test_force`.
//  2. JSON: from the start of the content of the first final-channel message (response
//     format json_object / json_schema) or right after the prefix (tool arguments), every
//     token whose bytes would make the content invalid JSON is masked; special tokens are
//     masked until the JSON is complete, after which only `json_end_tokens` remain.
// JSON Schema enforced while decoding (when a schema is given; compiled and checked by
// constraint_schema.h, which lists the keywords): every byte that would make the value
// violate the schema is masked as soon as no continuation can fix it:
//  - type (one or a list; integer vs number: an integer is written without '.'/exponent);
//  - object properties: keys limited to the declared names (each at most once) unless
//    additionalProperties is true or a schema (then undeclared keys follow that schema);
//    required (the object cannot close before they appear); min/maxProperties;
//  - array items, minItems/maxItems (the element / ']' is masked);
//  - string minLength/maxLength in Unicode code points (a \uXXXX escape counts once;
//    surrogate escapes \uD800-\uDFFF are masked everywhere: strict parsers reject lone
//    ones, and UTF-8 says the same); pattern through PCRE2 partial matching (for patterns anchored
//    with ^ a string prefix that cannot extend to a match is masked; unanchored ones are
//    checked at the closing quote; under a pattern, \uXXXX escapes and tokens that split
//    a UTF-8 character are masked, so a prefix never dead-ends inside one);
//  - minimum/maximum/exclusiveMinimum/exclusiveMaximum: a digit is masked when no
//    extension of the number can land in range, and the byte that ends the number when
//    it is out of range; numbers under bounds are written without exponent;
//  - enum/const (any JSON values): the value must be written exactly as the canonical
//    compact serialization of one allowed value (no whitespace, the schema's key order,
//    nlohmann's string escapes and number text, UTF-8 as is): every byte is
//    prefix-matched against the still-live literals, so a value that cannot become one
//    is masked at its first wrong byte;
//  - anyOf / oneOf: decoded as the union: each alternative runs as its own thread (its
//    own schema stack) and threads the bytes violate are dropped; oneOf is enforced like
//    anyOf (an output matching two alternatives is not prevented);
//  - allOf: plain object schemas are merged (see constraint_schema.h); otherwise every
//    member must stay live (a conjunction within each thread);
//  - $ref to local definitions, recursion included; nesting is bounded by kMaxDepth, a
//    value's expansion through allOf/anyOf/$ref by kMaxExpand steps and the live threads
//    by kMaxThreads (alternatives beyond are dropped: stricter, never invalid).
// If nothing can continue (e.g. an unsatisfiable schema), apply() returns an error and
// the engine ends that sequence (finish reason error): generation never hangs.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harmony/parser.h"
#include "runtime/engine.h"
#include "server/constraint_schema.h"
#include "tokenizer/tokenizer.h"

namespace brass::server {

class JsonValidator {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespace = 32;
  static constexpr int kMaxThreads = 64;
  static constexpr int kMaxExpand = 256;

  // root_object: the text must be an object. tight: no whitespace before the root value
  // or after it (valid JSON, but a model could pad forever; the constraint uses it).
  // schema: optional compiled JSON Schema (null: syntax only).
  explicit JsonValidator(bool root_object = false, bool tight = false, std::shared_ptr<const CompiledSchema> schema = nullptr);
  // Convenience for tests: compiles `schema` (which must be valid; an invalid one accepts nothing).
  JsonValidator(bool root_object, bool tight, const nlohmann::ordered_json* schema);
  // Accept one byte; false (and no state change) if it cannot continue valid JSON.
  bool feed(uint8_t c);
  bool feed(std::string_view bytes);  // all or nothing
  bool complete() const;
  // True when the text is complete and nothing but whitespace may follow.
  bool done() const { return mode_ == Mode::kDone; }
  size_t n_threads() const { return threads_.size(); }

 private:
  enum class Mode : uint8_t {
    kValue, kObjKeyOrEnd, kObjKey, kColon, kArrValueOrEnd, kCommaOrEnd, kString, kEscape,
    kUnicode, kNumber, kLiteral, kDone,
  };
  // Number sub-states: after '-', after leading '0', in int digits, after '.', in
  // fraction, after 'e', after exponent sign, in exponent digits.
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };
  using Conj = std::vector<int>;  // schema nodes the value must satisfy together
  struct SFrame {
    Conj conj;          // expanded: no pending anyOf
    std::string seen;   // keys read so far, each followed by '\0'
    uint32_t count = 0; // elements / properties so far
  };
  struct Tracker {  // enum/const: the value's bytes so far prefix some literals
    uint32_t depth = 0;  // stack_ size at the value's start
    uint32_t pos = 0;
    const std::vector<std::string>* lits = nullptr;
    std::vector<uint32_t> live;
  };
  struct Rules {  // the scalar being read: combined bounds of its conjunction
    int64_t min_len = 0, max_len = -1;
    std::vector<const SchemaRegex*> patterns;
    NumberBounds bounds;
    bool int_only = false;
  };
  struct Thread {
    std::vector<SFrame> frames;  // parallel to stack_
    Conj next;                   // unexpanded conjunction of the value that starts next
    Rules rules;
    std::vector<Tracker> trackers;
  };

  bool step(uint8_t c);
  bool step_syntax(uint8_t c);
  bool begin_value(uint8_t c);
  bool end_scalar();  // schema checks when a string / number / literal ends
  void end_value();
  bool number_terminal() const { return num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExp; }
  bool check_string_prefix();
  void expand(const Conj& in, std::vector<Conj>* out) const;
  bool start_thread(Thread& t, Conj conj, uint8_t c, std::vector<Thread>* out) const;
  bool key_byte(Thread& t, uint8_t c) const;
  bool key_end(Thread& t) const;
  bool may_add_key(const Thread& t) const;
  bool object_may_close(const Thread& t) const;
  bool trackers_feed(uint8_t c);
  bool trackers_end();
  void decode_byte(uint8_t c);
  template <class F>
  bool each(F f);

  bool root_object_;
  bool tight_;
  std::shared_ptr<const CompiledSchema> schema_;  // null: syntax only
  std::vector<Thread> threads_;
  std::string key_text_;       // the object key being read (schema mode, raw bytes)
  std::string str_;            // the string value being read, decoded (schema mode)
  int64_t str_cp_ = 0;         // its code points
  uint8_t utf8_pending_ = 0;   // continuation bytes still expected
  bool str_dirty_ = false;     // str_ grew since the last pattern check
  uint32_t hex_val_ = 0;       // \uXXXX being read
  uint32_t high_surrogate_ = 0;
  std::string num_text_;       // the number being read (schema mode)
  Mode mode_ = Mode::kValue;
  Num num_ = Num::kInt;
  bool key_ = false;          // the string being read is an object key
  uint8_t hex_left_ = 0;      // kUnicode
  const char* lit_ = nullptr; // kLiteral: remaining bytes of true/false/null
  uint8_t ws_run_ = 0;
  std::string stack_;         // '{' / '[' per open container
};

// Token bytes and first-byte buckets of a vocabulary (built once, shared read-only).
struct TokenTable {
  explicit TokenTable(const tok::Tokenizer& tok);
  int32_t n_vocab = 0;
  std::vector<std::string> bytes;           // (n_vocab); "" for specials / unknown ids
  std::vector<uint8_t> special;             // (n_vocab)
  std::array<std::vector<int32_t>, 256> by_first_byte;
};

struct ConstraintPlan {
  std::vector<std::vector<int32_t>> prefix_options;  // empty: no forced prefix
  enum class JsonWhere { kNone, kAfterPrefix, kFinalChannel };
  JsonWhere json = JsonWhere::kNone;
  bool json_root_object = true;
  std::vector<int32_t> json_end_tokens;  // allowed (only) once the JSON is complete
  std::shared_ptr<const nlohmann::ordered_json> json_schema;  // kFinalChannel: optional schema
  std::vector<std::shared_ptr<const nlohmann::ordered_json>> prefix_schemas;  // kAfterPrefix: per option
  // Where the schemas sit in the request (error paths of create()).
  std::string json_schema_path = "response_format.json_schema.schema";
  std::string prefix_schema_path = "tools[{}].function.parameters";  // {}: the option index
  bool active() const { return !prefix_options.empty() || json != JsonWhere::kNone; }
};

class HarmonyConstraint : public runtime::LogitConstraint {
 public:
  // Compiles the plan's schemas: an invalid one is an error naming its JSON path.
  static Result<std::unique_ptr<HarmonyConstraint>> create(std::shared_ptr<const TokenTable> table,
                                                           const tok::Tokenizer& tok, ConstraintPlan plan);
  Status apply(std::span<const int32_t> generated, std::span<float> logits) override;

  // Exposed for tests: the allowed set for the next token after `generated`
  // (mask[t] = 1 allowed), without touching logits.
  Status allowed(std::span<const int32_t> generated, std::vector<uint8_t>* mask);

 private:
  HarmonyConstraint(std::shared_ptr<const TokenTable> table, harmony::StreamParser parser, ConstraintPlan plan);
  Status advance(std::span<const int32_t> generated);
  void json_mask(std::vector<uint8_t>* mask) const;

  std::shared_ptr<const TokenTable> table_;
  harmony::StreamParser parser_;
  ConstraintPlan plan_;
  size_t fed_ = 0;
  size_t prefix_pos_ = 0;
  std::vector<size_t> live_options_;  // prefix options still matching
  bool prefix_done_ = false;
  bool json_active_ = false;
  bool json_over_ = false;  // the JSON message ended
  JsonValidator json_;
  std::shared_ptr<const CompiledSchema> json_schema_;
  std::vector<std::shared_ptr<const CompiledSchema>> prefix_schemas_;
};

}  // namespace brass::server
