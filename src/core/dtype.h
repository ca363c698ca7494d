// Tensor element types, numbered exactly as ggml numbers them (these ids are written
// into GGUF files), with the block traits every layer needs: elements per block and
// bytes per block. Only the numerics (dequantize/quantize) live in quant/; the gguf
// reader needs the traits to validate tensor byte sizes before anything is read.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace brass {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

struct DTypeTraits {
  DType type;
  std::string_view name;  // ggml's name: "f32", "q8_0", "mxfp4", ...
  int64_t block_size;     // elements per block (1 for plain types)
  int64_t block_bytes;    // bytes per block
};

// Traits for a type id read from a file; nullopt if brass does not know the type.
std::optional<DTypeTraits> dtype_traits(uint32_t type_id);
// Traits for a known type (aborts on an unknown enum value: a bug).
const DTypeTraits& traits(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of one row of n elements; n must be a multiple of the block size.
int64_t row_bytes(DType t, int64_t n);

}  // namespace brass
