// GptOssConfig and weight binding: good files load with the values written; every
// kind of bad file (missing key, wrong key type, out-of-range value, missing tensor,
// wrong shape, wrong type, Ollama fused tensors) fails with an error naming the key or
// tensor and what was expected. Also YaRN tables against transformers' numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "gguf/reader.h"
#include "model/config.h"
#include "model/rope.h"
#include "model/weights.h"
#include "tiny_model.h"

namespace brass::model {
namespace {

using brass::testing::make_tiny;
using brass::testing::TempFile;
using brass::testing::TinyModel;
using brass::testing::TinySpec;

uint32_t fresh_seed() { return std::random_device{}(); }

// Write, open, load config (+ bind weights); returns the status of the first failure.
Status load_both(const TinyModel& m, const std::string& path) {
  BRASS_TRY(m.write(path));
  BRASS_ASSIGN_OR_RETURN(auto r, gguf::Reader::open(path));
  BRASS_ASSIGN_OR_RETURN(GptOssConfig c, load_config(*r));
  BRASS_ASSIGN_OR_RETURN(GptOssWeights w, bind_weights(*r, c));
  return Status::ok();
}

void expect_error(const Status& s, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.is_ok()) << "expected an error";
  for (const char* p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
}

TEST(Config, LoadsLlamaCppNaming) {
  TempFile f("good");
  TinySpec spec;
  TinyModel m = make_tiny(spec, fresh_seed());
  ASSERT_TRUE(m.write(f.path).is_ok());
  auto r = gguf::Reader::open(f.path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  auto c = load_config(**r);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->arch, "gpt-oss");
  EXPECT_EQ(c->n_layer, 4);
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->n_ff, 64);
  EXPECT_EQ(c->n_head, 4);
  EXPECT_EQ(c->n_head_kv, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->n_expert, 8);
  EXPECT_EQ(c->n_expert_used, 4);
  EXPECT_EQ(c->n_swa, 8);
  EXPECT_EQ(c->n_vocab, 96);
  EXPECT_EQ(c->n_ctx_train, 131072);
  EXPECT_FLOAT_EQ(c->rms_eps, 1e-5f);
  EXPECT_EQ(c->rope_scaling_type, "yarn");
  EXPECT_DOUBLE_EQ(c->rope_factor, 32.0);
  EXPECT_EQ(c->rope_n_ctx_orig, 4096);
  EXPECT_FALSE(c->rope_scaling_assumed);
  EXPECT_FLOAT_EQ(c->attn_scale(), 0.25f);  // 1/sqrt(16)
  EXPECT_TRUE(c->is_swa_layer(0));
  EXPECT_FALSE(c->is_swa_layer(1));
  EXPECT_TRUE(c->is_swa_layer(2));
  // full layers 1 and 3: 2 (K,V) * 2 layers * 2 kv heads * 16 * 2 bytes
  EXPECT_EQ(c->kv_bytes_per_token(2), 2 * 2 * 2 * 16 * 2);
  const std::string sum = config_summary(*c, **r, 2);
  EXPECT_NE(sum.find("ctx 131072"), std::string::npos) << sum;
  EXPECT_NE(sum.find("8x4 experts"), std::string::npos) << sum;
  EXPECT_NE(sum.find("bpw"), std::string::npos) << sum;
}

TEST(Config, SummaryCountsParametersAndBytes) {
  TempFile f("sum");
  TinyModel m = make_tiny(TinySpec{}, fresh_seed());
  ASSERT_TRUE(m.write(f.path).is_ok());
  auto r = gguf::Reader::open(f.path);
  ASSERT_TRUE(r.is_ok());
  auto c = load_config(**r);
  ASSERT_TRUE(c.is_ok());
  double params = 0, bytes = 0;
  for (const auto& t : m.tensors) {
    double n = 1;
    for (auto d : t.ne) n *= static_cast<double>(d);
    params += n;
    bytes += n / traits(t.type).block_size * traits(t.type).block_bytes;
  }
  const std::string sum = config_summary(*c, **r, 4);
  EXPECT_NE(sum.find(fmt::format("{:.2f}M params", params / 1e6)), std::string::npos) << sum;
  EXPECT_NE(sum.find(fmt::format("{:.2f} bpw", bytes * 8 / params)), std::string::npos) << sum;
}

TEST(Config, LoadsOllamaNaming) {
  TempFile f("ollama");
  TinySpec spec;
  spec.arch = "gptoss";
  TinyModel m = make_tiny(spec, fresh_seed());  // no expert_feed_forward_length, no rope.scaling.type
  // Ollama's tensor spellings
  for (auto& t : m.tensors) {
    auto rep = [&](const std::string& from, const std::string& to) {
      auto pos = t.name.find(from);
      if (pos != std::string::npos) t.name.replace(pos, from.size(), to);
    };
    rep("attn_output", "attn_out");
    rep("post_attention_norm", "ffn_norm");
  }
  Status s = load_both(m, f.path);
  ASSERT_TRUE(s.is_ok()) << s.message();
  auto r = gguf::Reader::open(f.path);
  auto c = load_config(**r);
  EXPECT_EQ(c->arch, "gptoss");
  EXPECT_EQ(c->n_ff, 64);
  EXPECT_EQ(c->rope_scaling_type, "yarn");
}

TEST(Config, MissingKeysAreNamed) {
  for (const char* k : {"gpt-oss.block_count", "gpt-oss.embedding_length", "gpt-oss.expert_feed_forward_length",
                        "gpt-oss.expert_count", "gpt-oss.expert_used_count", "gpt-oss.attention.head_count",
                        "gpt-oss.attention.head_count_kv", "gpt-oss.attention.key_length",
                        "gpt-oss.attention.layer_norm_rms_epsilon", "gpt-oss.attention.sliding_window",
                        "gpt-oss.rope.freq_base", "gpt-oss.context_length", "general.architecture"}) {
    SCOPED_TRACE(k);
    TempFile f("missing");
    TinyModel m = make_tiny(TinySpec{}, fresh_seed());
    m.erase_key(k);
    expect_error(load_both(m, f.path), {k, "not found"});
  }
}

TEST(Config, WrongTypesAndValuesAreNamed) {
  struct Case {
    const char* key;
    gguf::Value v;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"gpt-oss.block_count", gguf::make_string("24"), "expected an unsigned integer"},
      {"gpt-oss.attention.layer_norm_rms_epsilon", gguf::make_string("1e-5"), "expected a float"},
      {"gpt-oss.rope.scaling.type", gguf::make_uint(gguf::ValueType::UINT32, 2), "expected string"},
      {"gpt-oss.attention.head_count_kv", gguf::make_uint(gguf::ValueType::UINT32, 3), "must divide"},
      {"gpt-oss.expert_used_count", gguf::make_uint(gguf::ValueType::UINT32, 9), "[1, 8]"},
      {"gpt-oss.attention.value_length", gguf::make_uint(gguf::ValueType::UINT32, 32), "expected 16"},
      {"gpt-oss.attention.key_length", gguf::make_uint(gguf::ValueType::UINT32, 15), "even"},
      {"gpt-oss.attention.layer_norm_rms_epsilon", gguf::make_float(gguf::ValueType::FLOAT32, -1.0), "expected a value in"},
      {"gpt-oss.rope.scaling.type", gguf::make_string("longrope"), "\"yarn\" or \"none\""},
      {"general.architecture", gguf::make_string("llama"), "\"gpt-oss\" or \"gptoss\""},
  };
  for (const auto& cs : cases) {
    SCOPED_TRACE(cs.key);
    TempFile f("type");
    TinyModel m = make_tiny(TinySpec{}, fresh_seed());
    m.key(cs.key)->value = cs.v;
    expect_error(load_both(m, f.path), {cs.key, cs.expect});
  }
  // sliding_window_pattern other than 2
  TempFile f("pattern");
  TinyModel m = make_tiny(TinySpec{}, fresh_seed());
  m.keys.push_back({"gpt-oss.attention.sliding_window_pattern", gguf::make_uint(gguf::ValueType::UINT32, 3)});
  expect_error(load_both(m, f.path), {"gpt-oss.attention.sliding_window_pattern", "period 2"});
}

TEST(Config, AbsentRopeScalingAssumesGptOssYarn) {
  TempFile f("norope");
  TinySpec spec;
  spec.rope_keys = false;
  TinyModel m = make_tiny(spec, fresh_seed());
  ASSERT_TRUE(m.write(f.path).is_ok());
  auto r = gguf::Reader::open(f.path);
  auto c = load_config(**r);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_TRUE(c->rope_scaling_assumed);
  EXPECT_EQ(c->rope_scaling_type, "yarn");
  EXPECT_DOUBLE_EQ(c->rope_factor, 32.0);
  EXPECT_EQ(c->rope_n_ctx_orig, 4096);
}

TEST(Weights, BindsEveryTensorAsZeroCopyView) {
  TempFile f("bind");
  TinyModel m = make_tiny(TinySpec{}, fresh_seed());
  ASSERT_TRUE(m.write(f.path).is_ok());
  auto r = gguf::Reader::open(f.path);
  auto c = load_config(**r);
  auto w = bind_weights(**r, *c);
  ASSERT_TRUE(w.is_ok()) << w.status().message();
  EXPECT_EQ(w->layers.size(), 4u);
  EXPECT_EQ(w->token_embd.data, (*r)->tensor("token_embd.weight")->data);
  EXPECT_EQ(w->layers[3].down_exps.data, (*r)->tensor("blk.3.ffn_down_exps.weight")->data);
  EXPECT_EQ(w->layers[3].down_exps.type, DType::MXFP4);
  EXPECT_EQ(w->layers[3].down_exps.ne[0], 64);
  EXPECT_EQ(w->layers[3].down_exps.ne[2], 8);
  EXPECT_EQ(static_cast<const void*>(w->layers[2].sinks), (*r)->tensor("blk.2.attn_sinks.weight")->data);
}

TEST(Weights, MissingTensorIsNamed) {
  for (const char* t : {"output.weight", "blk.2.attn_sinks.weight", "blk.1.ffn_up_exps.bias", "blk.3.attn_q.bias",
                        "blk.0.post_attention_norm.weight"}) {
    SCOPED_TRACE(t);
    TempFile f("missing");
    TinyModel m = make_tiny(TinySpec{}, fresh_seed());
    m.erase_tensor(t);
    expect_error(load_both(m, f.path), {t, "missing"});
  }
}

TEST(Weights, WrongShapeIsNamedWithExpectedAndFound) {
  TempFile f("shape");
  TinyModel m = make_tiny(TinySpec{}, fresh_seed());
  m.tensor("blk.1.ffn_gate_exps.weight")->ne = {64, 64, 7};
  expect_error(load_both(m, f.path), {"blk.1.ffn_gate_exps.weight", "expected shape [64, 64, 8]", "found [64, 64, 7]"});
  TempFile g("shape2");
  TinyModel m2 = make_tiny(TinySpec{}, fresh_seed());
  m2.tensor("blk.0.attn_k.weight")->ne = {64, 64};
  expect_error(load_both(m2, g.path), {"blk.0.attn_k.weight", "[64, 32]", "[64, 64]"});
}

TEST(Weights, WrongTypeIsNamed) {
  TempFile f("type");
  TinyModel m = make_tiny(TinySpec{}, fresh_seed());
  m.tensor("blk.2.attn_norm.weight")->type = DType::F16;
  expect_error(load_both(m, f.path), {"blk.2.attn_norm.weight", "expected type f32", "f16"});
}

TEST(Weights, OllamaFusedTensorsAreRefused) {
  TempFile f("fused");
  TinyModel m = make_tiny(TinySpec{}, fresh_seed());
  m.tensors.push_back({"blk.0.attn_qkv.weight", DType::F32, {64, 128}, 1.0f});
  expect_error(load_both(m, f.path), {"blk.0.attn_qkv.weight", "not supported"});
}

// ---- YaRN ----

TEST(Rope, ReferenceConventionMatchesTransformersFixture) {
  std::ifstream in(std::string(BRASS_TEST_DATA_DIR) + "/hf/bf16/reference.json");
  ASSERT_TRUE(in) << "missing tests/data/hf/bf16/reference.json";
  nlohmann::json j = nlohmann::json::parse(in);
  std::ifstream cin(std::string(BRASS_TEST_DATA_DIR) + "/hf/bf16/config.json");
  nlohmann::json cfg = nlohmann::json::parse(cin);
  RopeParams p;
  p.head_dim = cfg["head_dim"];
  p.freq_base = cfg["rope_theta"];
  p.factor = cfg["rope_scaling"]["factor"];
  p.n_ctx_orig = cfg["rope_scaling"]["original_max_position_embeddings"];
  p.beta_fast = cfg["rope_scaling"]["beta_fast"];
  p.beta_slow = cfg["rope_scaling"]["beta_slow"];
  RopeFreqs f = compute_rope_freqs(p);  // transformers with truncate=false: unrounded range
  const auto& want = j["transformers_inv_freq"];
  ASSERT_EQ(f.inv_freq.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(f.inv_freq[i], want[i].get<double>(), 1e-6 * want[i].get<double>() + 1e-12) << i;
  EXPECT_NEAR(f.mscale, j["transformers_attention_scaling"].get<double>(), 1e-6);
}

TEST(Rope, GptOssCorrectionRangeByHand) {
  RopeParams p;  // gpt-oss: head_dim 64, base 150000, factor 32, orig 4096, beta 32/1
  RopeFreqs ref = compute_rope_freqs(p);
  // low = 32 ln(4096 / (64 pi)) / ln 150000, high = 32 ln(4096 / (2 pi)) / ln 150000
  EXPECT_NEAR(ref.low, 32 * std::log(4096 / (64 * M_PI)) / std::log(150000.0), 1e-9);
  EXPECT_NEAR(ref.low, 8.09278, 1e-4);
  EXPECT_NEAR(ref.high, 17.39802, 1e-4);
  EXPECT_NEAR(ref.mscale, 1.0 + 0.1 * std::log(32.0), 1e-6);
  p.yarn_rounded = true;
  RopeFreqs ll = compute_rope_freqs(p);
  EXPECT_EQ(ll.low, 8.0);
  EXPECT_EQ(ll.high, 18.0);
  EXPECT_EQ(ll.mscale, ref.mscale);
  // pairs below low keep the original frequency, above high are divided by the factor
  for (int j : {0, 5, 8}) EXPECT_NEAR(ref.inv_freq[j], std::pow(150000.0, -2.0 * j / 64), 1e-7 * ref.inv_freq[j]);
  for (int j : {18, 25, 31})
    EXPECT_NEAR(ref.inv_freq[j], std::pow(150000.0, -2.0 * j / 64) / 32, 1e-6 * ref.inv_freq[j]);
  // in between the two conventions differ (j = 12: ramp (12-8.09)/9.30 vs (12-8)/10)
  const double f12 = std::pow(150000.0, -2.0 * 12 / 64);
  const double r_ref = (12 - ref.low) / (ref.high - ref.low), r_ll = 0.4;
  EXPECT_NEAR(ref.inv_freq[12], f12 / 32 * r_ref + f12 * (1 - r_ref), 1e-6 * f12);
  EXPECT_NEAR(ll.inv_freq[12], f12 / 32 * r_ll + f12 * (1 - r_ll), 1e-6 * f12);
  // plain RoPE when factor <= 1
  p.factor = 1.0;
  RopeFreqs plain = compute_rope_freqs(p);
  EXPECT_EQ(plain.mscale, 1.0f);
  EXPECT_NEAR(plain.inv_freq[20], std::pow(150000.0, -40.0 / 64), 1e-9);
}

}  // namespace
}  // namespace brass::model
