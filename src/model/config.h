// GptOssConfig: the hyperparameters of a gpt-oss GGUF file, read from its metadata,
// validated (every error names the key, the expected type/range and what was found),
// plus derived values and a one-line summary.
//
// Two key namings are accepted, chosen by general.architecture:
// - "gpt-oss" (llama.cpp, src/llama-arch.cpp LLM_ARCH_OPENAI_MOE): keys gpt-oss.*,
//   n_ff from expert_feed_forward_length.
// - "gptoss" (Ollama, convert/convert_gptoss.go): keys gptoss.*, no
//   expert_feed_forward_length (n_ff from feed_forward_length), no rope.scaling.type.
//
// Keys (prefix omitted): block_count, context_length, embedding_length,
// [expert_]feed_forward_length, expert_count, expert_used_count, attention.head_count,
// attention.head_count_kv, attention.key_length (required: n_embd / n_head = 45 is not the
// head size), attention.value_length (optional, must equal key_length),
// attention.layer_norm_rms_epsilon, attention.sliding_window, attention.sliding_window_pattern
// (optional, must be 2), rope.freq_base, rope.scaling.{type, factor,
// original_context_length, attn_factor, yarn_beta_fast, yarn_beta_slow} (optional).
// n_vocab comes from the token_embd.weight tensor (gpt-oss files carry no vocab_size key).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/rope.h"

namespace brass::gguf {
class Reader;
}

namespace brass::model {

struct GptOssConfig {
  std::string arch;  // "gpt-oss" or "gptoss"
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;  // context_length
  int64_t n_embd = 0;
  int64_t n_ff = 0;         // per expert
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_swa = 0;        // sliding window (keys per query, self included)
  int64_t n_vocab = 0;
  float rms_eps = 1e-5f;

  // RoPE / YaRN
  double rope_freq_base = 150000.0;
  std::string rope_scaling_type;  // "yarn" or "none"
  double rope_factor = 1.0;
  int64_t rope_n_ctx_orig = 0;
  double rope_attn_factor = 1.0;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  bool rope_scaling_assumed = false;  // rope.scaling.* absent: gpt-oss YaRN assumed

  // gpt-oss constants (not in GGUF): OAI SwiGLU and attention scale.
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;

  // ---- derived ----
  bool is_swa_layer(int64_t il) const { return il % 2 == 0; }  // even layers slide
  int64_t n_rep() const { return n_head / n_head_kv; }
  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  float attn_scale() const;
  int64_t n_swa_layers() const { return (n_layer + 1) / 2; }
  int64_t n_full_layers() const { return n_layer / 2; }
  // K+V bytes per token of the full-attention layers (the part that grows with context),
  // for a cache element of `elt_bytes` bytes.
  int64_t kv_bytes_per_token(int64_t elt_bytes) const { return 2 * n_full_layers() * kv_dim() * elt_bytes; }
  RopeParams rope_params(bool yarn_rounded) const;
};

// Read and validate. Errors are prefixed with the reader's path.
Result<GptOssConfig> load_config(const gguf::Reader& r);

// "gpt-oss 20.91B (or 0.12M) params, 12.82 GiB, 5.27 bpw, ctx 131072, 24 layers, 32x4 experts,
//  KV 48 KiB/token (f16, full layers) + sliding window". Weight totals from the reader.
std::string config_summary(const GptOssConfig& c, const gguf::Reader& r, int64_t kv_elt_bytes);

}  // namespace brass::model
