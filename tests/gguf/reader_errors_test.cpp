// Reader validation: every malformed input gives a Status whose message starts with
// the file name and contains a distinctive description of the problem. The bad files
// are byte images from tests/gguf/gguf_image.h (built from the GGUF spec, not by
// gguf::Writer), each with exactly one thing broken.
#include <gtest/gtest.h>

#include <string>

#include "gguf/reader.h"
#include "gguf_image.h"

namespace brass::gguf {
namespace {

using testing::build;
using testing::Image;
using testing::Spec;

const std::string kName = "m.gguf";

Result<std::unique_ptr<Reader>> parse(const std::vector<uint8_t>& b, size_t n = SIZE_MAX) {
  return Reader::parse(b.data(), std::min(n, b.size()), kName);
}

// The error must exist, start with the file name, and contain `needle`.
void expect_error(const std::vector<uint8_t>& b, const std::string& needle) {
  auto r = parse(b);
  ASSERT_FALSE(r.is_ok()) << "expected an error containing: " << needle;
  const std::string m = r.status().message();
  EXPECT_EQ(m.rfind(kName + ": ", 0), 0u) << m;
  EXPECT_NE(m.find(needle), std::string::npos) << "message: " << m << "\nwanted: " << needle;
}

TEST(ReaderErrors, BaseImageIsValid) {
  Image im = build(Spec{});
  auto r = parse(im.b);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const Reader& rd = **r;
  EXPECT_EQ(rd.version(), 3u);
  EXPECT_EQ(rd.data_offset(), im.at["data"]);
  ASSERT_EQ(rd.tensors().size(), 3u);
  EXPECT_EQ(rd.tensor("b")->nbytes, 68);
  EXPECT_EQ(rd.tensor("c")->data, im.b.data() + im.at["data"] + 160);
  EXPECT_EQ(rd.get_string("general.architecture").value(), "gpt-oss");
  EXPECT_EQ(rd.get_uint("test.u32").value(), 7u);
  EXPECT_EQ(rd.get_string_array("tokenizer.tokens")->at(1), "bc");
}

TEST(ReaderErrors, EveryTruncationIsAnError) {
  Image im = build(Spec{});
  for (size_t n = 0; n < im.b.size(); ++n) {
    // A fresh heap copy of exactly n bytes so ASan catches any read past the end.
    std::vector<uint8_t> prefix(im.b.begin(), im.b.begin() + static_cast<ptrdiff_t>(n));
    auto r = Reader::parse(prefix.data(), prefix.size(), kName);
    ASSERT_FALSE(r.is_ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(r.status().message().rfind(kName + ": ", 0), 0u) << r.status().message();
  }
  // Truncation inside the tensor infos names the tensor and the field.
  auto r = parse(im.b, im.at["t1.offset"] + 3);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("tensor 'b': offset needs 8 bytes"), std::string::npos)
      << r.status().message();
  // Truncation in the data section names the tensor whose bytes are missing.
  expect_error(std::vector<uint8_t>(im.b.begin(), im.b.end() - 1),
               fmt::format("tensor 'c': data [offset {}, 32 bytes) runs past the end of the file ({} bytes)",
                           im.at["data"] + 160, im.b.size() - 1));
}

TEST(ReaderErrors, Magic) {
  Image im = build(Spec{});
  im.patch<uint32_t>(im.at["magic"], 0x4c4d4747);  // "GGML"
  expect_error(im.b, "bad magic 'GGML'");
  expect_error({}, "too small to be a GGUF file");
}

TEST(ReaderErrors, Version) {
  Image im = build(Spec{});
  im.patch<uint32_t>(im.at["version"], 1);
  expect_error(im.b, "GGUF version 1 is not supported");
  im.patch<uint32_t>(im.at["version"], 4);
  expect_error(im.b, "unsupported GGUF version 4");
  im.patch<uint32_t>(im.at["version"], 0x03000000);
  expect_error(im.b, "big-endian");
  Spec s;
  s.version = 2;  // v2 has the same layout as v3
  auto r = parse(build(s).b);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ((*r)->version(), 2u);
}

TEST(ReaderErrors, AbsurdCounts) {
  const uint64_t huge = uint64_t{1} << 60;
  Image im = build(Spec{});
  auto b = im;
  b.patch<uint64_t>(im.at["n_tensors"], huge);
  expect_error(b.b, "n_tensors = 1152921504606846976 is impossible");
  b = im;
  b.patch<uint64_t>(im.at["n_kv"], huge);
  expect_error(b.b, "n_kv = 1152921504606846976 is impossible");
  b = im;
  b.patch<uint64_t>(im.at["n_kv"], ~uint64_t{0});
  expect_error(b.b, "n_kv = 18446744073709551615 is impossible");
  b = im;
  b.patch<uint64_t>(im.at["kv.arch"], huge);  // key string length
  expect_error(b.b, "key #0: key: string length 1152921504606846976 exceeds");
  b = im;
  b.patch<uint64_t>(im.at["kv.tokens.0"], huge);  // first token's length
  expect_error(b.b, "key 'tokenizer.tokens'[0]: string: string length 1152921504606846976 exceeds");
  b = im;
  b.patch<uint64_t>(im.at["kv.tokens.count"], huge);
  expect_error(b.b, "key 'tokenizer.tokens': array length 1152921504606846976 of string cannot fit");
  b = im;
  b.patch<uint64_t>(im.at["t0.name"], huge);
  expect_error(b.b, "tensor #0: name: string length 1152921504606846976 exceeds");
}

TEST(ReaderErrors, ValueTypes) {
  Image im = build(Spec{});
  auto b = im;
  b.patch<uint32_t>(im.at["kv.u32.type"], 13);
  expect_error(b.b, "key 'test.u32': unknown value type 13");
  b = im;
  b.patch<uint32_t>(im.at["kv.tokens.elem_type"], 99);
  expect_error(b.b, "key 'tokenizer.tokens': unknown array element type 99");

  Spec s;
  s.extra_kv.push_back([](Image& i) {
    i.str("test.bool");
    i.u32(7);
    i.u8(2);
  });
  expect_error(build(s).b, "key 'test.bool': bool value must be 0 or 1, found 2");

  Spec deep;
  deep.extra_kv.push_back([](Image& i) {  // 9 arrays nested, innermost holds one u8
    i.str("test.deep");
    i.u32(9);
    for (int d = 0; d < 8; ++d) {
      i.u32(9);
      i.u64(1);
    }
    i.u32(0);
    i.u64(1);
    i.u8(5);
  });
  expect_error(build(deep).b, "key 'test.deep'[0][0][0][0][0][0][0][0]: arrays nested deeper than the limit of 8");

  Spec empty_key;
  empty_key.extra_kv.push_back([](Image& i) {
    i.str("");
    i.u32(0);
    i.u8(1);
  });
  expect_error(build(empty_key).b, "key #3: empty key name");
}

TEST(ReaderErrors, MetadataValueCap) {
  // 2^24 + 1 uint8 items fit in the file but exceed the per-file value cap (each
  // parsed value costs ~64 bytes of memory).
  Spec s;
  s.extra_kv.push_back([](Image& i) {
    i.str("test.big_array");
    i.u32(9);
    i.u32(0);
    const uint64_t n = (uint64_t{1} << 24) + 1;
    i.u64(n);
    i.b.resize(i.b.size() + n, 1);
  });
  expect_error(build(s).b, "key 'test.big_array': array length 16777217 exceeds the metadata limit");
}

TEST(ReaderErrors, DuplicateKeyAndTensor) {
  Spec s;
  s.duplicate_key = true;
  expect_error(build(s).b, "key 'test.u32': duplicate key (key #1 and key #3)");
  Spec t;
  t.tensors[2].name = "a";
  expect_error(build(t).b, "tensor 'a': duplicate tensor name (tensor #0 and tensor #2)");
  Spec e;
  e.tensors[1].name = "";
  expect_error(build(e).b, "tensor #1: empty tensor name");
}

TEST(ReaderErrors, Alignment) {
  Spec s;
  s.write_alignment_key = true;
  s.alignment = 64;  // valid: offsets 0, 64, 160 are not all multiples of 64
  s.tensors[2].offset = 192;
  s.data_bytes = 224;
  {
    auto r = parse(build(s).b);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ((*r)->alignment(), 64u);
    EXPECT_EQ((*r)->data_offset() % 64, 0u);
  }
  s.tensors[2].offset = 160;
  expect_error(build(s).b, "tensor 'c': offset 160 is not a multiple of the alignment 64");
  Spec bad = s;
  bad.alignment = 48;
  expect_error(build(bad).b, "key 'general.alignment': alignment 48 is not a nonzero power of two");
  // alignment 0: build a valid file with the key, then zero the key's value in place
  // (key string = 8 + 17 bytes, then the u32 type, then the u32 value).
  Spec z;
  z.write_alignment_key = true;
  Image im0 = build(z);
  im0.patch<uint32_t>(im0.at["kv.alignment"] + 8 + 17 + 4, 0);
  expect_error(im0.b, "alignment 0 is not a nonzero power of two");
  Spec wrong_type;
  wrong_type.write_alignment_key = true;
  wrong_type.alignment_key_type = 10;  // uint64
  expect_error(build(wrong_type).b, "key 'general.alignment': expected uint32, found uint64");
}

TEST(ReaderErrors, TensorDescriptors) {
  Image im = build(Spec{});
  auto b = im;
  b.patch<uint32_t>(im.at["t1.type"], 99);
  expect_error(b.b, "tensor 'b': unknown tensor type id 99");
  b.patch<uint32_t>(im.at["t1.type"], 4);  // Q4_2, removed from ggml
  expect_error(b.b, "tensor 'b': unknown tensor type id 4");
  b = im;
  b.patch<uint64_t>(im.at["t1.offset"], 65);
  expect_error(b.b, "tensor 'b': offset 65 is not a multiple of the alignment 32");

  Spec s;
  s.tensors[0].n_dims = 0;
  s.tensors[0].ne = {};
  expect_error(build(s).b, "tensor 'a': n_dims = 0, expected 1..4");
  s = Spec{};
  s.tensors[0].n_dims = 5;
  s.tensors[0].ne = {2, 2, 2, 2, 1};
  expect_error(build(s).b, "tensor 'a': n_dims = 5, expected 1..4");
  s = Spec{};
  s.tensors[0].ne = {8, 0};
  expect_error(build(s).b, "tensor 'a': ne[1] = 0, expected 1..2^63-1");
  s = Spec{};
  s.tensors[0].ne = {8, uint64_t{1} << 63};
  expect_error(build(s).b, "tensor 'a': ne[1] = 9223372036854775808, expected 1..2^63-1");
  s = Spec{};
  s.tensors[0].ne = {uint64_t{1} << 40, uint64_t{1} << 40};
  expect_error(build(s).b, "tensor 'a': element count of the shape [1099511627776, 1099511627776] overflows int64");
  s = Spec{};
  s.tensors[0].ne = {uint64_t{1} << 31, uint64_t{1} << 31};  // 2^62 f32 = 2^64 bytes
  expect_error(build(s).b, "tensor 'a': byte size of f32 [2147483648, 2147483648] overflows int64");
  s = Spec{};
  s.tensors[1].ne = {48};
  expect_error(build(s).b, "tensor 'b': ne[0] = 48 is not a multiple of q8_0's block size 32");
}

TEST(ReaderErrors, TensorDataPlacement) {
  Image im = build(Spec{});
  auto b = im;
  b.patch<uint64_t>(im.at["t2.offset"], 4096);
  expect_error(b.b, fmt::format("tensor 'c': data [offset {}, 32 bytes) runs past the end of the file ({} bytes)",
                                im.at["data"] + 4096, im.b.size()));
  b.patch<uint64_t>(im.at["t2.offset"], ~uint64_t{31});  // offset + data start overflows
  expect_error(b.b, "tensor 'c': data [offset");
  b = im;
  b.patch<uint64_t>(im.at["t1.offset"], 32);  // 'b' [32, 100) overlaps 'a' [0, 64)
  expect_error(b.b, fmt::format("tensor 'b': data [offset {}, 68 bytes) overlaps tensor 'a' [offset {}, 64 bytes)",
                                im.at["data"] + 32, im.at["data"]));
  b = im;
  b.patch<uint64_t>(im.at["t2.offset"], 0);  // 'c' on top of 'a'
  expect_error(b.b, "overlaps tensor");
  b = im;
  b.patch<uint64_t>(im.at["t0.offset"], 128);  // 'a' [128, 192) overlaps 'b' [64, 132)
  expect_error(b.b, "tensor 'a': data");
}

TEST(ReaderErrors, TypedGetters) {
  Image im = build(Spec{});
  auto r = parse(im.b);
  ASSERT_TRUE(r.is_ok());
  const Reader& rd = **r;
  auto msg = [](const auto& res) { return res.status().message(); };
  EXPECT_EQ(msg(rd.get_uint("general.architecture")),
            "m.gguf: key 'general.architecture': expected an unsigned integer, found string");
  EXPECT_EQ(msg(rd.get_string("test.u32")), "m.gguf: key 'test.u32': expected string, found uint32");
  EXPECT_EQ(msg(rd.get_bool("test.u32")), "m.gguf: key 'test.u32': expected bool, found uint32");
  EXPECT_EQ(msg(rd.get_float("tokenizer.tokens")),
            "m.gguf: key 'tokenizer.tokens': expected a float, found array of string");
  EXPECT_EQ(msg(rd.get_int_array("tokenizer.tokens")),
            "m.gguf: key 'tokenizer.tokens': expected array of integers, found array of string");
  EXPECT_EQ(msg(rd.get_string_array("test.u32")),
            "m.gguf: key 'test.u32': expected array of string, found uint32");
  EXPECT_EQ(msg(rd.get_uint("no.such.key")), "m.gguf: key 'no.such.key' not found");
  // Integer getters accept any integer type whose value fits.
  EXPECT_EQ(rd.get_int("test.u32").value(), 7);
  EXPECT_EQ(rd.get_float("test.u32").value(), 7.0);

  Spec s;
  s.extra_kv.push_back([](Image& i) {
    i.str("test.neg");
    i.u32(5);
    i.i32(-3);
  });
  s.extra_kv.push_back([](Image& i) {
    i.str("test.big");
    i.u32(10);
    i.u64(uint64_t{1} << 63);
  });
  Image im2 = build(s);
  auto r2 = parse(im2.b);
  ASSERT_TRUE(r2.is_ok()) << r2.status().message();
  EXPECT_EQ((*r2)->get_int("test.neg").value(), -3);
  EXPECT_EQ(msg((*r2)->get_uint("test.neg")),
            "m.gguf: key 'test.neg': value -3 (int32) does not fit an unsigned integer");
  EXPECT_EQ(msg((*r2)->get_int("test.big")),
            "m.gguf: key 'test.big': value 9223372036854775808 (uint64) does not fit int64");
  EXPECT_EQ((*r2)->get_uint("test.big").value(), uint64_t{1} << 63);
}

TEST(ReaderErrors, OpenMissingFile) {
  auto r = Reader::open("/nonexistent/dir/x.gguf");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("/nonexistent/dir/x.gguf"), std::string::npos);
}

}  // namespace
}  // namespace brass::gguf
