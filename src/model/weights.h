// GptOssWeights: every tensor of a gpt-oss GGUF bound by name with its shape and type
// checked (errors name the tensor, the expected shape/types and what was found).
// Bound weights are zero-copy views into the reader's mmap: type + pointer + ne.
//
// Names (llama.cpp src/llama-arch.cpp, LLM_ARCH_OPENAI_MOE; shapes in ggml order from
// src/models/openai-moe.cpp load_arch_tensors):
//   token_embd.weight {n_embd, n_vocab}   output_norm.weight {n_embd}   output.weight {n_embd, n_vocab}
//   blk.N.attn_norm.weight {n_embd}       blk.N.post_attention_norm.weight {n_embd}
//   blk.N.attn_q.weight {n_embd, n_head*head_dim} (+ .bias), attn_k / attn_v {n_embd, n_head_kv*head_dim}
//   blk.N.attn_output.weight {n_head*head_dim, n_embd} (+ .bias)   blk.N.attn_sinks.weight {n_head}
//   blk.N.ffn_gate_inp.weight {n_embd, n_expert} (+ .bias {n_expert})
//   blk.N.ffn_gate_exps / ffn_up_exps .weight {n_embd, n_ff, n_expert} (+ .bias {n_ff, n_expert})
//   blk.N.ffn_down_exps.weight {n_ff, n_embd, n_expert} (+ .bias {n_embd, n_expert})
// Ollama's spellings are accepted as aliases: attn_out (attn_output), ffn_norm
// (post_attention_norm), attn_sinks without ".weight". Ollama's fused attn_qkv and
// ffn_gate_up_exps (interleaved gate/up, HF MXFP4 nibble order) are refused with a clear
// error: they need a repack (a converter's job).
// Types: norms, biases and sinks must be F32; matrices any type quant::dequantize_row
// reads (F32, F16, BF16, Q8_0, Q4_0, Q5_0, MXFP4, K-quants).
#pragma once

#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/config.h"

namespace brass::gguf {
class Reader;
}

namespace brass::model {

using backend::WeightView;

struct LayerWeights {
  const float* attn_norm = nullptr;       // (n_embd)
  const float* post_attn_norm = nullptr;  // (n_embd)
  WeightView wq, wk, wv, wo;
  const float* bq = nullptr;  // (n_head * head_dim)
  const float* bk = nullptr;  // (n_head_kv * head_dim)
  const float* bv = nullptr;  // (n_head_kv * head_dim)
  const float* bo = nullptr;  // (n_embd)
  const float* sinks = nullptr;  // (n_head)
  WeightView router;
  const float* router_b = nullptr;  // (n_expert)
  WeightView gate_exps, up_exps, down_exps;
  const float* gate_b = nullptr;  // (n_expert, n_ff)
  const float* up_b = nullptr;    // (n_expert, n_ff)
  const float* down_b = nullptr;  // (n_expert, n_embd)
};

struct GptOssWeights {
  WeightView token_embd;
  const float* output_norm = nullptr;  // (n_embd)
  WeightView output;
  std::vector<LayerWeights> layers;
};

Result<GptOssWeights> bind_weights(const gguf::Reader& r, const GptOssConfig& c);

}  // namespace brass::model
