// RoPE frequencies for gpt-oss: plain RoPE or YaRN ("NTK by parts"), reduced to what
// the backend's rope op needs: one inverse frequency per rotated pair and one
// magnitude scale (the YaRN "concentration") applied to cos and sin.
//
// Two conventions, both verified against their sources:
//
// 1. Reference (default) — openai/gpt-oss gpt_oss/torch/model.py,
//    RotaryEmbedding._compute_concentration_and_inv_freq:
//      freq[j]  = base^(2j / head_dim), j = 0 .. head_dim/2 - 1
//      low  = (d/2) * ln(n_ctx_orig / (beta_fast * 2 pi)) / ln(base)   (ntk_beta = 32)
//      high = (d/2) * ln(n_ctx_orig / (beta_slow * 2 pi)) / ln(base)   (ntk_alpha = 1)
//      ramp[j] = (j - low) / (high - low);  mask = 1 - clamp(ramp, 0, 1)
//      inv_freq = (1 / (factor * freq)) * (1 - mask) + (1 / freq) * mask
//      concentration = 0.1 * ln(factor) + 1, multiplied into cos AND sin.
//    low/high are NOT rounded. (For gpt-oss: low = 8.093, high = 17.387, d/2 = 32.)
//    With factor <= 1: concentration 1, inv_freq = 1 / freq (plain RoPE).
//
// 2. llama.cpp (yarn_rounded) — ggml/src/ggml.c ggml_rope_yarn_corr_dims and
//    ggml-cpu/ops.cpp rope_yarn / rope_yarn_ramp:
//      corr_dim(beta) = n_dims * ln(n_ctx_orig / (beta * 2 pi)) / (2 ln(base))
//      low = max(0, floor(corr_dim(beta_fast))), high = min(n_dims - 1, ceil(corr_dim(beta_slow)))
//      ramp_mix = (1 - clamp((j - low) / max(0.001, high - low), 0, 1)) * ext_factor
//      theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix  (same blend)
//      mscale = attn_factor * (1 + 0.1 ln(1 / freq_scale))  when ext_factor != 0.
//    So for gpt-oss low = 8, high = 18. llama.cpp's context (src/llama-context.cpp)
//    sets yarn_ext_factor = 1 when rope.scaling.type == "yarn", and since PR 17945
//    sets yarn_attn_factor = get_mscale(factor) / (1 + 0.1 ln factor) = 1 for gpt-oss
//    (no rope.scaling.yarn_log_multiplier), so the net magnitude is again exactly
//    0.1 ln(factor) + 1, applied once, inside ggml's rope. (Ollama's gptoss model.go
//    relies on the same implicit ggml factor.) The GGUF key rope.scaling.attn_factor,
//    if present, multiplies it (gpt-oss files do not carry it).
//
// GGUF keys: llama.cpp's converter (convert_hf_to_gguf.py GptOssModel) writes
// rope.scaling.type = "yarn", rope.scaling.factor = 32, rope.scaling.original_context_length
// = 4096. When they are absent llama.cpp falls back to type "linear" (no YaRN ramp, no
// concentration) and n_ctx_orig = context_length — plain RoPE, which is wrong for
// gpt-oss; brass instead assumes the checkpoint's YaRN (see model/config.cpp).
#pragma once

#include <vector>

namespace brass::model {

struct RopeParams {
  int head_dim = 64;
  double freq_base = 150000.0;
  double factor = 32.0;          // YaRN scaling factor; <= 1 means plain RoPE
  int n_ctx_orig = 4096;         // original (pre-YaRN) context length
  double beta_fast = 32.0;       // torch's ntk_beta
  double beta_slow = 1.0;        // torch's ntk_alpha
  double attn_factor = 1.0;      // extra magnitude multiplier (rope.scaling.attn_factor)
  bool yarn_rounded = false;     // llama.cpp's floor/ceil correction range
};

struct RopeFreqs {
  std::vector<float> inv_freq;  // (head_dim / 2)
  float mscale = 1.0f;          // concentration * attn_factor
  double low = 0, high = 0;     // the correction range used (for logs and tests)
};

RopeFreqs compute_rope_freqs(const RopeParams& p);

}  // namespace brass::model
