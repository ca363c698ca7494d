// GGUF file model shared by the reader and the writer: metadata value types, values,
// and tensor descriptors. Dimension order is ggml's: ne[0] is the innermost
// (contiguous) dimension, so a (rows, cols) matrix W used as y = W x has
// ne = {cols, rows} = {n_in, n_out}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"

namespace brass::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint64_t kDefaultAlignment = 32;

enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* value_type_name(ValueType t);
// Is `t` (read from a file) one of the 13 GGUF value types?
inline bool is_valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }
// Bytes of one fixed-size scalar on disk; 0 for STRING and ARRAY.
size_t value_type_size(ValueType t);
bool is_unsigned_type(ValueType t);  // UINT8/16/32/64
bool is_signed_type(ValueType t);    // INT8/16/32/64
inline bool is_integer_type(ValueType t) { return is_unsigned_type(t) || is_signed_type(t); }
inline bool is_float_type(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

// GGUF allows arrays of arrays; the reader bounds the nesting (an array directly
// under a key is depth 1). llama.cpp itself accepts only depth 1.
inline constexpr int kMaxArrayDepth = 8;
// ggml keeps tensor names in a char[64] (GGML_MAX_NAME): the writer refuses longer
// names so that every file it writes loads in llama.cpp.
inline constexpr size_t kMaxTensorNameLen = 63;
inline constexpr const char* kKeyAlignment = "general.alignment";

struct Value;
struct Array {
  ValueType elem_type = ValueType::UINT8;
  std::vector<Value> items;
};

// One metadata value. Integers of every width are held widened (int64_t/uint64_t),
// floats as double; `type` keeps the on-disk type so a writer round-trips exactly.
struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;
};

bool operator==(const Array& a, const Array& b);
bool operator==(const Value& a, const Value& b);

// Value constructors (the variant alternative follows the type: unsigned types hold
// uint64_t, signed int64_t, floats double).
Value make_uint(ValueType t, uint64_t v);    // UINT8/16/32/64
Value make_int(ValueType t, int64_t v);      // INT8/16/32/64
Value make_float(ValueType t, double v);     // FLOAT32/64
Value make_bool(bool v);
Value make_string(std::string v);
Value make_array(ValueType elem_type, std::vector<Value> items);
// Human-readable rendering (arrays abbreviated after `max_items`), for tools and errors.
std::string value_to_string(const Value& v, size_t max_items = 8);

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> ne;    // ggml order, 1..4 dims
  uint64_t offset = 0;        // relative to the start of the data section
  const uint8_t* data = nullptr;  // view into the mapped file (reader only)
  int64_t nbytes = 0;         // row_bytes(type, ne[0]) * prod(ne[1..])

  int64_t n_elements() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
  }
  int64_t rows() const { return ne.empty() ? 0 : n_elements() / ne[0]; }
  std::string shape_str() const;  // "[2880, 201088]"
};

}  // namespace brass::gguf
