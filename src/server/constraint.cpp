// JSON-prefix validator (syntax automaton + JSON Schema threads) and the per-completion
// Harmony constraint (see constraint.h).
#include "server/constraint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace brass::server {

namespace {
bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_num_char(uint8_t c) { return is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'; }
int hex_value(uint8_t c) { return is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }

bool seen_key(const std::string& seen, std::string_view key) {
  size_t pos = 0;
  while (pos < seen.size()) {
    const size_t end = seen.find('\0', pos);
    if (std::string_view(seen).substr(pos, end - pos) == key) return true;
    pos = end + 1;
  }
  return false;
}

bool has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

void append_utf8(std::string* s, uint32_t cp) {
  if (cp < 0x80) {
    s->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}
}  // namespace

JsonValidator::JsonValidator(bool root_object, bool tight, std::shared_ptr<const CompiledSchema> schema)
    : root_object_(root_object), tight_(tight), schema_(std::move(schema)) {
  if (schema_) {
    Thread t;
    t.next = {CompiledSchema::kRoot};
    threads_.push_back(std::move(t));
  }
}

JsonValidator::JsonValidator(bool root_object, bool tight, const nlohmann::ordered_json* schema)
    : JsonValidator(root_object, tight, std::shared_ptr<const CompiledSchema>()) {
  if (!schema) return;
  auto c = CompiledSchema::compile(*schema, "schema");
  if (!c) c = CompiledSchema::compile(nlohmann::ordered_json(false), "schema");  // accepts nothing
  schema_ = *c;
  Thread t;
  t.next = {CompiledSchema::kRoot};
  threads_.push_back(std::move(t));
}

// Apply f to every thread; drop those it fails. False when none is left.
template <class F>
bool JsonValidator::each(F f) {
  size_t w = 0;
  for (size_t r = 0; r < threads_.size(); ++r) {
    if (!f(threads_[r])) continue;
    if (w != r) threads_[w] = std::move(threads_[r]);
    ++w;
  }
  threads_.erase(threads_.begin() + static_cast<std::ptrdiff_t>(w), threads_.end());
  return w > 0;
}

// DNF of a conjunction: follow allOf/$ref (conjuncts) and branch on anyOf/oneOf, until
// every result is a set of nodes without pending alternatives. An alternative that leads
// back to a node already in its set is a cycle that consumes no input: dropped.
void JsonValidator::expand(const Conj& in, std::vector<Conj>* out) const {
  struct Partial {
    Conj done, todo;
  };
  std::vector<Partial> st{{{}, in}};
  int steps = 0;
  while (!st.empty() && ++steps <= kMaxExpand && static_cast<int>(out->size()) < kMaxThreads) {
    Partial p = std::move(st.back());
    st.pop_back();
    bool dead = false;
    uint8_t types = SchemaNode::kAll;
    while (!p.todo.empty() && !dead) {
      const int n = p.todo.back();
      p.todo.pop_back();
      if (has(p.done, n)) continue;
      p.done.push_back(n);
      const SchemaNode& node = schema_->node(n);
      types &= node.types;
      if (types == 0) dead = true;  // no value satisfies both
      for (int m : node.all_of) p.todo.push_back(m);
      if (node.any_of.empty()) continue;
      for (size_t i = 1; i < node.any_of.size(); ++i) {
        if (has(p.done, node.any_of[i])) continue;
        Partial q = p;
        q.todo.push_back(node.any_of[i]);
        st.push_back(std::move(q));
      }
      if (has(p.done, node.any_of[0])) dead = true;
      else p.todo.push_back(node.any_of[0]);
    }
    if (dead) continue;
    std::sort(p.done.begin(), p.done.end());
    if (std::find(out->begin(), out->end(), p.done) == out->end()) out->push_back(std::move(p.done));
  }
}

// A thread takes on the value starting with byte c under the expanded conjunction.
bool JsonValidator::start_thread(Thread& t, Conj conj, uint8_t c, std::vector<Thread>* out) const {
  uint8_t types = SchemaNode::kAll;
  Rules r;
  const SchemaNode* lit_node = nullptr;
  for (int id : conj) {
    const SchemaNode& n = schema_->node(id);
    types &= n.types;
    r.min_len = std::max(r.min_len, n.min_length);
    if (n.max_length >= 0) r.max_len = r.max_len < 0 ? n.max_length : std::min(r.max_len, n.max_length);
    if (n.pattern) r.patterns.push_back(n.pattern.get());
    if (n.has_min && (n.minimum > r.bounds.lo || (n.minimum == r.bounds.lo && n.min_exclusive))) {
      r.bounds.lo = n.minimum;
      r.bounds.lo_exclusive = n.min_exclusive;
    }
    if (n.has_max && (n.maximum < r.bounds.hi || (n.maximum == r.bounds.hi && n.max_exclusive))) {
      r.bounds.hi = n.maximum;
      r.bounds.hi_exclusive = n.max_exclusive;
    }
    if (n.has_literals && !lit_node) lit_node = &n;
  }
  const bool number = c == '-' || is_digit(c);
  const uint8_t bit = c == '{' ? SchemaNode::kObject : c == '[' ? SchemaNode::kArray : c == '"' ? SchemaNode::kString
                    : (c == 't' || c == 'f') ? SchemaNode::kBool : c == 'n' ? SchemaNode::kNull
                    : SchemaNode::kNumber | SchemaNode::kInteger;
  if (!(types & bit)) return false;
  if (number) {
    r.int_only = !(types & SchemaNode::kNumber);
    if (r.bounds.any() && !number_may_fit(num_text_, r.int_only, r.bounds)) return false;
  }
  if (lit_node) {
    Tracker tr;
    tr.depth = static_cast<uint32_t>(stack_.size());
    tr.pos = 1;
    tr.lits = &lit_node->literals;
    for (uint32_t i = 0; i < lit_node->literals.size(); ++i) {
      if (static_cast<uint8_t>(lit_node->literals[i][0]) != c) continue;
      bool all = true;
      for (int id : conj) {
        const SchemaNode& n = schema_->node(id);
        if (n.has_literals && &n != lit_node &&
            std::find(n.literal_values.begin(), n.literal_values.end(), lit_node->literal_values[i]) == n.literal_values.end()) {
          all = false;
        }
      }
      if (all) tr.live.push_back(i);
    }
    if (tr.live.empty()) return false;
    t.trackers.push_back(std::move(tr));
  }
  if (c == '{' || c == '[') {
    t.next.clear();
    if (c == '[') {
      for (int id : conj) {
        if (schema_->node(id).items >= 0) t.next.push_back(schema_->node(id).items);
      }
    }
    t.frames.push_back(SFrame{std::move(conj), {}, 0});
  }
  t.rules = std::move(r);
  out->push_back(std::move(t));
  return true;
}

bool JsonValidator::begin_value(uint8_t c) {
  if (stack_.empty() && root_object_ && c != '{') return false;
  if (c == '-' || is_digit(c)) num_text_.assign(1, static_cast<char>(c));
  if (c == '"') {
    str_.clear();
    str_cp_ = 0;
    utf8_pending_ = 0;
    high_surrogate_ = 0;
    str_dirty_ = false;
  }
  if (schema_) {
    std::vector<Thread> out;
    for (Thread& t : threads_) {
      if (!stack_.empty() && stack_.back() == '[') {  // one more element
        SFrame& f = t.frames.back();
        bool room = true;
        for (int id : f.conj) {
          const int64_t mx = schema_->node(id).max_items;
          if (mx >= 0 && f.count >= mx) room = false;
        }
        if (!room) continue;
        ++f.count;
      }
      std::vector<Conj> conjs;
      expand(t.next, &conjs);
      for (auto& cj : conjs) {
        if (static_cast<int>(out.size()) >= kMaxThreads) break;
        Thread nt = t;
        start_thread(nt, std::move(cj), c, &out);
      }
    }
    if (out.empty()) return false;
    threads_ = std::move(out);
  }
  switch (c) {
    case '{':
    case '[':
      if (static_cast<int>(stack_.size()) >= kMaxDepth) return false;
      stack_.push_back(static_cast<char>(c));
      mode_ = c == '{' ? Mode::kObjKeyOrEnd : Mode::kArrValueOrEnd;
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

// ---- object keys (schema mode; key_text_ already holds the key so far)

bool JsonValidator::key_byte(Thread& t, uint8_t c) const {
  const SFrame& f = t.frames.back();
  const SchemaNode* closed = nullptr;
  bool declared = false;
  for (int id : f.conj) {
    const SchemaNode& n = schema_->node(id);
    declared = declared || n.has_properties;
    if (n.closed() && !closed) closed = &n;
  }
  // Keys are matched byte by byte: no escapes where names are declared.
  if (c == '\\' && declared) return false;
  if (!closed) return true;
  if (c < 0x20) return false;
  for (const auto& [name, sub] : closed->properties) {
    if (name.size() < key_text_.size() || name.compare(0, key_text_.size(), key_text_) != 0 || seen_key(f.seen, name)) continue;
    bool all = true;
    for (int id : f.conj) {
      const SchemaNode& n = schema_->node(id);
      if (n.closed() && n.property(name) == SchemaNode::kAbsent) all = false;
    }
    if (all) return true;
  }
  return false;
}

bool JsonValidator::key_end(Thread& t) const {
  SFrame& f = t.frames.back();
  if (seen_key(f.seen, key_text_)) return false;  // each key once
  Conj next;
  for (int id : f.conj) {
    const SchemaNode& n = schema_->node(id);
    const int p = n.property(key_text_);
    if (p != SchemaNode::kAbsent) {
      next.push_back(p);
    } else if (n.closed()) {
      return false;
    } else if (n.additional >= 0) {
      next.push_back(n.additional);
    }
    if (n.max_properties >= 0 && static_cast<int64_t>(f.count) >= n.max_properties) return false;
  }
  f.seen += key_text_;
  f.seen.push_back('\0');
  ++f.count;
  t.next = std::move(next);
  return true;
}

// Another key can still be added (checked at '"' after '{' and at ',').
bool JsonValidator::may_add_key(const Thread& t) const {
  const SFrame& f = t.frames.back();
  const SchemaNode* closed = nullptr;
  for (int id : f.conj) {
    const SchemaNode& n = schema_->node(id);
    if (n.max_properties >= 0 && static_cast<int64_t>(f.count) >= n.max_properties) return false;
    if (n.closed() && !closed) closed = &n;
  }
  if (!closed) return true;
  for (const auto& [name, sub] : closed->properties) {
    if (seen_key(f.seen, name)) continue;
    bool all = true;
    for (int id : f.conj) {
      const SchemaNode& n = schema_->node(id);
      if (n.closed() && n.property(name) == SchemaNode::kAbsent) all = false;
    }
    if (all) return true;
  }
  return false;
}

bool JsonValidator::object_may_close(const Thread& t) const {
  const SFrame& f = t.frames.back();
  for (int id : f.conj) {
    const SchemaNode& n = schema_->node(id);
    if (static_cast<int64_t>(f.count) < n.min_properties) return false;
    for (const auto& r : n.required) {
      if (!seen_key(f.seen, r)) return false;
    }
  }
  return true;
}

// ---- enum/const trackers

bool JsonValidator::trackers_feed(uint8_t c) {
  return each([&](Thread& t) {
    for (Tracker& tr : t.trackers) {
      size_t w = 0;
      for (uint32_t i : tr.live) {
        const std::string& s = (*tr.lits)[i];
        if (tr.pos < s.size() && static_cast<uint8_t>(s[tr.pos]) == c) tr.live[w++] = i;
      }
      tr.live.resize(w);
      if (w == 0) return false;
      ++tr.pos;
    }
    return true;
  });
}

// The value at depth stack_.size() ended: its trackers must be at a literal's end.
bool JsonValidator::trackers_end() {
  return each([&](Thread& t) {
    while (!t.trackers.empty() && t.trackers.back().depth == stack_.size()) {
      const Tracker& tr = t.trackers.back();
      bool whole = false;
      for (uint32_t i : tr.live) whole = whole || (*tr.lits)[i].size() == tr.pos;
      if (!whole) return false;
      t.trackers.pop_back();
    }
    return true;
  });
}

// ---- string content (decoded into str_ for lengths and patterns)

void JsonValidator::decode_byte(uint8_t c) {
  if (high_surrogate_) {  // a lone high surrogate escape
    append_utf8(&str_, 0xFFFD);
    ++str_cp_;
    high_surrogate_ = 0;
  }
  str_.push_back(static_cast<char>(c));
  // Code points: lead bytes, plus stray continuation bytes (each becomes one U+FFFD), so
  // lengths always grow and a bounded string cannot be padded forever.
  if ((c & 0xC0) == 0x80 && utf8_pending_ > 0) {
    --utf8_pending_;
  } else {
    ++str_cp_;
    utf8_pending_ = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  }
  str_dirty_ = true;
}

bool JsonValidator::check_string_prefix() {
  if (!schema_ || !str_dirty_) return true;
  str_dirty_ = false;
  if (key_ || (mode_ != Mode::kString && mode_ != Mode::kEscape && mode_ != Mode::kUnicode)) return true;
  return each([&](const Thread& t) {
    for (const SchemaRegex* p : t.rules.patterns) {
      if (!p->may_match(str_)) return false;
    }
    return true;
  });
}

bool JsonValidator::end_scalar() {
  if (mode_ == Mode::kString) {
    if (high_surrogate_) {
      append_utf8(&str_, 0xFFFD);
      ++str_cp_;
      high_surrogate_ = 0;
    }
    if (!each([&](const Thread& t) {
          if (str_cp_ < t.rules.min_len) return false;
          for (const SchemaRegex* p : t.rules.patterns) {
            if (!p->matches(str_)) return false;
          }
          return true;
        })) {
      return false;
    }
  } else if (mode_ == Mode::kNumber) {
    const double v = std::strtod(num_text_.c_str(), nullptr);
    if (!each([&](const Thread& t) { return !t.rules.bounds.any() || t.rules.bounds.contains(v); })) return false;
  }
  return trackers_end();
}

bool JsonValidator::feed(uint8_t c) {
  JsonValidator tmp = *this;
  if (!tmp.step(c) || !tmp.check_string_prefix()) return false;
  *this = std::move(tmp);
  return true;
}

bool JsonValidator::feed(std::string_view bytes) {
  JsonValidator tmp = *this;
  for (char c : bytes) {
    if (!tmp.step(static_cast<uint8_t>(c))) return false;
  }
  if (!tmp.check_string_prefix()) return false;
  *this = std::move(tmp);
  return true;
}

bool JsonValidator::complete() const {
  if (mode_ == Mode::kDone) return true;
  if (mode_ != Mode::kNumber || !stack_.empty() || !number_terminal()) return false;
  if (!schema_) return true;
  JsonValidator tmp = *this;
  return tmp.end_scalar();
}

void JsonValidator::end_value() {
  key_ = false;
  mode_ = stack_.empty() ? Mode::kDone : Mode::kCommaOrEnd;
}

bool JsonValidator::step(uint8_t c) {
  if (mode_ == Mode::kNumber && !is_num_char(c)) {
    // The byte after a number ends it and is read in the enclosing state.
    if (!number_terminal()) return false;
    if (schema_ && !end_scalar()) return false;
    end_value();
  }
  if (schema_ && !trackers_feed(c)) return false;
  return step_syntax(c);
}

bool JsonValidator::step_syntax(uint8_t c) {
  switch (mode_) {
    case Mode::kString:
      if (key_ && schema_ && c != '"') {
        key_text_.push_back(static_cast<char>(c));
        if (!each([&](Thread& t) { return key_byte(t, c); })) return false;
      }
      if (c == '"') {
        if (key_) {
          if (schema_ && !each([&](Thread& t) { return key_end(t); })) return false;
          key_ = false;
          mode_ = Mode::kColon;
        } else {
          if (schema_ && !end_scalar()) return false;
          end_value();
        }
        return true;
      }
      if (c == '\\') {
        mode_ = Mode::kEscape;
        if (!schema_ || key_) return true;
        // With patterns, a backslash only where some escaped character can still match.
        return each([&](const Thread& t) {
          if (t.rules.max_len >= 0 && str_cp_ + (high_surrogate_ ? 1 : 0) + 1 > t.rules.max_len) return false;
          if (t.rules.patterns.empty()) return true;
          for (char e : std::string_view("\"\\/\b\f\n\r\t")) {
            bool all = true;
            for (const SchemaRegex* p : t.rules.patterns) all = all && p->may_match(str_ + e);
            if (all) return true;
          }
          return false;
        });
      }
      if (c < 0x20) return false;
      if (schema_ && !key_) {
        decode_byte(c);
        if (!each([&](const Thread& t) { return t.rules.max_len < 0 || str_cp_ <= t.rules.max_len; })) return false;
      }
      return true;
    case Mode::kEscape: {
      static const char kFrom[] = "\"\\/bfnrt";
      static const char kTo[] = "\"\\/\b\f\n\r\t";
      const char* at = c ? std::strchr(kFrom, c) : nullptr;
      if (at) {
        mode_ = Mode::kString;
        if (schema_ && !key_) {
          decode_byte(static_cast<uint8_t>(kTo[at - kFrom]));
          if (!each([&](const Thread& t) { return t.rules.max_len < 0 || str_cp_ <= t.rules.max_len; })) return false;
        }
        return true;
      }
      if (c == 'u') {
        mode_ = Mode::kUnicode;
        hex_left_ = 4;
        hex_val_ = 0;
        // Not under a pattern: the code point is only known after its last digit (the
        // character can be written directly instead).
        return !schema_ || key_ || each([](const Thread& t) { return t.rules.patterns.empty(); });
      }
      return false;
    }
    case Mode::kUnicode:
      if (!is_hex(c)) return false;
      hex_val_ = hex_val_ * 16 + static_cast<uint32_t>(hex_value(c));
      // No surrogate escapes (\uD800-\uDFFF): a lone one is rejected by strict parsers
      // (nlohmann, serde), so characters beyond the BMP are written as UTF-8. Cut at the
      // second digit, so a prefix never dead-ends.
      if (--hex_left_ == 2 && hex_val_ >= 0xD8 && hex_val_ <= 0xDF) return false;
      if (hex_left_ == 0) {
        mode_ = Mode::kString;
        if (schema_ && !key_) {
          uint32_t cp = hex_val_;
          if (high_surrogate_ && cp >= 0xDC00 && cp <= 0xDFFF) {
            cp = 0x10000 + ((high_surrogate_ - 0xD800) << 10) + (cp - 0xDC00);
            high_surrogate_ = 0;
          } else if (high_surrogate_) {
            append_utf8(&str_, 0xFFFD);
            ++str_cp_;
            high_surrogate_ = 0;
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            high_surrogate_ = cp;  // its pair may follow
          } else {
            if (cp >= 0xDC00 && cp <= 0xDFFF) cp = 0xFFFD;
            append_utf8(&str_, cp);
            ++str_cp_;
          }
          str_dirty_ = true;
          const int64_t n = str_cp_ + (high_surrogate_ ? 1 : 0);
          if (!each([&](const Thread& t) { return t.rules.max_len < 0 || n <= t.rules.max_len; })) return false;
        }
      }
      return true;
    case Mode::kLiteral:
      if (c != static_cast<uint8_t>(*lit_)) return false;
      if (*++lit_ == '\0') {
        if (schema_ && !end_scalar()) return false;
        end_value();
      }
      return true;
    case Mode::kNumber: {
      const Num before = num_;
      if (is_digit(c)) {
        switch (num_) {
          case Num::kMinus: num_ = c == '0' ? Num::kZero : Num::kInt; break;
          case Num::kZero: return false;  // no leading zeros
          case Num::kInt: break;
          case Num::kDot: case Num::kFrac: num_ = Num::kFrac; break;
          case Num::kE: case Num::kESign: case Num::kExp: num_ = Num::kExp; break;
        }
      } else if (c == '.') {
        if (num_ != Num::kZero && num_ != Num::kInt) return false;
        num_ = Num::kDot;
      } else if (c == 'e' || c == 'E') {
        if (num_ != Num::kZero && num_ != Num::kInt && num_ != Num::kFrac) return false;
        num_ = Num::kE;
      } else {  // '+' / '-'
        if (num_ != Num::kE) return false;
        num_ = Num::kESign;
      }
      (void)before;
      if (!schema_) return true;
      num_text_.push_back(static_cast<char>(c));
      const bool exponent = num_ == Num::kE || num_ == Num::kESign || num_ == Num::kExp;
      return each([&](const Thread& t) {
        if (c == '.' && t.rules.int_only) return false;
        if ((c == 'e' || c == 'E') && (t.rules.int_only || t.rules.bounds.any())) return false;
        return exponent || !t.rules.bounds.any() || number_may_fit(num_text_, t.rules.int_only, t.rules.bounds);
      });
    }
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
  auto close = [&](char which) {
    if (schema_) {
      const bool ok = each([&](const Thread& t) {
        if (which == '}') return object_may_close(t);
        const SFrame& f = t.frames.back();
        for (int id : f.conj) {
          if (static_cast<int64_t>(f.count) < schema_->node(id).min_items) return false;
        }
        return true;
      });
      if (!ok) return false;
      for (Thread& t : threads_) t.frames.pop_back();
    }
    stack_.pop_back();
    if (schema_ && !trackers_end()) return false;
    end_value();
    return true;
  };
  switch (mode_) {
    case Mode::kValue:
      return begin_value(c);
    case Mode::kArrValueOrEnd:
      if (c == ']') return close(']');
      return begin_value(c);
    case Mode::kObjKeyOrEnd:
      if (c == '}') return close('}');
      [[fallthrough]];
    case Mode::kObjKey:
      if (c != '"') return false;
      if (schema_ && mode_ == Mode::kObjKeyOrEnd && !each([&](const Thread& t) { return may_add_key(t); })) return false;
      mode_ = Mode::kString;
      key_ = true;
      key_text_.clear();
      return true;
    case Mode::kColon:
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kCommaOrEnd: {
      const char top = stack_.back();
      if (c == ',') {
        if (schema_) {
          const bool ok = each([&](Thread& t) {
            if (top == '{') return may_add_key(t);
            SFrame& f = t.frames.back();
            t.next.clear();
            for (int id : f.conj) {
              const SchemaNode& n = schema_->node(id);
              if (n.max_items >= 0 && static_cast<int64_t>(f.count) >= n.max_items) return false;
              if (n.items >= 0) t.next.push_back(n.items);
            }
            return true;
          });
          if (!ok) return false;
        }
        mode_ = top == '{' ? Mode::kObjKey : Mode::kValue;
        return true;
      }
      if ((c == '}' && top == '{') || (c == ']' && top == '[')) return close(static_cast<char>(c));
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
  std::shared_ptr<const CompiledSchema> json_schema;
  std::vector<std::shared_ptr<const CompiledSchema>> prefix_schemas;
  if (plan.json_schema) {
    BRASS_ASSIGN_OR_RETURN(json_schema, CompiledSchema::compile(*plan.json_schema, plan.json_schema_path));
  }
  for (size_t k = 0; k < plan.prefix_schemas.size(); ++k) {
    std::shared_ptr<const CompiledSchema> c;
    if (plan.prefix_schemas[k]) {
      BRASS_ASSIGN_OR_RETURN(c, CompiledSchema::compile(*plan.prefix_schemas[k], fmt::format(fmt::runtime(plan.prefix_schema_path), k)));
    }
    prefix_schemas.push_back(std::move(c));
  }
  harmony::ParseOptions po;
  po.strict = false;
  po.role = harmony::Role::kAssistant;
  BRASS_ASSIGN_OR_RETURN(auto parser, harmony::StreamParser::create(tok, po));
  auto c = std::unique_ptr<HarmonyConstraint>(new HarmonyConstraint(std::move(table), std::move(parser), std::move(plan)));
  c->json_schema_ = std::move(json_schema);
  c->prefix_schemas_ = std::move(prefix_schemas);
  c->json_ = JsonValidator(c->plan_.json_root_object, /*tight=*/true, c->json_schema_);
  return c;
}

HarmonyConstraint::HarmonyConstraint(std::shared_ptr<const TokenTable> table, harmony::StreamParser parser,
                                     ConstraintPlan plan)
    : table_(std::move(table)), parser_(std::move(parser)), plan_(std::move(plan)), json_(plan_.json_root_object, /*tight=*/true) {
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
        if (k < prefix_schemas_.size() && prefix_schemas_[k]) {
          json_ = JsonValidator(plan_.json_root_object, /*tight=*/true, prefix_schemas_[k]);
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
