// Small shared pieces of the GGUF model: value type names and tensor shape strings.
#include "gguf/gguf.h"

#include <fmt/format.h>

namespace brass::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL: return 1;
    case ValueType::UINT16:
    case ValueType::INT16: return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32: return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64: return 8;
    case ValueType::STRING:
    case ValueType::ARRAY: return 0;
  }
  return 0;
}

bool is_unsigned_type(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}
bool is_signed_type(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

bool operator==(const Array& a, const Array& b) {
  return a.elem_type == b.elem_type && a.items == b.items;
}
bool operator==(const Value& a, const Value& b) { return a.type == b.type && a.v == b.v; }

Value make_uint(ValueType t, uint64_t v) { return Value{t, v}; }
Value make_int(ValueType t, int64_t v) { return Value{t, v}; }
Value make_float(ValueType t, double v) { return Value{t, v}; }
Value make_bool(bool v) { return Value{ValueType::BOOL, v}; }
Value make_string(std::string v) { return Value{ValueType::STRING, std::move(v)}; }
Value make_array(ValueType elem_type, std::vector<Value> items) {
  return Value{ValueType::ARRAY, Array{elem_type, std::move(items)}};
}

std::string value_to_string(const Value& v, size_t max_items) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return fmt::format("{}", *u);
  if (const auto* i = std::get_if<int64_t>(&v.v)) return fmt::format("{}", *i);
  if (const auto* d = std::get_if<double>(&v.v)) return fmt::format("{}", *d);
  if (const auto* b = std::get_if<bool>(&v.v)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v.v)) return fmt::format("\"{}\"", *s);
  const auto& a = std::get<Array>(v.v);
  std::string out = fmt::format("{}[{}]{{", value_type_name(a.elem_type), a.items.size());
  for (size_t i = 0; i < a.items.size() && i < max_items; ++i) {
    if (i) out += ", ";
    out += value_to_string(a.items[i], max_items);
  }
  if (a.items.size() > max_items) out += ", ...";
  return out + "}";
}

std::string TensorInfo::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += fmt::format("{}", ne[i]);
  }
  return s + "]";
}

}  // namespace brass::gguf
