// JSON Schema -> SchemaNode graph, PCRE2 patterns and number-range look-ahead (see
// constraint_schema.h).
#include "server/constraint_schema.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include <map>

namespace brass::server {

using OJson = nlohmann::ordered_json;

// ------------------------------------------------------------------ regex

std::shared_ptr<const SchemaRegex> SchemaRegex::compile(const std::string& pattern, std::string* error) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    *error = fmt::format("invalid regular expression at offset {}: {}", off, reinterpret_cast<const char*>(buf));
    return nullptr;
  }
  std::shared_ptr<SchemaRegex> r(new SchemaRegex());
  r->code_ = code;
  uint32_t opts = 0;
  pcre2_pattern_info(code, PCRE2_INFO_ALLOPTIONS, &opts);
  r->anchored_ = (opts & PCRE2_ANCHORED) != 0;
  return r;
}

SchemaRegex::~SchemaRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

namespace {
// One match-data block per thread (the ovector is not read: only match / partial / none).
pcre2_match_data* match_data() {
  thread_local std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create(1, nullptr),
                                                                                pcre2_match_data_free);
  return md.get();
}
}  // namespace

bool SchemaRegex::matches(std::string_view s) const {
  const int rc = pcre2_match(static_cast<const pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0,
                             match_data(), nullptr);
  return rc >= 0;
}

bool SchemaRegex::may_match(std::string_view prefix) const {
  if (!anchored_ || prefix.empty()) return true;
  const size_t end = prefix.size();
  for (size_t back = 1; back <= 3 && back <= prefix.size(); ++back) {
    const auto c = static_cast<uint8_t>(prefix[prefix.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back) return false;  // see the header: a split character is not accepted here
    break;
  }
  const int rc = pcre2_match(static_cast<const pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(prefix.data()), end, 0,
                             PCRE2_PARTIAL_HARD, match_data(), nullptr);
  return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
}

// ------------------------------------------------------------------ numbers

namespace {
// The magnitude target of a (possibly negative) number: [lo, hi] with open ends.
struct Range {
  long double lo, hi;
  bool lo_x, hi_x;
};

// Does [a, b) (b may be +inf) meet r?
bool meets_continuous(long double a, long double b, const Range& r) {
  const long double lower = std::max(a, r.lo);
  const bool lower_closed = a > r.lo ? true : !r.lo_x;
  long double upper;
  bool upper_closed;
  if (r.hi < b) {
    upper = r.hi;
    upper_closed = !r.hi_x;
  } else {
    upper = b;
    upper_closed = false;
  }
  return lower < upper || (lower == upper && lower_closed && upper_closed);
}

// Is there an integer in [a, b] ∩ r?
bool meets_integers(long double a, long double b, const Range& r) {
  long double lo = a, hi = b;
  if (r.lo != -HUGE_VALL) lo = std::max(lo, r.lo_x ? std::floor(r.lo) + 1 : std::ceil(r.lo));
  if (r.hi != HUGE_VALL) hi = std::min(hi, r.hi_x ? std::ceil(r.hi) - 1 : std::floor(r.hi));
  return lo <= hi;
}
}  // namespace

bool number_may_fit(std::string_view text, bool int_only, const NumberBounds& b) {
  const bool neg = !text.empty() && text[0] == '-';
  if (neg) text.remove_prefix(1);
  const size_t dot = text.find('.');
  const std::string_view ip = text.substr(0, dot);
  Range r{};
  if (!neg) {
    r = Range{b.lo, b.hi, b.lo_exclusive, b.hi_exclusive};
  } else {
    r = Range{-static_cast<long double>(b.hi), -static_cast<long double>(b.lo), b.hi_exclusive, b.lo_exclusive};
  }
  if (r.lo == HUGE_VALL || r.hi == -HUGE_VALL) return false;
  if (ip.empty()) return int_only ? meets_integers(0, HUGE_VALL, r) : meets_continuous(0, HUGE_VALL, r);
  if (dot != std::string_view::npos) {
    const std::string s(text);
    const long double v = std::strtold(s.c_str(), nullptr);
    const size_t d = text.size() - dot - 1;
    return meets_continuous(v, v + std::pow(10.0L, -static_cast<long double>(d)), r);
  }
  if (ip == "0") return int_only ? meets_integers(0, 0, r) : meets_continuous(0, 1, r);
  const long double p = std::strtold(std::string(ip).c_str(), nullptr);
  const long double far = std::max(std::fabs(r.lo == -HUGE_VALL ? 0 : r.lo), std::fabs(r.hi == HUGE_VALL ? 0 : r.hi));
  long double scale = 1;
  for (int k = 0; k < 400; ++k, scale *= 10) {
    const long double a = p * scale, hi = (p + 1) * scale;
    if (int_only ? meets_integers(a, hi - 1, r) : meets_continuous(a, hi, r)) return true;
    if (a > far * 10 + 10) break;  // every longer text is larger still
  }
  return false;
}

// ------------------------------------------------------------------ compiler

namespace {
const char* type_name(const OJson& v) { return v.type_name(); }

bool is_annotation(const std::string& k) {
  static const char* kAnn[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                               "deprecated", "readOnly", "writeOnly", "nullable"};
  for (const char* a : kAnn) {
    if (k == a) return true;
  }
  return k.rfind("x-", 0) == 0;
}
}  // namespace

class SchemaCompiler {
 public:
  SchemaCompiler(const OJson& root, std::string root_path) : root_(root), root_path_(std::move(root_path)) {}

  bool run(CompiledSchema* out) {
    out_ = out;
    return compile(root_, root_path_) >= 0;
  }
  SchemaError error;

 private:
  int fail(const std::string& path, std::string msg) {
    if (error.message.empty()) error = SchemaError{path, std::move(msg)};
    return -1;
  }

  bool non_negative(const OJson& v, const std::string& path, int64_t* out) {
    if (v.is_number_unsigned()) {
      *out = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
      return true;
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
      *out = v.get<int64_t>();
      return true;
    }
    if (v.is_number_float() && v.get<double>() >= 0 && std::floor(v.get<double>()) == v.get<double>() && v.get<double>() < 9e18) {
      *out = static_cast<int64_t>(v.get<double>());
      return true;
    }
    fail(path, fmt::format("expected a non-negative integer, found {}", v.dump()));
    return false;
  }

  bool schema_list(const OJson& v, const std::string& path, std::vector<int>* out) {
    if (!v.is_array() || v.empty()) {
      fail(path, fmt::format("expected a non-empty array of schemas, found {}", type_name(v)));
      return false;
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const int id = compile(v[i], fmt::format("{}[{}]", path, i));
      if (id < 0) return false;
      out->push_back(id);
    }
    return true;
  }

  // A schema node made of plain object keywords only (mergeable under allOf).
  bool object_only(const SchemaNode& n) const {
    return (n.types == SchemaNode::kAll || n.types == SchemaNode::kObject) && n.any_of.empty() && !n.has_literals &&
           n.min_length == 0 && n.max_length < 0 && !n.pattern && !n.has_min && !n.has_max && n.items == SchemaNode::kAny &&
           n.min_items == 0 && n.max_items < 0;
  }

  // Flatten allOf members through $ref / nested allOf; false if any is not mergeable.
  bool flatten(int id, std::vector<int>* out, int depth) {
    if (depth > 16 || !done_[id]) return false;
    const SchemaNode& n = out_->nodes_[id];
    if (!object_only(n)) return false;
    out->push_back(id);
    for (int m : n.all_of) {
      if (!flatten(m, out, depth + 1)) return false;
    }
    return true;
  }

  void merge_all_of(SchemaNode& n) {
    std::vector<int> members;
    for (int m : n.all_of) {
      if (!flatten(m, &members, 0)) return;  // keep the conjunction
    }
    if (!object_only(n)) return;
    for (int m : members) {
      const SchemaNode s = out_->nodes_[m];  // a copy: nodes_ may grow below
      n.types &= s.types;
      if (s.has_properties) n.has_properties = true;
      for (const auto& [k, v] : s.properties) {
        const int have = n.property(k);
        if (have == SchemaNode::kAbsent) {
          n.properties.emplace_back(k, v);
        } else if (have != v) {
          // Declared twice: a synthetic node requiring both.
          SchemaNode both;
          both.all_of = {have, v};
          merge_all_of(both);  // (recursive: merges nested object pairs the same way)
          const int id = static_cast<int>(out_->nodes_.size());
          out_->nodes_.push_back(std::move(both));
          done_.push_back(1);
          for (auto& p : n.properties) {
            if (p.first == k) p.second = id;
          }
        }
      }
      for (const auto& r : s.required) {
        if (std::find(n.required.begin(), n.required.end(), r) == n.required.end()) n.required.push_back(r);
      }
      if (n.additional == SchemaNode::kAbsent) n.additional = s.additional;
      n.min_properties = std::max(n.min_properties, s.min_properties);
      if (s.max_properties >= 0) n.max_properties = n.max_properties < 0 ? s.max_properties : std::min(n.max_properties, s.max_properties);
    }
    n.all_of.clear();
  }

  int compile(const OJson& s, const std::string& path) {
    if (const auto it = memo_.find(&s); it != memo_.end()) return it->second;
    const int id = static_cast<int>(out_->nodes_.size());
    out_->nodes_.emplace_back();
    done_.push_back(0);
    memo_[&s] = id;
    SchemaNode n;
    if (s.is_boolean()) {
      if (!s.get<bool>()) n.types = 0;
      out_->nodes_[id] = std::move(n);
      done_[id] = 1;
      return id;
    }
    if (!s.is_object()) return fail(path, fmt::format("a schema must be an object or a boolean, found {}", type_name(s)));
    const OJson* enum_v = nullptr;
    const OJson* const_v = nullptr;
    const OJson* excl_min_bool = nullptr;
    const OJson* excl_max_bool = nullptr;
    for (const auto& [k, v] : s.items()) {
      const std::string p = path + "." + k;
      if (is_annotation(k)) continue;
      if (k == "type") {
        std::vector<const OJson*> names;
        if (v.is_string()) names.push_back(&v);
        else if (v.is_array() && !v.empty()) for (const auto& x : v) names.push_back(&x);
        else return fail(p, fmt::format("expected a type name or a non-empty array of them, found {}", type_name(v)));
        n.types = 0;
        for (const OJson* x : names) {
          static const std::pair<const char*, uint8_t> kTypes[] = {
              {"null", SchemaNode::kNull}, {"boolean", SchemaNode::kBool}, {"object", SchemaNode::kObject},
              {"array", SchemaNode::kArray}, {"string", SchemaNode::kString}, {"integer", SchemaNode::kInteger},
              {"number", SchemaNode::kNumber | SchemaNode::kInteger}};
          bool found = false;
          for (const auto& [name, bit] : kTypes) {
            if (x->is_string() && x->get_ref<const std::string&>() == name) {
              n.types |= bit;
              found = true;
            }
          }
          if (!found) {
            return fail(p, fmt::format("unknown type name {} (expected null, boolean, object, array, string, integer or number)",
                                       x->dump()));
          }
        }
      } else if (k == "enum") {
        if (!v.is_array() || v.empty()) return fail(p, fmt::format("expected a non-empty array, found {}", v.dump()));
        enum_v = &v;
      } else if (k == "const") {
        const_v = &v;
      } else if (k == "properties") {
        if (!v.is_object()) return fail(p, fmt::format("expected an object of schemas, found {}", type_name(v)));
        n.has_properties = true;
        for (const auto& [name, sub] : v.items()) {
          const int c = compile(sub, p + "." + name);
          if (c < 0) return -1;
          n.properties.emplace_back(name, c);
        }
      } else if (k == "required") {
        if (!v.is_array()) return fail(p, fmt::format("expected an array of property names, found {}", type_name(v)));
        for (const auto& r : v) {
          if (!r.is_string()) return fail(p, fmt::format("expected property names (strings), found {}", r.dump()));
          n.required.push_back(r.get<std::string>());
        }
      } else if (k == "additionalProperties") {
        if (v.is_boolean()) {
          n.additional = v.get<bool>() ? SchemaNode::kAny : SchemaNode::kFalse;
        } else {
          const int c = compile(v, p);
          if (c < 0) return -1;
          n.additional = c;
        }
      } else if (k == "items") {
        if (v.is_array()) return fail(p, "tuple-form items (an array of schemas) is not supported");
        const int c = compile(v, p);
        if (c < 0) return -1;
        n.items = c;
      } else if (k == "minItems" || k == "maxItems" || k == "minLength" || k == "maxLength" || k == "minProperties" ||
                 k == "maxProperties") {
        int64_t x = 0;
        if (!non_negative(v, p, &x)) return -1;
        (k == "minItems" ? n.min_items : k == "maxItems" ? n.max_items : k == "minLength" ? n.min_length
         : k == "maxLength" ? n.max_length : k == "minProperties" ? n.min_properties : n.max_properties) = x;
      } else if (k == "minimum" || k == "maximum") {
        if (!v.is_number()) return fail(p, fmt::format("expected a number, found {}", v.dump()));
        (k == "minimum" ? n.has_min : n.has_max) = true;
        (k == "minimum" ? n.minimum : n.maximum) = v.get<double>();
      } else if (k == "exclusiveMinimum" || k == "exclusiveMaximum") {
        if (v.is_boolean()) {
          (k == "exclusiveMinimum" ? excl_min_bool : excl_max_bool) = &v;
        } else if (!v.is_number()) {
          return fail(p, fmt::format("expected a number (or a draft-4 boolean), found {}", v.dump()));
        }
      } else if (k == "pattern") {
        if (!v.is_string()) return fail(p, fmt::format("expected a regular expression string, found {}", type_name(v)));
        std::string err;
        n.pattern = SchemaRegex::compile(v.get<std::string>(), &err);
        if (!n.pattern) return fail(p, err);
      } else if (k == "anyOf" || k == "oneOf") {
        std::vector<int> alts;
        if (!schema_list(v, p, &alts)) return -1;
        if (n.any_of.empty()) {
          n.any_of = std::move(alts);
        } else {  // both anyOf and oneOf: the second becomes a conjunct
          SchemaNode d;
          d.any_of = std::move(alts);
          n.all_of.push_back(static_cast<int>(out_->nodes_.size()));
          out_->nodes_.push_back(std::move(d));
          done_.push_back(1);
        }
      } else if (k == "allOf") {
        if (!schema_list(v, p, &n.all_of)) return -1;
      } else if (k == "$ref") {
        if (!v.is_string()) return fail(p, fmt::format("expected a string, found {}", type_name(v)));
        const std::string ref = v.get<std::string>();
        if (ref.empty() || ref[0] != '#') return fail(p, fmt::format("only local references (\"#...\") are supported, found \"{}\"", ref));
        const OJson* target = nullptr;
        try {
          const nlohmann::ordered_json::json_pointer ptr(ref.substr(1));
          if (root_.contains(ptr)) target = &root_.at(ptr);
        } catch (const nlohmann::json::exception&) {
        }
        if (!target) return fail(p, fmt::format("unresolvable $ref \"{}\"", ref));
        const int c = compile(*target, root_path_ + (ref.size() > 1 ? ref.substr(1) : ""));
        if (c < 0) return -1;
        n.all_of.push_back(c);
      } else if (k == "$defs" || k == "definitions") {
        if (!v.is_object()) return fail(p, fmt::format("expected an object of schemas, found {}", type_name(v)));
        for (const auto& [name, sub] : v.items()) {
          if (compile(sub, p + "." + name) < 0) return -1;
        }
      } else if (k == "uniqueItems") {
        if (!v.is_boolean()) return fail(p, fmt::format("expected a boolean, found {}", type_name(v)));
        if (v.get<bool>()) return fail(p, "uniqueItems: true is not supported by constrained decoding");
      } else {
        return fail(p, fmt::format("unsupported JSON Schema keyword '{}'", k));
      }
    }
    // exclusiveMinimum/Maximum: numbers (draft 6+) tighten the bound; booleans (draft 4)
    // make minimum/maximum exclusive.
    for (const bool is_min : {true, false}) {
      const char* key = is_min ? "exclusiveMinimum" : "exclusiveMaximum";
      const auto it = s.find(key);
      if (it == s.end()) continue;
      bool& has = is_min ? n.has_min : n.has_max;
      double& bound = is_min ? n.minimum : n.maximum;
      bool& excl = is_min ? n.min_exclusive : n.max_exclusive;
      if (it->is_boolean()) {
        if (it->get<bool>()) {
          if (!has) return fail(path + "." + key, fmt::format("a boolean {} needs {}", key, is_min ? "minimum" : "maximum"));
          excl = true;
        }
        continue;
      }
      const double x = it->get<double>();
      if (!has || (is_min ? x >= bound : x <= bound)) {
        has = true;
        bound = x;
        excl = true;
      }
    }
    (void)excl_min_bool;
    (void)excl_max_bool;
    if (enum_v || const_v) {
      n.has_literals = true;
      std::vector<nlohmann::json> vals;
      if (enum_v) {
        for (const auto& x : *enum_v) vals.push_back(nlohmann::json::parse(x.dump()));
      } else {
        vals.push_back(nlohmann::json::parse(const_v->dump()));
      }
      for (auto& x : vals) {
        if (const_v && x != nlohmann::json::parse(const_v->dump())) continue;
        if (std::find(n.literal_values.begin(), n.literal_values.end(), x) != n.literal_values.end()) continue;
        n.literal_values.push_back(x);
      }
      // Canonical text: compact, object keys in the schema's order (ordered_json), UTF-8 as is.
      const OJson& src = enum_v ? *enum_v : *const_v;
      for (const auto& v : n.literal_values) {
        std::string text;
        if (enum_v) {
          for (const auto& x : src) {
            if (nlohmann::json::parse(x.dump()) == v) { text = x.dump(); break; }
          }
        } else {
          text = src.dump();
        }
        n.literals.push_back(text);
      }
    }
    if (!n.all_of.empty()) merge_all_of(n);
    out_->nodes_[id] = std::move(n);
    done_[id] = 1;
    return id;
  }

  const OJson& root_;
  std::string root_path_;
  CompiledSchema* out_ = nullptr;
  std::map<const OJson*, int> memo_;
  std::vector<uint8_t> done_;
};

Result<std::shared_ptr<const CompiledSchema>> CompiledSchema::compile(const OJson& schema, const std::string& path,
                                                                      SchemaError* error) {
  auto out = std::make_shared<CompiledSchema>();
  SchemaCompiler c(schema, path);
  if (!c.run(out.get())) {
    if (error) *error = c.error;
    return Status::error(fmt::format("invalid JSON Schema at {}: {}", c.error.path, c.error.message));
  }
  return std::shared_ptr<const CompiledSchema>(std::move(out));
}

std::optional<SchemaError> check_json_schema(const OJson& schema, const std::string& path) {
  SchemaError e;
  if (CompiledSchema::compile(schema, path, &e)) return std::nullopt;
  return e;
}

}  // namespace brass::server
