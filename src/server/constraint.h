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
// JSON Schema subset enforced while decoding (when a schema is given): `type` (one or a
// list; integer vs number), object `properties` (keys limited to the declared names, each
// at most once, unless additionalProperties is true), `required` (the object cannot close
// before they appear), `additionalProperties` as a schema, array `items`. Not enforced:
// enum/const, string formats/patterns/lengths, numeric ranges, anyOf/oneOf/allOf/$ref
// (such subschemas accept any JSON value), minItems/maxItems.
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
#include "tokenizer/tokenizer.h"

namespace brass::server {

class JsonValidator {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespace = 32;

  // root_object: the text must be an object. tight: no whitespace before the root value
  // or after it (valid JSON, but a model could pad forever; the constraint uses it).
  // schema: optional JSON Schema (must outlive the validator and its copies).
  explicit JsonValidator(bool root_object = false, bool tight = false, const nlohmann::ordered_json* schema = nullptr)
      : root_object_(root_object), tight_(tight), schema_(schema), value_schema_(schema) {}
  // Accept one byte; false (and no state change) if it cannot continue valid JSON.
  bool feed(uint8_t c);
  bool feed(std::string_view bytes);  // all or nothing
  bool complete() const;
  // True when the text is complete and nothing but whitespace may follow.
  bool done() const { return mode_ == Mode::kDone; }

 private:
  enum class Mode : uint8_t {
    kValue, kObjKeyOrEnd, kObjKey, kColon, kArrValueOrEnd, kCommaOrEnd, kString, kEscape,
    kUnicode, kNumber, kLiteral, kDone,
  };
  // Number sub-states: after '-', after leading '0', in int digits, after '.', in
  // fraction, after 'e', after exponent sign, in exponent digits.
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };
  bool step(uint8_t c);
  bool begin_value(uint8_t c);
  void end_value();
  bool number_terminal() const { return num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExp; }

  using Schema = nlohmann::ordered_json;
  struct Frame {
    const Schema* schema = nullptr;
    std::string seen;  // keys read so far, each followed by '\0'
  };
  bool key_byte(uint8_t c);
  void close_container();
  bool object_may_close() const;

  bool root_object_;
  bool tight_;
  const Schema* schema_;           // null: syntax only
  const Schema* value_schema_;     // schema of the value that starts next
  const Schema* pending_schema_ = nullptr;  // schema of the value after the current key
  std::vector<Frame> frames_;      // parallel to stack_ when schema_ is set
  std::string key_text_;           // the object key being read (schema mode)
  bool int_only_ = false;          // the number being read must be an integer
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
  bool active() const { return !prefix_options.empty() || json != JsonWhere::kNone; }
};

class HarmonyConstraint : public runtime::LogitConstraint {
 public:
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
};

}  // namespace brass::server
