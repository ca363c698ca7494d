// JSON Schema -> harmony's TypeScript-like tool signatures, and the `# Tools` section
// template. The output format is harmony's (see schema_ts.h); this is an independent
// implementation of its observable behaviour, written from its documented cases and
// golden files. Lookups go through get(), which is null for non-objects and missing
// keys, so any JSON value is accepted.
#include "harmony/schema_ts.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

namespace brass::harmony {
namespace {

constexpr int kMaxValueDepth = 256;  // json_compact: deeper values print as null

const Json* get(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

const std::string* get_string(const Json& j, const char* key) {
  const Json* v = get(j, key);
  return v && v->is_string() ? v->get_ptr<const std::string*>() : nullptr;
}

bool is_enum(const Json& schema) {
  const Json* e = get(schema, "enum");
  return e && e->is_array() && !e->empty();
}

bool is_nullable(const Json& schema) {
  const Json* n = get(schema, "nullable");
  return n && n->is_boolean() && n->get<bool>();
}

// `type_str | null` when the schema says nullable and the type does not mention null.
void apply_nullable(const Json& schema, std::string& type_str) {
  if (is_nullable(schema) && type_str.find("null") == std::string::npos) type_str += " | null";
}

// How harmony prints a default: strings quoted (raw, unescaped) unless the schema is an
// enum, where the bare string is printed; anything else as compact JSON.
std::string default_text(const Json& schema, const Json& def) {
  if (def.is_string()) {
    const auto& s = def.get_ref<const std::string&>();
    return is_enum(schema) ? s : "\"" + s + "\"";
  }
  return json_compact(def);
}

// The union rendering shared by top-level oneOf: each variant on its own ` | ` line.
std::string render_top_one_of(const Json& variants, const std::string& indent, int depth);

std::string to_ts(const Json& schema, const std::string& indent, int depth);

std::string render_object(const Json& schema, const std::string& indent, int depth) {
  std::string out;
  if (const auto* desc = get_string(schema, "description")) out += indent + "// " + *desc + "\n";
  out += "{\n";
  const Json* props = get(schema, "properties");
  if (props && props->is_object()) {
    std::set<std::string> required;
    if (const Json* req = get(schema, "required"); req && req->is_array()) {
      for (const auto& r : *req) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    for (auto it = props->begin(); it != props->end(); ++it) {
      const std::string& key = it.key();
      const Json& val = it.value();
      const char* optional_mark = required.count(key) ? "" : "?";
      const Json* one_of = get(val, "oneOf");
      if (const auto* title = get_string(val, "title")) {
        out += indent + "// " + *title + "\n" + indent + "//\n";
      }
      if (!one_of) {
        if (const auto* desc = get_string(val, "description")) out += indent + "// " + *desc + "\n";
      }
      if (const Json* ex = get(val, "examples"); ex && ex->is_array() && !ex->empty()) {
        out += indent + "// Examples:\n";
        for (const auto& e : *ex) {
          if (e.is_string()) out += indent + "// - \"" + e.get<std::string>() + "\"\n";
        }
      }
      if (one_of && one_of->is_array()) {
        // Property-level oneOf: description/default above the name, one variant per line.
        const std::string* prop_desc = get_string(val, "description");
        bool skip_prop_desc = false;
        if (prop_desc && !one_of->empty()) {
          const std::string* first_desc = get_string((*one_of)[0], "description");
          skip_prop_desc = first_desc && *first_desc == *prop_desc;
        }
        bool desc_above = false;
        if (prop_desc && !skip_prop_desc) {
          out += indent + "// " + *prop_desc + "\n";
          desc_above = true;
        }
        if (const Json* def = get(val, "default")) {
          out += indent + "// default: " + default_text(val, *def) + "\n";
        }
        out += indent + key + optional_mark + ":\n";
        for (size_t i = 0; i < one_of->size(); ++i) {
          const Json& variant = (*one_of)[i];
          std::string type_str = to_ts(variant, indent + "   ", depth + 1);
          apply_nullable(variant, type_str);
          out += indent + " | " + type_str;
          std::vector<std::string> comments;
          if (!(i == 0 && desc_above)) {
            const std::string* vdesc = get_string(variant, "description");
            if (vdesc && !(prop_desc && *vdesc == *prop_desc)) comments.push_back(*vdesc);
          }
          if (const Json* def = get(variant, "default")) {
            comments.push_back("default: " + default_text(variant, *def));
          }
          if (!comments.empty()) {
            out += " //";
            for (const auto& c : comments) out += " " + c;
          }
          out += "\n";
        }
        out += indent + ",\n";
        continue;
      }
      std::string type_str = to_ts(val, indent + "    ", depth + 1);
      apply_nullable(val, type_str);
      out += indent + key + optional_mark + ": " + type_str + ",";
      if (!one_of) {
        if (const Json* def = get(val, "default")) out += " // default: " + default_text(val, *def);
      }
      out += "\n";
    }
  }
  out += indent + "}";
  return out;
}

std::string render_top_one_of(const Json& variants, const std::string& indent, int depth) {
  std::string out;
  for (const auto& variant : variants) {
    out += '\n';
    out += indent;
    out += " | ";
    std::string type_str = to_ts(variant, indent + "   ", depth + 1);
    apply_nullable(variant, type_str);
    out += type_str;
    std::vector<std::string> comments;
    if (const auto* desc = get_string(variant, "description")) comments.push_back(*desc);
    if (const Json* def = get(variant, "default")) {
      // Unlike the property-level union, an enum's string default prints as JSON here.
      bool raw_quoted = def->is_string() && !is_enum(variant);
      std::string c = "default: ";
      if (raw_quoted) {
        c += '"';
        c += def->get_ref<const std::string&>();
        c += '"';
      } else {
        c += json_compact(*def);
      }
      comments.push_back(std::move(c));
    }
    if (!comments.empty()) {
      out += " //";
      for (const auto& c : comments) out += " " + c;
    }
  }
  return out;
}

std::string to_ts(const Json& schema, const std::string& indent, int depth) {
  if (depth > kMaxSchemaDepth) return "any";
  if (const Json* one_of = get(schema, "oneOf"); one_of && one_of->is_array()) {
    return render_top_one_of(*one_of, indent, depth);
  }
  const Json* type = get(schema, "type");
  if (type && type->is_array()) {
    std::string out;
    for (const auto& t : *type) {
      if (!t.is_string()) continue;
      const auto& name = t.get_ref<const std::string&>();
      if (!out.empty()) out += " | ";
      out += name == "integer" ? std::string("number") : name;
    }
    if (!out.empty()) return out;
  }
  if (!type || !type->is_string()) return "any";
  const auto& t = type->get_ref<const std::string&>();
  if (t == "object") return render_object(schema, indent, depth);
  if (t == "string") {
    if (const Json* e = get(schema, "enum"); e && e->is_array()) {
      std::string out;
      for (const auto& v : *e) {
        if (!v.is_string()) continue;
        if (!out.empty()) out += " | ";
        out += '"';
        out += v.get_ref<const std::string&>();
        out += '"';
      }
      if (!out.empty()) return out;
    }
    return "string";
  }
  if (t == "number" || t == "integer") return "number";
  if (t == "boolean") return "boolean";
  if (t == "array") {
    if (const Json* items = get(schema, "items")) return to_ts(*items, indent, depth + 1) + "[]";
    return "Array<any>";
  }
  return "any";
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// ryu's "pretty" layout of the shortest round-trip digits, as serde_json prints f64.
void append_float(std::string& out, double v) {
  if (!std::isfinite(v)) {  // serde_json writes non-finite floats as null
    out += "null";
    return;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+20"
  bool neg = !sci.empty() && sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  // value = 0.d1d2...dn * 10^kk
  int length = static_cast<int>(digits.size());
  int kk = exp10 + 1;
  int k = kk - length;
  if (neg) out += '-';
  if (digits == "0") {
    out += "0.0";
  } else if (k >= 0 && kk <= 16) {
    out += digits + std::string(k, '0') + ".0";
  } else if (kk > 0 && kk <= 16) {
    out += digits.substr(0, kk) + "." + digits.substr(kk);
  } else if (kk > -5 && kk <= 0) {
    out += "0." + std::string(-kk, '0') + digits;
  } else if (length == 1) {
    out += digits + "e" + std::to_string(kk - 1);
  } else {
    out += digits.substr(0, 1) + "." + digits.substr(1) + "e" + std::to_string(kk - 1);
  }
}

void append_compact(std::string& out, const Json& v, int depth) {
  if (depth > kMaxValueDepth) {
    out += "null";
    return;
  }
  switch (v.type()) {
    case Json::value_t::null: out += "null"; break;
    case Json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case Json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case Json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case Json::value_t::number_float: append_float(out, v.get<double>()); break;
    case Json::value_t::string: append_json_string(out, v.get_ref<const std::string&>()); break;
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ',';
        first = false;
        append_compact(out, e, depth + 1);
      }
      out += ']';
      break;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ',';
        first = false;
        append_json_string(out, it.key());
        out += ':';
        append_compact(out, it.value(), depth + 1);
      }
      out += '}';
      break;
    }
    default: out += "null"; break;  // binary / discarded: not produced by the parser
  }
}

}  // namespace

std::string json_schema_to_typescript(const Json& schema, std::string_view indent) {
  return to_ts(schema, std::string(indent), 0);
}

std::string json_compact(const Json& value) {
  std::string out;
  append_compact(out, value, 0);
  return out;
}

std::vector<std::string_view> rust_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        nl == std::string_view::npos ? text.substr(pos) : text.substr(pos, nl - pos);
    if (nl != std::string_view::npos && !line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return lines;
}

std::string render_tools_section(const ToolNamespaces& namespaces) {
  std::string out = "# Tools";
  for (const auto& [key, ns] : namespaces) {
    std::vector<std::string> parts;
    parts.push_back("## " + ns.name + "\n");
    if (ns.description) {
      for (auto line : rust_lines(*ns.description)) {
        parts.push_back((ns.tools.empty() ? "" : "// ") + std::string(line));
      }
    }
    if (!ns.tools.empty()) {
      parts.push_back("namespace " + ns.name + " {\n");
      for (const auto& tool : ns.tools) {
        for (auto line : rust_lines(tool.description)) parts.push_back("// " + std::string(line));
        if (tool.parameters) {
          parts.push_back("type " + tool.name + " = (_: " +
                          json_schema_to_typescript(*tool.parameters, "") + ") => any;\n");
        } else {
          parts.push_back("type " + tool.name + " = () => any;\n");
        }
      }
      parts.push_back("} // namespace " + ns.name);
    }
    out += "\n\n";
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i) out += "\n";
      out += parts[i];
    }
  }
  return out;
}

}  // namespace brass::harmony
