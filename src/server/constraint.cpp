// JSON-prefix validator and the per-completion Harmony constraint (see constraint.h).
#include "server/constraint.h"

#include <cmath>

namespace brass::server {

namespace {
bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
using Schema = nlohmann::ordered_json;

// Does the schema allow JSON type `t`? No schema, no "type", or a non-string entry: yes.
bool has_type(const Schema* s, const char* t) {
  if (!s || !s->is_object()) return true;
  const auto it = s->find("type");
  if (it == s->end()) return true;
  auto is = [&](const Schema& x) { return !x.is_string() || x.get_ref<const std::string&>() == t; };
  if (it->is_array()) {
    for (const auto& x : *it) {
      if (is(x)) return true;
    }
    return false;
  }
  return is(*it);
}

// The declared properties when keys are limited to them (additionalProperties not true).
const Schema* closed_properties(const Schema* s) {
  if (!s || !s->is_object()) return nullptr;
  const auto it = s->find("properties");
  if (it == s->end() || !it->is_object()) return nullptr;
  const auto ap = s->find("additionalProperties");
  if (ap != s->end() && ap->is_boolean() && ap->get<bool>()) return nullptr;
  return &*it;
}

bool seen_key(const std::string& seen, const std::string& key) {
  size_t pos = 0;
  while (pos < seen.size()) {
    const size_t end = seen.find('\0', pos);
    if (seen.compare(pos, end - pos, key) == 0 && end - pos == key.size()) return true;
    pos = end + 1;
  }
  return false;
}

const Schema* member(const Schema* s, const char* key) {
  if (!s || !s->is_object()) return nullptr;
  const auto it = s->find(key);
  return it != s->end() && it->is_object() ? &*it : nullptr;
}

}  // namespace

// Schema mode: one byte of an object key (the opening quote is already read).
bool JsonValidator::key_byte(uint8_t c) {
  const Frame& f = frames_.back();
  const Schema* props = closed_properties(f.schema);
  if (!props) {
    if (c == '"') {
      pending_schema_ = nullptr;
      if (const Schema* s = f.schema; s && s->is_object()) {
        const auto it = s->find("properties");
        if (it != s->end() && it->is_object() && it->contains(key_text_)) pending_schema_ = &(*it)[key_text_];
        else pending_schema_ = member(s, "additionalProperties");
      }
    } else {
      key_text_.push_back(static_cast<char>(c));
    }
    return true;  // escapes etc. are checked by the syntax rules
  }
  if (c == '\\' || c < 0x20) return false;  // declared names are matched byte by byte
  if (c == '"') {
    if (!props->contains(key_text_) || seen_key(f.seen, key_text_)) return false;
    frames_.back().seen += key_text_;
    frames_.back().seen.push_back('\0');
    pending_schema_ = &(*props)[key_text_];
    return true;
  }
  key_text_.push_back(static_cast<char>(c));
  for (const auto& [name, sub] : props->items()) {
    if (name.size() >= key_text_.size() && name.compare(0, key_text_.size(), key_text_) == 0 && !seen_key(f.seen, name)) return true;
  }
  key_text_.pop_back();
  return false;
}

bool JsonValidator::object_may_close() const {
  if (!schema_) return true;
  const Frame& f = frames_.back();
  if (!f.schema || !f.schema->is_object()) return true;
  const auto req = f.schema->find("required");
  if (req == f.schema->end() || !req->is_array()) return true;
  for (const auto& r : *req) {
    if (r.is_string() && !seen_key(f.seen, r.get<std::string>())) return false;
  }
  return true;
}

bool JsonValidator::feed(uint8_t c) {
  JsonValidator tmp = *this;
  if (!tmp.step(c)) return false;
  *this = std::move(tmp);
  return true;
}

bool JsonValidator::feed(std::string_view bytes) {
  JsonValidator tmp = *this;
  for (char c : bytes) {
    if (!tmp.step(static_cast<uint8_t>(c))) return false;
  }
  *this = std::move(tmp);
  return true;
}

bool JsonValidator::complete() const {
  return mode_ == Mode::kDone || (mode_ == Mode::kNumber && stack_.empty() && number_terminal());
}

void JsonValidator::close_container() {
  stack_.pop_back();
  if (schema_) frames_.pop_back();
  end_value();
}

void JsonValidator::end_value() {
  key_ = false;
  int_only_ = false;
  mode_ = stack_.empty() ? Mode::kDone : Mode::kCommaOrEnd;
}

bool JsonValidator::begin_value(uint8_t c) {
  if (stack_.empty() && root_object_ && c != '{') return false;
  const Schema* s = value_schema_;
  if (schema_) {
    const char* type = c == '{' ? "object" : c == '[' ? "array" : c == '"' ? "string" : (c == 't' || c == 'f') ? "boolean"
                     : c == 'n' ? "null" : nullptr;
    if (type && !has_type(s, type)) return false;
    if (!type && (c == '-' || is_digit(c))) {
      if (!has_type(s, "number") && !has_type(s, "integer")) return false;
      int_only_ = !has_type(s, "number");
    }
  }
  switch (c) {
    case '{':
    case '[':
      if (static_cast<int>(stack_.size()) >= kMaxDepth) return false;
      stack_.push_back(static_cast<char>(c));
      mode_ = c == '{' ? Mode::kObjKeyOrEnd : Mode::kArrValueOrEnd;
      if (schema_) {
        frames_.push_back(Frame{s, {}});
        value_schema_ = c == '[' ? member(s, "items") : nullptr;
      }
      return true;
    case '"':
      mode_ = Mode::kString;
      key_ = false;
      return true;
    case 't': lit_ = "rue"; mode_ = Mode::kLiteral; return true;
    case 'f': lit_ = "alse"; mode_ = Mode::kLiteral; return true;
    case 'n': lit_ = "ull"; mode_ = Mode::kLiteral; return true;
    case '-': mode_ = Mode::kNumber; num_ = Num::kMinus; return true;
    default:
      if (!is_digit(c)) return false;
      mode_ = Mode::kNumber;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return true;
  }
}

bool JsonValidator::step(uint8_t c) {
  switch (mode_) {
    case Mode::kString:
      if (key_ && schema_ && !key_byte(c)) return false;
      if (c == '"') {
        if (key_) {
          key_ = false;
          mode_ = Mode::kColon;
        } else {
          end_value();
        }
        return true;
      }
      if (c == '\\') { mode_ = Mode::kEscape; return true; }
      return c >= 0x20;
    case Mode::kEscape:
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        mode_ = Mode::kString;
        return true;
      }
      if (c == 'u') { mode_ = Mode::kUnicode; hex_left_ = 4; return true; }
      return false;
    case Mode::kUnicode:
      if (!is_hex(c)) return false;
      if (--hex_left_ == 0) mode_ = Mode::kString;
      return true;
    case Mode::kLiteral:
      if (c != static_cast<uint8_t>(*lit_)) return false;
      if (*++lit_ == '\0') end_value();
      return true;
    case Mode::kNumber:
      if (is_digit(c)) {
        switch (num_) {
          case Num::kMinus: num_ = c == '0' ? Num::kZero : Num::kInt; return true;
          case Num::kZero: return false;  // no leading zeros
          case Num::kInt: return true;
          case Num::kDot: case Num::kFrac: num_ = Num::kFrac; return true;
          case Num::kE: case Num::kESign: case Num::kExp: num_ = Num::kExp; return true;
        }
      }
      if (c == '.') {
        if (num_ != Num::kZero && num_ != Num::kInt) return false;
        if (int_only_) return false;
        num_ = Num::kDot;
        return true;
      }
      if (c == 'e' || c == 'E') {
        if (num_ != Num::kZero && num_ != Num::kInt && num_ != Num::kFrac) return false;
        if (int_only_) return false;
        num_ = Num::kE;
        return true;
      }
      if (c == '+' || c == '-') {
        if (num_ != Num::kE) return false;
        num_ = Num::kESign;
        return true;
      }
      if (!number_terminal()) return false;
      end_value();
      return step(c);  // the byte after a number is read in the enclosing state
    default:
      break;
  }
  // Structural states: whitespace is allowed between tokens (bounded runs).
  if (is_ws(c)) {
    if (tight_ && (mode_ == Mode::kDone || (mode_ == Mode::kValue && stack_.empty()))) return false;
    if (ws_run_ >= kMaxWhitespace) return false;
    ++ws_run_;
    return true;
  }
  ws_run_ = 0;
  switch (mode_) {
    case Mode::kValue:
      return begin_value(c);
    case Mode::kArrValueOrEnd:
      if (c == ']') {
        close_container();
        return true;
      }
      return begin_value(c);
    case Mode::kObjKeyOrEnd:
      if (c == '}') {
        if (!object_may_close()) return false;
        close_container();
        return true;
      }
      [[fallthrough]];
    case Mode::kObjKey:
      if (c != '"') return false;
      mode_ = Mode::kString;
      key_ = true;
      key_text_.clear();
      return true;
    case Mode::kColon:
      if (c != ':') return false;
      mode_ = Mode::kValue;
      value_schema_ = pending_schema_;
      return true;
    case Mode::kCommaOrEnd: {
      const char top = stack_.back();
      if (c == ',') {
        if (top == '{' && schema_) {
          // Another key must still be possible.
          const Frame& f = frames_.back();
          if (const Schema* props = closed_properties(f.schema)) {
            bool any = false;
            for (const auto& [name, sub] : props->items()) any = any || !seen_key(f.seen, name);
            if (!any) return false;
          }
        }
        if (top == '[' && schema_) value_schema_ = member(frames_.back().schema, "items");
        mode_ = top == '{' ? Mode::kObjKey : Mode::kValue;
        return true;
      }
      if ((c == '}' && top == '{') || (c == ']' && top == '[')) {
        if (c == '}' && !object_may_close()) return false;
        close_container();
        return true;
      }
      return false;
    }
    default:
      return false;  // kDone: nothing but whitespace
  }
}

TokenTable::TokenTable(const tok::Tokenizer& tok) {
  n_vocab = tok.n_vocab();
  bytes.resize(n_vocab);
  special.assign(n_vocab, 0);
  for (int32_t t = 0; t < n_vocab; ++t) {
    if (tok.is_special(t)) {
      special[t] = 1;
      continue;
    }
    bytes[t] = std::string(tok.token_bytes(t));
    if (!bytes[t].empty()) by_first_byte[static_cast<uint8_t>(bytes[t][0])].push_back(t);
  }
}

Result<std::unique_ptr<HarmonyConstraint>> HarmonyConstraint::create(std::shared_ptr<const TokenTable> table,
                                                                     const tok::Tokenizer& tok, ConstraintPlan plan) {
  harmony::ParseOptions po;
  po.strict = false;
  po.role = harmony::Role::kAssistant;
  BRASS_ASSIGN_OR_RETURN(auto parser, harmony::StreamParser::create(tok, po));
  return std::unique_ptr<HarmonyConstraint>(new HarmonyConstraint(std::move(table), std::move(parser), std::move(plan)));
}

HarmonyConstraint::HarmonyConstraint(std::shared_ptr<const TokenTable> table, harmony::StreamParser parser,
                                     ConstraintPlan plan)
    : table_(std::move(table)), parser_(std::move(parser)), plan_(std::move(plan)), json_(plan_.json_root_object, /*tight=*/true, plan_.json_schema.get()) {
  for (size_t i = 0; i < plan_.prefix_options.size(); ++i) {
    if (!plan_.prefix_options[i].empty()) live_options_.push_back(i);
  }
  prefix_done_ = live_options_.empty();
  if (prefix_done_ && plan_.json == ConstraintPlan::JsonWhere::kAfterPrefix) json_active_ = true;
}

Status HarmonyConstraint::advance(std::span<const int32_t> generated) {
  for (; fed_ < generated.size(); ++fed_) {
    const int32_t t = generated[fed_];
    if (!prefix_done_) {
      std::vector<size_t> still;
      for (size_t k : live_options_) {
        if (plan_.prefix_options[k][prefix_pos_] == t) still.push_back(k);
      }
      live_options_ = std::move(still);
      ++prefix_pos_;
      bool complete = live_options_.empty();
      for (size_t k : live_options_) {
        if (plan_.prefix_options[k].size() != prefix_pos_) continue;
        complete = true;
        // The arguments of the chosen tool follow its parameters schema.
        if (k < plan_.prefix_schemas.size() && plan_.prefix_schemas[k]) {
          json_ = JsonValidator(plan_.json_root_object, /*tight=*/true, plan_.prefix_schemas[k].get());
        }
      }
      if (complete) {
        prefix_done_ = true;
        if (plan_.json == ConstraintPlan::JsonWhere::kAfterPrefix) {
          (void)parser_.push(t);
          json_active_ = true;
          continue;
        }
      }
    } else if (json_active_ && !json_over_) {
      const bool special = t < 0 || t >= table_->n_vocab || table_->special[t];
      if (special || !json_.feed(table_->bytes[t])) json_over_ = true;
    }
    (void)parser_.push(t);
    if (plan_.json == ConstraintPlan::JsonWhere::kFinalChannel && !json_active_ && parser_.in_content()) {
      const auto& hd = parser_.current_header();
      if (hd && hd->channel == "final" && !hd->recipient) json_active_ = true;
    }
  }
  return Status::ok();
}

void HarmonyConstraint::json_mask(std::vector<uint8_t>* mask) const {
  mask->assign(table_->n_vocab, 0);
  auto allow_end = [&] {
    for (int32_t t : plan_.json_end_tokens) {
      if (t >= 0 && t < table_->n_vocab) (*mask)[t] = 1;
    }
  };
  if (json_.done()) {
    allow_end();
    return;
  }
  for (int b = 0; b < 256; ++b) {
    const auto& bucket = table_->by_first_byte[b];
    if (bucket.empty()) continue;
    JsonValidator first = json_;
    if (!first.feed(static_cast<uint8_t>(b))) continue;  // the whole bucket is invalid
    for (int32_t t : bucket) {
      const std::string& s = table_->bytes[t];
      if (s.size() == 1) {
        (*mask)[t] = 1;
        continue;
      }
      JsonValidator v = first;
      if (v.feed(std::string_view(s).substr(1))) (*mask)[t] = 1;
    }
  }
  if (json_.complete()) allow_end();
}

Status HarmonyConstraint::allowed(std::span<const int32_t> generated, std::vector<uint8_t>* mask) {
  BRASS_TRY(advance(generated));
  if (!prefix_done_) {
    mask->assign(table_->n_vocab, 0);
    for (size_t k : live_options_) {
      const int32_t t = plan_.prefix_options[k][prefix_pos_];
      if (t >= 0 && t < table_->n_vocab) (*mask)[t] = 1;
    }
    return Status::ok();
  }
  if (json_active_ && !json_over_) {
    json_mask(mask);
    return Status::ok();
  }
  mask->assign(table_->n_vocab, 1);
  return Status::ok();
}

Status HarmonyConstraint::apply(std::span<const int32_t> generated, std::span<float> logits) {
  BRASS_TRY(advance(generated));
  if (prefix_done_ && !(json_active_ && !json_over_)) return Status::ok();  // free sampling
  std::vector<uint8_t> mask;
  BRASS_TRY(allowed(generated, &mask));
  bool any = false;
  for (size_t t = 0; t < logits.size(); ++t) {
    if (t >= mask.size() || !mask[t]) logits[t] = -INFINITY;
    else any = true;
  }
  if (!any) return Status::error("constrained decoding: no token can continue the output");
  return Status::ok();
}

}  // namespace brass::server
