// Test-side GGUF byte-image builder, written from the GGUF spec independently of
// gguf::Writer: lets tests build valid files field by field, record where each field
// sits, and then break exactly one thing (a count, an offset, a type id, ...).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace brass::gguf::testing {

struct Image {
  std::vector<uint8_t> b;
  std::map<std::string, size_t> at;  // field name -> byte offset of the field

  void mark(const std::string& name) { at[name] = b.size(); }
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
  void u8(uint8_t v) { raw(&v, 1); }
  void u16(uint16_t v) { raw(&v, 2); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i8(int8_t v) { raw(&v, 1); }
  void i16(int16_t v) { raw(&v, 2); }
  void i32(int32_t v) { raw(&v, 4); }
  void i64(int64_t v) { raw(&v, 8); }
  void f32(float v) { raw(&v, 4); }
  void f64(double v) { raw(&v, 8); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void pad_to(uint64_t align) {
    while (b.size() % align) b.push_back(0);
  }
  // Overwrite a little-endian field in place.
  template <class T>
  void patch(size_t pos, T v) {
    std::memcpy(b.data() + pos, &v, sizeof(T));
  }
};

// The small valid file most error tests start from. Metadata:
//   general.architecture = "gpt-oss" (string)
//   test.u32 = 7 (uint32)
//   tokenizer.tokens = ["a", "bc"] (array of string)
// Tensors (alignment 32):
//   'a' f32  ne [8, 2] = 64 bytes  at offset 0
//   'b' q8_0 ne [64]   = 2 x 34 = 68 bytes at offset 64 (padded to 96)
//   'c' f16  ne [16]   = 32 bytes at offset 160
// Data section = 192 bytes; the last tensor ends exactly at the end of the file, so
// every strict prefix of the file is invalid.
struct TensorSpec {
  std::string name;
  uint32_t n_dims;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};

struct Spec {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::vector<TensorSpec> tensors = {
      {"a", 2, {8, 2}, 0, 0},
      {"b", 1, {64}, 8, 64},
      {"c", 1, {16}, 1, 160},
  };
  uint64_t data_bytes = 192;
  uint64_t alignment = 32;
  bool write_alignment_key = false;
  uint32_t alignment_key_type = 4;  // UINT32
  bool duplicate_key = false;
  // Extra raw key/values appended after the standard three (each writes key+type+value).
  std::vector<void (*)(Image&)> extra_kv;
};

inline Image build(const Spec& s) {
  Image im;
  im.mark("magic");
  im.u32(s.magic);
  im.mark("version");
  im.u32(s.version);
  im.mark("n_tensors");
  im.u64(s.tensors.size());
  im.mark("n_kv");
  const uint64_t n_kv = 3 + (s.write_alignment_key ? 1 : 0) + (s.duplicate_key ? 1 : 0) + s.extra_kv.size();
  im.u64(n_kv);

  im.mark("kv.arch");
  im.str("general.architecture");
  im.u32(8);
  im.str("gpt-oss");
  im.mark("kv.u32");
  im.str("test.u32");
  im.mark("kv.u32.type");
  im.u32(4);
  im.u32(7);
  im.mark("kv.tokens");
  im.str("tokenizer.tokens");
  im.u32(9);
  im.mark("kv.tokens.elem_type");
  im.u32(8);
  im.mark("kv.tokens.count");
  im.u64(2);
  im.mark("kv.tokens.0");
  im.str("a");
  im.str("bc");
  if (s.write_alignment_key) {
    im.mark("kv.alignment");
    im.str("general.alignment");
    im.u32(s.alignment_key_type);
    if (s.alignment_key_type == 10) im.u64(s.alignment);
    else im.u32(static_cast<uint32_t>(s.alignment));
  }
  if (s.duplicate_key) {
    im.str("test.u32");
    im.u32(4);
    im.u32(8);
  }
  for (auto* f : s.extra_kv) f(im);

  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const auto& t = s.tensors[i];
    const std::string p = fmt::format("t{}.", i);
    im.mark(p + "name");
    im.str(t.name);
    im.mark(p + "n_dims");
    im.u32(t.n_dims);
    for (uint64_t d : t.ne) im.u64(d);
    im.mark(p + "type");
    im.u32(t.type);
    im.mark(p + "offset");
    im.u64(t.offset);
  }
  im.pad_to(s.alignment);
  im.mark("data");
  for (uint64_t i = 0; i < s.data_bytes; ++i) im.u8(static_cast<uint8_t>(i * 7 + 1));
  return im;
}

}  // namespace brass::gguf::testing
