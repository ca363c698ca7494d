// Test-only builder of small random gpt-oss GGUF files (gguf::Writer + quant):
// MXFP4 experts, Q8_0/F16/F32 matrices, F32 norms/biases/sinks, llama.cpp key and
// tensor names. Tests mutate the key/tensor lists before writing to provoke errors.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "quant/quant.h"

namespace brass::testing {

struct TinySpec {
  std::string arch = "gpt-oss";
  int64_t n_layer = 4, n_embd = 64, n_ff = 64, n_head = 4, n_head_kv = 2, head_dim = 16;
  int64_t n_expert = 8, n_expert_used = 4, n_swa = 8, n_vocab = 96, n_ctx = 131072;
  DType mat_type = DType::Q8_0;    // attention q/k/v/o, token_embd, output
  DType exp_type = DType::MXFP4;   // experts
  DType router_type = DType::F32;
  bool rope_keys = true;
};

struct TinyTensor {
  std::string name;
  DType type;
  std::vector<int64_t> ne;
  float amp;  // values uniform in [-amp, amp] before quantization
};

struct TinyModel {
  uint32_t seed = 0;
  std::vector<gguf::KeyValue> keys;
  std::vector<TinyTensor> tensors;

  gguf::KeyValue* key(const std::string& k) {
    for (auto& kv : keys)
      if (kv.key == k) return &kv;
    return nullptr;
  }
  void erase_key(const std::string& k) {
    keys.erase(std::remove_if(keys.begin(), keys.end(), [&](auto& kv) { return kv.key == k; }), keys.end());
  }
  TinyTensor* tensor(const std::string& n) {
    for (auto& t : tensors)
      if (t.name == n) return &t;
    return nullptr;
  }
  void erase_tensor(const std::string& n) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(), [&](auto& t) { return t.name == n; }),
                  tensors.end());
  }

  Status write(const std::string& path) const {
    gguf::Writer w;
    for (const auto& kv : keys) w.set_value(kv.key, kv.value);
    uint32_t s = seed;
    for (const auto& t : tensors) {
      const uint32_t tseed = s++;
      const TinyTensor tt = t;
      w.add_tensor(t.name, t.type, t.ne, [tt, tseed](uint8_t* dst, int64_t nbytes) {
        std::mt19937 gen(tseed);
        std::uniform_real_distribution<float> dist(-tt.amp, tt.amp);
        const int64_t n_in = tt.ne[0];
        const int64_t rows = nbytes / row_bytes(tt.type, n_in);
        std::vector<float> row(n_in);
        for (int64_t r = 0; r < rows; ++r) {
          for (auto& x : row) x = dist(gen);
          quant::quantize_row(tt.type, row.data(), dst + r * row_bytes(tt.type, n_in), n_in);
        }
      });
    }
    return w.write(path);
  }
};

inline TinyModel make_tiny(const TinySpec& s, uint32_t seed) {
  using gguf::ValueType;
  TinyModel m;
  m.seed = seed;
  const std::string p = s.arch + ".";
  auto u32 = [&](const std::string& k, uint64_t v) { m.keys.push_back({p + k, gguf::make_uint(ValueType::UINT32, v)}); };
  auto f32 = [&](const std::string& k, double v) { m.keys.push_back({p + k, gguf::make_float(ValueType::FLOAT32, v)}); };
  m.keys.push_back({"general.architecture", gguf::make_string(s.arch)});
  u32("block_count", s.n_layer);
  u32("context_length", s.n_ctx);
  u32("embedding_length", s.n_embd);
  u32("feed_forward_length", s.n_ff);
  if (s.arch == "gpt-oss") u32("expert_feed_forward_length", s.n_ff);
  u32("expert_count", s.n_expert);
  u32("expert_used_count", s.n_expert_used);
  u32("attention.head_count", s.n_head);
  u32("attention.head_count_kv", s.n_head_kv);
  u32("attention.key_length", s.head_dim);
  u32("attention.value_length", s.head_dim);
  f32("attention.layer_norm_rms_epsilon", 1e-5);
  u32("attention.sliding_window", s.n_swa);
  f32("rope.freq_base", 150000.0);
  if (s.rope_keys) {
    if (s.arch == "gpt-oss") m.keys.push_back({p + "rope.scaling.type", gguf::make_string("yarn")});
    f32("rope.scaling.factor", 32.0);
    u32("rope.scaling.original_context_length", 4096);
  }
  const int64_t E = s.n_embd, Q = s.n_head * s.head_dim, KV = s.n_head_kv * s.head_dim;
  const float a_in = 1.0f / std::sqrt(static_cast<float>(E));
  m.tensors.push_back({"token_embd.weight", s.mat_type, {E, s.n_vocab}, 1.0f});
  m.tensors.push_back({"output_norm.weight", DType::F32, {E}, 1.0f});
  m.tensors.push_back({"output.weight", s.mat_type, {E, s.n_vocab}, a_in * 2});
  for (int64_t il = 0; il < s.n_layer; ++il) {
    auto n = [&](const char* x) { return "blk." + std::to_string(il) + "." + x; };
    m.tensors.push_back({n("attn_norm.weight"), DType::F32, {E}, 1.0f});
    m.tensors.push_back({n("post_attention_norm.weight"), DType::F32, {E}, 1.0f});
    m.tensors.push_back({n("attn_q.weight"), s.mat_type, {E, Q}, a_in * 2});
    m.tensors.push_back({n("attn_q.bias"), DType::F32, {Q}, 0.2f});
    m.tensors.push_back({n("attn_k.weight"), s.mat_type, {E, KV}, a_in * 2});
    m.tensors.push_back({n("attn_k.bias"), DType::F32, {KV}, 0.2f});
    m.tensors.push_back({n("attn_v.weight"), s.mat_type, {E, KV}, a_in * 2});
    m.tensors.push_back({n("attn_v.bias"), DType::F32, {KV}, 0.2f});
    m.tensors.push_back({n("attn_output.weight"), s.mat_type, {Q, E}, 1.0f / std::sqrt(static_cast<float>(Q))});
    m.tensors.push_back({n("attn_output.bias"), DType::F32, {E}, 0.1f});
    m.tensors.push_back({n("attn_sinks.weight"), DType::F32, {s.n_head}, 1.0f});
    m.tensors.push_back({n("ffn_gate_inp.weight"), s.router_type, {E, s.n_expert}, a_in * 3});
    m.tensors.push_back({n("ffn_gate_inp.bias"), DType::F32, {s.n_expert}, 0.5f});
    m.tensors.push_back({n("ffn_gate_exps.weight"), s.exp_type, {E, s.n_ff, s.n_expert}, a_in * 4});
    m.tensors.push_back({n("ffn_gate_exps.bias"), DType::F32, {s.n_ff, s.n_expert}, 0.5f});
    m.tensors.push_back({n("ffn_up_exps.weight"), s.exp_type, {E, s.n_ff, s.n_expert}, a_in * 4});
    m.tensors.push_back({n("ffn_up_exps.bias"), DType::F32, {s.n_ff, s.n_expert}, 0.5f});
    m.tensors.push_back({n("ffn_down_exps.weight"), s.exp_type, {s.n_ff, E, s.n_expert},
                         1.0f / std::sqrt(static_cast<float>(s.n_ff))});
    m.tensors.push_back({n("ffn_down_exps.bias"), DType::F32, {E, s.n_expert}, 0.1f});
  }
  return m;
}

// A unique temp file path for this test, removed by the destructor.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::string(::testing::TempDir()) + "brass_" + info->test_suite_name() + "_" + info->name() + "_" +
           tag + "_" + std::to_string(::getpid()) + ".gguf";
    std::replace(path.begin(), path.end(), '/', '_');
    path = std::string(::testing::TempDir()) + path.substr(std::string(::testing::TempDir()).size());
  }
  ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace brass::testing
