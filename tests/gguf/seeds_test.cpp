// The committed fuzz seeds (fuzz/seeds/gguf/*.gguf) are tiny files made by
// gguf::Writer; they must stay valid. BRASS_REGEN_SEEDS=1 rewrites them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/half.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace brass::gguf {
namespace {

const std::string kSeedDir = std::string(BRASS_SOURCE_DIR) + "/fuzz/seeds/gguf";

void regen() {
  {
    Writer w;
    w.set_string("general.architecture", "gpt-oss");
    w.set_u32("gpt-oss.block_count", 2);
    w.set_f32("gpt-oss.rope.freq_base", 150000.0f);
    w.set_bool("test.flag", true);
    w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "<|end|>"});
    w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 3});
    w.add_tensor("token_embd.weight", DType::F16, {8, 3}, [](uint8_t* d, int64_t n) {
      for (int64_t i = 0; i < n / 2; ++i) {
        const uint16_t h = f32_to_f16(0.25f * static_cast<float>(i % 7) - 0.5f);
        std::memcpy(d + 2 * i, &h, 2);
      }
    });
    w.add_tensor("blk.0.ffn_down_exps.weight", DType::MXFP4, {32, 2}, [](uint8_t* d, int64_t n) {
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>(i * 37 + 120);
    });
    auto b = w.to_bytes();
    ASSERT_TRUE(b.is_ok());
    std::ofstream(kSeedDir + "/small_model.gguf", std::ios::binary)
        .write(reinterpret_cast<const char*>(b->data()), static_cast<std::streamsize>(b->size()));
  }
  {
    Writer w(64);
    w.set_value("nested", make_array(ValueType::ARRAY,
                                     {make_array(ValueType::INT8, {make_int(ValueType::INT8, -1)}),
                                      make_array(ValueType::FLOAT64, {make_float(ValueType::FLOAT64, 2.5)})}));
    w.set_value("u16", make_uint(ValueType::UINT16, 65535));
    w.set_value("i64", make_int(ValueType::INT64, -5));
    w.set_u64("u64", 1ull << 40);
    w.add_tensor_bytes("q8", DType::Q8_0, {32}, std::vector<uint8_t>(34, 3));
    w.add_tensor_bytes("q4k", DType::Q4_K, {256}, std::vector<uint8_t>(144, 0x11));
    auto b = w.to_bytes();
    ASSERT_TRUE(b.is_ok());
    std::ofstream(kSeedDir + "/types.gguf", std::ios::binary)
        .write(reinterpret_cast<const char*>(b->data()), static_cast<std::streamsize>(b->size()));
  }
  {
    Writer w;
    w.set_string("general.name", "empty");
    auto b = w.to_bytes();
    ASSERT_TRUE(b.is_ok());
    std::ofstream(kSeedDir + "/no_tensors.gguf", std::ios::binary)
        .write(reinterpret_cast<const char*>(b->data()), static_cast<std::streamsize>(b->size()));
  }
}

TEST(GgufSeeds, AreValidAndSmall) {
  if (const char* e = std::getenv("BRASS_REGEN_SEEDS"); e && std::string(e) == "1") regen();
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSeedDir)) {
    ++n;
    auto r = Reader::open(entry.path().string());
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_LT((*r)->file_size(), 4096u) << entry.path();
  }
  EXPECT_GE(n, 3);
}

}  // namespace
}  // namespace brass::gguf
