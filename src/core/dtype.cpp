// Block traits per ggml type id (layouts from ggml-common.h: a block's byte count is
// its struct's size, e.g. block_q8_0 = f16 d + 32 x int8 = 34 bytes).
#include "core/dtype.h"

#include <array>

#include "core/status.h"

namespace brass {
namespace {

constexpr int64_t kQK_K = 256;

constexpr std::array<DTypeTraits, 20> kTraits = {{
    {DType::F32, "f32", 1, 4},
    {DType::F16, "f16", 1, 2},
    {DType::Q4_0, "q4_0", 32, 2 + 16},
    {DType::Q4_1, "q4_1", 32, 2 + 2 + 16},
    {DType::Q5_0, "q5_0", 32, 2 + 4 + 16},
    {DType::Q5_1, "q5_1", 32, 2 + 2 + 4 + 16},
    {DType::Q8_0, "q8_0", 32, 2 + 32},
    {DType::Q8_1, "q8_1", 32, 2 + 2 + 32},
    {DType::Q2_K, "q2_K", kQK_K, kQK_K / 16 + kQK_K / 4 + 2 + 2},
    {DType::Q3_K, "q3_K", kQK_K, kQK_K / 8 + kQK_K / 4 + 12 + 2},
    {DType::Q4_K, "q4_K", kQK_K, 2 + 2 + 12 + kQK_K / 2},
    {DType::Q5_K, "q5_K", kQK_K, 2 + 2 + 12 + kQK_K / 8 + kQK_K / 2},
    {DType::Q6_K, "q6_K", kQK_K, kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + 2},
    {DType::Q8_K, "q8_K", kQK_K, 4 + kQK_K + kQK_K / 16 * 2},
    {DType::I8, "i8", 1, 1},
    {DType::I16, "i16", 1, 2},
    {DType::I32, "i32", 1, 4},
    {DType::I64, "i64", 1, 8},
    {DType::F64, "f64", 1, 8},
    {DType::BF16, "bf16", 1, 2},
}};

constexpr DTypeTraits kMxfp4 = {DType::MXFP4, "mxfp4", 32, 1 + 16};

}  // namespace

std::optional<DTypeTraits> dtype_traits(uint32_t type_id) {
  if (type_id == static_cast<uint32_t>(DType::MXFP4)) return kMxfp4;
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == type_id) return t;
  return std::nullopt;
}

const DTypeTraits& traits(DType t) {
  if (t == DType::MXFP4) return kMxfp4;
  for (const auto& tr : kTraits)
    if (tr.type == t) return tr;
  BRASS_CHECK_MSG(false, "unknown dtype id {}", static_cast<uint32_t>(t));
  __builtin_unreachable();
}

std::string_view dtype_name(DType t) { return traits(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  if (name == kMxfp4.name) return DType::MXFP4;
  for (const auto& t : kTraits)
    if (t.name == name) return t.type;
  return std::nullopt;
}

int64_t row_bytes(DType t, int64_t n) {
  const auto& tr = traits(t);
  BRASS_CHECK_MSG(n % tr.block_size == 0, "{} elements not a multiple of {}'s block {}", n,
                  tr.name, tr.block_size);
  return n / tr.block_size * tr.block_bytes;
}

}  // namespace brass
