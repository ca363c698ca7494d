// libFuzzer target for the GGUF reader: any byte string must either parse or give an
// error, never crash, hang or over-allocate. When it parses, every metadata value and
// every byte of every tensor is touched (ASan checks the views stay inside the input).
#include <cstddef>
#include <cstdint>

#include "gguf/reader.h"

namespace {

uint64_t touch(const brass::gguf::Value& v) {
  using namespace brass::gguf;
  uint64_t h = static_cast<uint64_t>(v.type);
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return h ^ *u;
  if (const auto* i = std::get_if<int64_t>(&v.v)) return h ^ static_cast<uint64_t>(*i);
  if (const auto* d = std::get_if<double>(&v.v)) return h ^ static_cast<uint64_t>(*d != 0);
  if (const auto* b = std::get_if<bool>(&v.v)) return h ^ *b;
  if (const auto* s = std::get_if<std::string>(&v.v)) {
    for (char c : *s) h = h * 31 + static_cast<uint8_t>(c);
    return h;
  }
  for (const auto& it : std::get<Array>(v.v).items) h = h * 17 + touch(it);
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = brass::gguf::Reader::parse(data, size, "fuzz.gguf");
  if (!r.is_ok()) return 0;
  const auto& rd = **r;
  volatile uint64_t sink = 0;
  for (const auto& kv : rd.metadata()) {
    sink = sink + touch(kv.value) + kv.key.size();
    (void)rd.get_uint(kv.key);
    (void)rd.get_string_array(kv.key);
    (void)rd.get_float_array(kv.key);
    (void)rd.get_int_array(kv.key);
  }
  for (const auto& t : rd.tensors()) {
    uint64_t h = 0;
    for (int64_t i = 0; i < t.nbytes; ++i) h += t.data[i];
    sink = sink + h + static_cast<uint64_t>(t.n_elements()) + t.shape_str().size();
  }
  (void)sink;
  return 0;
}
