// GGUF file model shared by the reader and the writer: metadata value types, values,
// and tensor descriptors. Dimension order is ggml's: ne[0] is the innermost
// (contiguous) dimension, so a (rows, cols) matrix W used as y = W x has
// ne = {cols, rows} = {n_in, n_out}.
#pragma once

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
