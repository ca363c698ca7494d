// Binding and checking of gpt-oss tensors (names and rules in weights.h).
#include "model/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gguf/reader.h"
#include "quant/quant.h"

namespace brass::model {
namespace {

std::string shape_str(const std::vector<int64_t>& ne) { return fmt::format("[{}]", fmt::join(ne, ", ")); }

class Binder {
 public:
  explicit Binder(const gguf::Reader& r) : r_(r) {}

  // Find `name` or one of its aliases; error names all of them.
  Result<const gguf::TensorInfo*> find(const std::string& name, std::initializer_list<std::string> aliases) const {
    if (const auto* t = r_.tensor(name)) return t;
    for (const auto& a : aliases)
      if (const auto* t = r_.tensor(a)) return t;
    std::string also;
    for (const auto& a : aliases) also += fmt::format(" (or '{}')", a);
    return Status::errorf("{}: tensor '{}'{}: missing", r_.path(), name, also);
  }

  Status check_shape(const gguf::TensorInfo& t, const std::vector<int64_t>& ne) const {
    if (t.ne != ne)
      return Status::errorf("{}: tensor '{}': expected shape {}, found {}", r_.path(), t.name, shape_str(ne),
                            shape_str(t.ne));
    return Status::ok();
  }

  Result<const float*> f32(const std::string& name, const std::vector<int64_t>& ne,
                           std::initializer_list<std::string> aliases = {}) const {
    BRASS_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name, aliases));
    BRASS_TRY(check_shape(*t, ne));
    if (t->type != DType::F32)
      return Status::errorf("{}: tensor '{}': expected type f32, found {}", r_.path(), t->name,
                            dtype_name(t->type));
    return reinterpret_cast<const float*>(t->data);
  }

  Result<WeightView> matrix(const std::string& name, const std::vector<int64_t>& ne,
                            std::initializer_list<std::string> aliases = {}) const {
    BRASS_ASSIGN_OR_RETURN(const gguf::TensorInfo* t, find(name, aliases));
    BRASS_TRY(check_shape(*t, ne));
    if (!quant::can_dequantize(t->type))
      return Status::errorf(
          "{}: tensor '{}': expected one of f32, f16, bf16, q8_0, q4_0, q5_0, mxfp4, q4_k, q5_k, q6_k, found {}",
          r_.path(), t->name, dtype_name(t->type));
    WeightView w;
    w.type = t->type;
    w.data = t->data;
    for (size_t i = 0; i < ne.size(); ++i) w.ne[i] = ne[i];
    return w;
  }

  Status refuse_fused(const std::string& name, const char* why) const {
    if (r_.tensor(name))
      return Status::errorf("{}: tensor '{}': {} is not supported; convert the file with llama.cpp's layout", r_.path(),
                            name, why);
    return Status::ok();
  }

 private:
  const gguf::Reader& r_;
};

}  // namespace

Result<GptOssWeights> bind_weights(const gguf::Reader& r, const GptOssConfig& c) {
  Binder b(r);
  GptOssWeights w;
  const int64_t E = c.n_embd, V = c.n_vocab, Q = c.q_dim(), KV = c.kv_dim();
  BRASS_ASSIGN_OR_RETURN(w.token_embd, b.matrix("token_embd.weight", {E, V}));
  BRASS_ASSIGN_OR_RETURN(w.output_norm, b.f32("output_norm.weight", {E}));
  BRASS_ASSIGN_OR_RETURN(w.output, b.matrix("output.weight", {E, V}));
  w.layers.resize(c.n_layer);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    auto n = [&](const char* s) { return fmt::format("blk.{}.{}", il, s); };
    BRASS_TRY(b.refuse_fused(n("attn_qkv.weight"), "a fused QKV projection (Ollama layout)"));
    BRASS_TRY(b.refuse_fused(n("ffn_gate_up_exps.weight"), "a fused, interleaved gate_up expert tensor (Ollama layout)"));
    BRASS_ASSIGN_OR_RETURN(L.attn_norm, b.f32(n("attn_norm.weight"), {E}));
    BRASS_ASSIGN_OR_RETURN(L.post_attn_norm, b.f32(n("post_attention_norm.weight"), {E}, {n("ffn_norm.weight")}));
    BRASS_ASSIGN_OR_RETURN(L.wq, b.matrix(n("attn_q.weight"), {E, Q}));
    BRASS_ASSIGN_OR_RETURN(L.bq, b.f32(n("attn_q.bias"), {Q}));
    BRASS_ASSIGN_OR_RETURN(L.wk, b.matrix(n("attn_k.weight"), {E, KV}));
    BRASS_ASSIGN_OR_RETURN(L.bk, b.f32(n("attn_k.bias"), {KV}));
    BRASS_ASSIGN_OR_RETURN(L.wv, b.matrix(n("attn_v.weight"), {E, KV}));
    BRASS_ASSIGN_OR_RETURN(L.bv, b.f32(n("attn_v.bias"), {KV}));
    BRASS_ASSIGN_OR_RETURN(L.wo, b.matrix(n("attn_output.weight"), {Q, E}, {n("attn_out.weight")}));
    BRASS_ASSIGN_OR_RETURN(L.bo, b.f32(n("attn_output.bias"), {E}, {n("attn_out.bias")}));
    BRASS_ASSIGN_OR_RETURN(L.sinks, b.f32(n("attn_sinks.weight"), {c.n_head}, {n("attn_sinks")}));
    BRASS_ASSIGN_OR_RETURN(L.router, b.matrix(n("ffn_gate_inp.weight"), {E, c.n_expert}));
    BRASS_ASSIGN_OR_RETURN(L.router_b, b.f32(n("ffn_gate_inp.bias"), {c.n_expert}));
    BRASS_ASSIGN_OR_RETURN(L.gate_exps, b.matrix(n("ffn_gate_exps.weight"), {E, c.n_ff, c.n_expert}));
    BRASS_ASSIGN_OR_RETURN(L.gate_b, b.f32(n("ffn_gate_exps.bias"), {c.n_ff, c.n_expert}));
    BRASS_ASSIGN_OR_RETURN(L.up_exps, b.matrix(n("ffn_up_exps.weight"), {E, c.n_ff, c.n_expert}));
    BRASS_ASSIGN_OR_RETURN(L.up_b, b.f32(n("ffn_up_exps.bias"), {c.n_ff, c.n_expert}));
    BRASS_ASSIGN_OR_RETURN(L.down_exps, b.matrix(n("ffn_down_exps.weight"), {c.n_ff, E, c.n_expert}));
    BRASS_ASSIGN_OR_RETURN(L.down_b, b.f32(n("ffn_down_exps.bias"), {E, c.n_expert}));
  }
  return w;
}

}  // namespace brass::model
