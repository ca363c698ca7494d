// Writer -> Reader round trips with random metadata (every value type, string arrays,
// nested arrays, unicode keys) and random tensors of several types and shapes; and
// the writer's exact bytes against the spec-built image of tests/gguf/gguf_image.h.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "gguf/reader.h"
#include "gguf/writer.h"
#include "gguf_image.h"

namespace brass::gguf {
namespace {

struct Rng {
  uint32_t seed = std::random_device{}();
  std::mt19937_64 g{seed};
  uint64_t u() { return g(); }
  int64_t range(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }
};

const ValueType kScalarTypes[] = {ValueType::UINT8,  ValueType::INT8,   ValueType::UINT16,
                                  ValueType::INT16,  ValueType::UINT32, ValueType::INT32,
                                  ValueType::FLOAT32, ValueType::BOOL,  ValueType::STRING,
                                  ValueType::UINT64, ValueType::INT64,  ValueType::FLOAT64};

std::string random_string(Rng& r) {
  static const char* kPieces[] = {"a", "Z", "_", ".", " ", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80",
                                  "\n", "0", "\x00", "blk"};
  std::string s;
  const int n = static_cast<int>(r.range(0, 12));
  for (int i = 0; i < n; ++i) {
    const char* p = kPieces[r.range(0, 11)];
    s += (p[0] == 0) ? std::string(1, '\0') : std::string(p);
  }
  return s;
}

Value random_scalar(Rng& r, ValueType t) {
  switch (t) {
    case ValueType::UINT8: return make_uint(t, r.u() & 0xff);
    case ValueType::UINT16: return make_uint(t, r.u() & 0xffff);
    case ValueType::UINT32: return make_uint(t, r.u() & 0xffffffffu);
    case ValueType::UINT64: return make_uint(t, r.u());
    case ValueType::INT8: return make_int(t, static_cast<int8_t>(r.u()));
    case ValueType::INT16: return make_int(t, static_cast<int16_t>(r.u()));
    case ValueType::INT32: return make_int(t, static_cast<int32_t>(r.u()));
    case ValueType::INT64: return make_int(t, static_cast<int64_t>(r.u()));
    case ValueType::FLOAT32: {
      // any finite float: a random bit pattern with a non-max exponent
      uint32_t bits = static_cast<uint32_t>(r.u());
      if (((bits >> 23) & 0xff) == 0xff) bits &= ~(1u << 23);
      float f;
      std::memcpy(&f, &bits, 4);
      return make_float(t, f);
    }
    case ValueType::FLOAT64: {
      uint64_t bits = r.u();
      if (((bits >> 52) & 0x7ff) == 0x7ff) bits &= ~(uint64_t{1} << 52);
      double d;
      std::memcpy(&d, &bits, 8);
      return make_float(t, d);
    }
    case ValueType::BOOL: return make_bool(r.u() & 1);
    case ValueType::STRING: return make_string(random_string(r));
    case ValueType::ARRAY: break;
  }
  return make_bool(false);
}

Value random_array(Rng& r, int depth) {
  const bool nested = depth < 3 && r.range(0, 3) == 0;
  const ValueType et = nested ? ValueType::ARRAY : kScalarTypes[r.range(0, 11)];
  std::vector<Value> items;
  const int n = static_cast<int>(r.range(0, 6));
  for (int i = 0; i < n; ++i) items.push_back(nested ? random_array(r, depth + 1) : random_scalar(r, et));
  if (nested && items.empty()) items.push_back(random_array(r, depth + 1));
  return make_array(et, std::move(items));
}

struct TensorCase {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
  std::vector<uint8_t> bytes;
};

TEST(GgufRoundTrip, RandomMetadataAndTensors) {
  for (int iter = 0; iter < 20; ++iter) {
    Rng r;
    SCOPED_TRACE(::testing::Message() << "seed " << r.seed);
    const uint64_t alignments[] = {32, 1, 8, 64, 4096};
    const uint64_t alignment = alignments[r.range(0, 4)];
    Writer w(alignment);
    std::vector<KeyValue> expect;
    const int n_kv = static_cast<int>(r.range(1, 30));
    for (int i = 0; i < n_kv; ++i) {
      // unique keys, some unicode
      std::string key = fmt::format("k{}.", i) + (i % 3 == 0 ? "\xe9\x87\x8d\xe3\x81\xbf.\xc3\xbc" : "name");
      Value v = (r.range(0, 2) == 0) ? random_array(r, 0) : random_scalar(r, kScalarTypes[r.range(0, 11)]);
      w.set_value(key, v);
      expect.push_back({key, v});
    }
    // One of each explicit string-array / typed setter.
    w.set_string_array("tokenizer.ggml.tokens", {"<|start|>", "\xe2\x96\x81hi", ""});
    expect.push_back({"tokenizer.ggml.tokens",
                      make_array(ValueType::STRING, {make_string("<|start|>"), make_string("\xe2\x96\x81hi"),
                                                     make_string("")})});
    if (alignment != kDefaultAlignment)
      expect.push_back({"general.alignment", make_uint(ValueType::UINT32, alignment)});

    const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                           DType::MXFP4, DType::Q4_K, DType::Q6_K, DType::I32};
    std::vector<TensorCase> tensors;
    const int n_t = static_cast<int>(r.range(0, 8));
    for (int i = 0; i < n_t; ++i) {
      TensorCase t;
      t.name = fmt::format("blk.{}.w", i);
      t.type = types[r.range(0, 8)];
      const int64_t bs = traits(t.type).block_size;
      const int nd = static_cast<int>(r.range(1, 4));
      t.ne.push_back(bs * r.range(1, 3));
      for (int d = 1; d < nd; ++d) t.ne.push_back(r.range(1, 3));
      int64_t rows = 1;
      for (int d = 1; d < nd; ++d) rows *= t.ne[d];
      t.bytes.resize(static_cast<size_t>(row_bytes(t.type, t.ne[0]) * rows));
      for (auto& b : t.bytes) b = static_cast<uint8_t>(r.u());
      tensors.push_back(t);
    }
    int64_t total = 0;
    for (const auto& t : tensors) {
      w.add_tensor_bytes(t.name, t.type, t.ne, t.bytes);
      total += static_cast<int64_t>(t.bytes.size());
    }

    // Through a real file and the mmap path.
    const std::string path = fmt::format("{}/gguf_rt_{}_{}.gguf", ::testing::TempDir(), r.seed, iter);
    int64_t last_done = -1, calls = 0;
    Status s = w.write(path, [&](int64_t done, int64_t all) {
      EXPECT_EQ(all, total);
      EXPECT_GE(done, last_done);
      last_done = done;
      ++calls;
    });
    ASSERT_TRUE(s.is_ok()) << s.message();
    if (!tensors.empty()) {
      EXPECT_EQ(last_done, total);
      EXPECT_EQ(calls, static_cast<int64_t>(tensors.size()));
    }
    auto rd = Reader::open(path);
    ASSERT_TRUE(rd.is_ok()) << rd.status().message();
    const Reader& R = **rd;
    EXPECT_EQ(R.version(), 3u);
    EXPECT_EQ(R.alignment(), alignment);
    EXPECT_EQ(R.data_offset() % alignment, 0u);
    ASSERT_EQ(R.metadata().size(), expect.size());
    for (size_t i = 0; i < expect.size(); ++i) {
      EXPECT_EQ(R.metadata()[i].key, expect[i].key);
      EXPECT_TRUE(R.metadata()[i].value == expect[i].value)
          << expect[i].key << ": " << value_to_string(R.metadata()[i].value) << " vs "
          << value_to_string(expect[i].value);
      ASSERT_NE(R.find(expect[i].key), nullptr);
    }
    ASSERT_EQ(R.tensors().size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorInfo& ti = R.tensors()[i];
      EXPECT_EQ(ti.name, tensors[i].name);
      EXPECT_EQ(ti.type, tensors[i].type);
      EXPECT_EQ(ti.ne, tensors[i].ne);
      ASSERT_EQ(ti.nbytes, static_cast<int64_t>(tensors[i].bytes.size()));
      EXPECT_EQ(ti.offset % alignment, 0u);
      EXPECT_EQ(ti.data, R.base() + R.data_offset() + ti.offset);
      EXPECT_EQ(0, std::memcmp(ti.data, tensors[i].bytes.data(), tensors[i].bytes.size()));
      EXPECT_EQ(R.tensor(ti.name), &ti);
    }
    // to_bytes() gives the same bytes as the file.
    auto mem = w.to_bytes();
    ASSERT_TRUE(mem.is_ok());
    ASSERT_EQ(mem->size(), R.file_size());
    EXPECT_EQ(0, std::memcmp(mem->data(), R.base(), mem->size()));
    std::remove(path.c_str());
  }
}

// ggml requires tensor i to start exactly at the padded end of tensor i-1 and the data
// section to start at the padded end of the infos: compare the writer's bytes with
// the independent spec-built image of the same content.
TEST(GgufWriter, BytesMatchSpecImage) {
  testing::Spec spec;  // 'a' f32 [8,2], 'b' q8_0 [64], 'c' f16 [16]
  testing::Image im = testing::build(spec);
  const uint8_t* data = im.b.data() + im.at["data"];
  Writer w;
  w.set_string("general.architecture", "gpt-oss");
  w.set_u32("test.u32", 7);
  w.set_string_array("tokenizer.tokens", {"a", "bc"});
  w.add_tensor_bytes("a", DType::F32, {8, 2}, std::vector<uint8_t>(data, data + 64));
  w.add_tensor_bytes("b", DType::Q8_0, {64}, std::vector<uint8_t>(data + 64, data + 132));
  w.add_tensor("c", DType::F16, {16}, [&](uint8_t* dst, int64_t n) {
    ASSERT_EQ(n, 32);
    std::memcpy(dst, data + 160, 32);
  });
  auto bytes = w.to_bytes();
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().message();
  // The image's padding between 'b' and 'c' holds pattern bytes; the writer writes zeros.
  std::vector<uint8_t> want = im.b;
  for (size_t i = im.at["data"] + 132; i < im.at["data"] + 160; ++i) want[i] = 0;
  EXPECT_EQ(*bytes, want);
}

TEST(GgufWriter, TrailingPaddingAndNonDefaultAlignment) {
  Writer w(64);
  w.add_tensor_bytes("x", DType::Q8_0, {32}, std::vector<uint8_t>(34, 0xab));
  auto b = w.to_bytes();
  ASSERT_TRUE(b.is_ok());
  auto r = Reader::parse(b->data(), b->size(), "pad.gguf");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ((*r)->get_uint("general.alignment").value(), 64u);
  // 34 data bytes padded with zeros to 64: the file ends at data_offset + 64.
  EXPECT_EQ(b->size(), (*r)->data_offset() + 64);
  for (size_t i = (*r)->data_offset() + 34; i < b->size(); ++i) EXPECT_EQ((*b)[i], 0) << i;
}

TEST(GgufWriter, RejectsBadInput) {
  auto err = [](const Writer& w) {
    auto b = w.to_bytes();
    return b.is_ok() ? std::string("ok") : b.status().message();
  };
  {
    Writer w;
    w.add_tensor_bytes("x", DType::Q8_0, {48}, std::vector<uint8_t>(51));
    EXPECT_NE(err(w).find("tensor 'x': ne[0] = 48 is not a multiple of q8_0's block size 32"), std::string::npos)
        << err(w);
  }
  {
    Writer w;
    w.add_tensor_bytes("x", DType::F32, {1}, std::vector<uint8_t>(4));
    w.add_tensor_bytes("x", DType::F32, {1}, std::vector<uint8_t>(4));
    EXPECT_NE(err(w).find("tensor 'x': duplicate name"), std::string::npos) << err(w);
  }
  {
    Writer w;
    w.add_tensor_bytes(std::string(64, 'n'), DType::F32, {1}, std::vector<uint8_t>(4));
    EXPECT_NE(err(w).find("llama.cpp allows at most 63"), std::string::npos) << err(w);
  }
  {
    Writer w;
    w.add_tensor_bytes("x", DType::F32, {1, 0}, {});
    EXPECT_NE(err(w).find("tensor 'x': ne[1] = 0"), std::string::npos) << err(w);
  }
  {
    Writer w;
    w.set_value("k", make_uint(ValueType::UINT8, 300));
    EXPECT_NE(err(w).find("key 'k': value 300 does not fit uint8"), std::string::npos) << err(w);
  }
  {
    Writer w;
    w.set_value("k", make_array(ValueType::INT32, {make_int(ValueType::INT32, 1), make_string("x")}));
    EXPECT_NE(err(w).find("key 'k': [1]: item of type string in an array of int32"), std::string::npos) << err(w);
  }
  {
    Writer w(48);
    EXPECT_NE(err(w).find("alignment 48 is not a power of two"), std::string::npos) << err(w);
  }
  {
    Writer w;
    w.set_u32("general.alignment", 64);
    EXPECT_NE(err(w).find("key 'general.alignment': must be uint32 32"), std::string::npos) << err(w);
  }
  {
    const std::string dir = ::testing::TempDir() + "/no_such_dir_gguf/x.gguf";
    Writer w;
    Status s = w.write(dir);
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("cannot create"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace brass::gguf
