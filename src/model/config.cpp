// GptOssConfig loading and validation (key list and naming in config.h).
#include "model/config.h"

#include <cmath>

#include <fmt/format.h>

#include "core/log.h"
#include "gguf/reader.h"

namespace brass::model {
namespace {

// Reads prefixed keys from one reader, with range checks that name the full key.
class KeyReader {
 public:
  KeyReader(const gguf::Reader& r, std::string prefix) : r_(r), prefix_(std::move(prefix)) {}

  std::string key(const char* suffix) const { return prefix_ + "." + suffix; }
  bool has(const char* suffix) const { return r_.find(key(suffix)) != nullptr; }

  // Required unsigned integer in [lo, hi].
  Result<int64_t> count(const char* suffix, int64_t lo, int64_t hi) const {
    const std::string k = key(suffix);
    BRASS_ASSIGN_OR_RETURN(uint64_t v, r_.get_uint(k));
    if (v < static_cast<uint64_t>(lo) || v > static_cast<uint64_t>(hi))
      return Status::errorf("{}: key '{}': expected a value in [{}, {}], found {}", r_.path(), k, lo,
                            hi, v);
    return static_cast<int64_t>(v);
  }
  // Required float in (lo, hi) exclusive of lo, inclusive of hi.
  Result<double> real(const char* suffix, double lo, double hi) const {
    const std::string k = key(suffix);
    BRASS_ASSIGN_OR_RETURN(double v, r_.get_float(k));
    if (!(v > lo && v <= hi))
      return Status::errorf("{}: key '{}': expected a value in ({}, {}], found {}", r_.path(), k, lo,
                            hi, v);
    return v;
  }

 private:
  const gguf::Reader& r_;
  std::string prefix_;
};

}  // namespace

float GptOssConfig::attn_scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

RopeParams GptOssConfig::rope_params(bool yarn_rounded) const {
  RopeParams p;
  p.head_dim = static_cast<int>(head_dim);
  p.freq_base = rope_freq_base;
  p.factor = rope_scaling_type == "yarn" ? rope_factor : 1.0;
  p.n_ctx_orig = static_cast<int>(rope_n_ctx_orig);
  p.beta_fast = yarn_beta_fast;
  p.beta_slow = yarn_beta_slow;
  p.attn_factor = rope_attn_factor;
  p.yarn_rounded = yarn_rounded;
  return p;
}

Result<GptOssConfig> load_config(const gguf::Reader& r) {
  GptOssConfig c;
  BRASS_ASSIGN_OR_RETURN(c.arch, r.get_string("general.architecture"));
  if (c.arch != "gpt-oss" && c.arch != "gptoss")
    return Status::errorf("{}: key 'general.architecture': expected \"gpt-oss\" or \"gptoss\", found \"{}\"",
                          r.path(), c.arch);
  KeyReader k(r, c.arch);
  constexpr int64_t kBig = int64_t{1} << 24;
  BRASS_ASSIGN_OR_RETURN(c.n_layer, k.count("block_count", 1, 4096));
  BRASS_ASSIGN_OR_RETURN(c.n_ctx_train, k.count("context_length", 1, int64_t{1} << 30));
  BRASS_ASSIGN_OR_RETURN(c.n_embd, k.count("embedding_length", 1, kBig));
  if (c.arch == "gpt-oss" || k.has("expert_feed_forward_length")) {
    BRASS_ASSIGN_OR_RETURN(c.n_ff, k.count("expert_feed_forward_length", 1, kBig));
  } else {
    BRASS_ASSIGN_OR_RETURN(c.n_ff, k.count("feed_forward_length", 1, kBig));
  }
  BRASS_ASSIGN_OR_RETURN(c.n_expert, k.count("expert_count", 1, 1 << 16));
  BRASS_ASSIGN_OR_RETURN(c.n_expert_used, k.count("expert_used_count", 1, c.n_expert));
  BRASS_ASSIGN_OR_RETURN(c.n_head, k.count("attention.head_count", 1, 1 << 16));
  BRASS_ASSIGN_OR_RETURN(c.n_head_kv, k.count("attention.head_count_kv", 1, c.n_head));
  if (c.n_head % c.n_head_kv != 0)
    return Status::errorf("{}: key '{}': head_count_kv {} must divide head_count {}", r.path(),
                          k.key("attention.head_count_kv"), c.n_head_kv, c.n_head);
  BRASS_ASSIGN_OR_RETURN(c.head_dim, k.count("attention.key_length", 2, 1 << 12));
  if (c.head_dim % 2 != 0)
    return Status::errorf("{}: key '{}': expected an even head size (RoPE pairs), found {}",
                          r.path(), k.key("attention.key_length"), c.head_dim);
  if (k.has("attention.value_length")) {
    BRASS_ASSIGN_OR_RETURN(int64_t vl, k.count("attention.value_length", 1, 1 << 12));
    if (vl != c.head_dim)
      return Status::errorf("{}: key '{}': expected {} (= key_length), found {}", r.path(),
                            k.key("attention.value_length"), c.head_dim, vl);
  }
  BRASS_ASSIGN_OR_RETURN(double eps, k.real("attention.layer_norm_rms_epsilon", 0.0, 0.1));
  c.rms_eps = static_cast<float>(eps);
  BRASS_ASSIGN_OR_RETURN(c.n_swa, k.count("attention.sliding_window", 1, int64_t{1} << 30));
  if (k.has("attention.sliding_window_pattern")) {
    // llama.cpp reads a period (default 2: layers il % 2 == 0 slide). gpt-oss uses 2.
    BRASS_ASSIGN_OR_RETURN(int64_t period, k.count("attention.sliding_window_pattern", 0, 1 << 20));
    if (period != 2)
      return Status::errorf("{}: key '{}': only period 2 (even layers slide) is supported, found {}",
                            r.path(), k.key("attention.sliding_window_pattern"), period);
  }
  BRASS_ASSIGN_OR_RETURN(c.rope_freq_base, k.real("rope.freq_base", 1.0, 1e12));

  // RoPE scaling. Absent keys: gpt-oss was trained with YaRN factor 32 over 4096 and
  // every position (even < 4096) uses the scaled frequencies; llama.cpp would fall back
  // to plain RoPE here, which is wrong for this model, so brass assumes the checkpoint's
  // values and says so.
  const bool has_type = k.has("rope.scaling.type");
  const bool has_factor = k.has("rope.scaling.factor");
  if (has_type) {
    BRASS_ASSIGN_OR_RETURN(c.rope_scaling_type, r.get_string(k.key("rope.scaling.type")));
    if (c.rope_scaling_type != "yarn" && c.rope_scaling_type != "none")
      return Status::errorf("{}: key '{}': expected \"yarn\" or \"none\", found \"{}\"", r.path(),
                            k.key("rope.scaling.type"), c.rope_scaling_type);
  } else {
    c.rope_scaling_type = "yarn";  // Ollama files carry factor but no type
  }
  if (has_factor) {
    BRASS_ASSIGN_OR_RETURN(c.rope_factor, k.real("rope.scaling.factor", 0.0, 1e6));
  } else {
    c.rope_factor = 32.0;
  }
  if (k.has("rope.scaling.original_context_length")) {
    BRASS_ASSIGN_OR_RETURN(c.rope_n_ctx_orig,
                           k.count("rope.scaling.original_context_length", 1, int64_t{1} << 30));
  } else {
    c.rope_n_ctx_orig = has_factor ? c.n_ctx_train : 4096;
  }
  if (!has_type && !has_factor) {
    c.rope_scaling_assumed = true;
    BRASS_LOG_WARN("{}: no {}.rope.scaling.* keys; assuming gpt-oss YaRN (factor 32, original context 4096)",
                   r.path(), c.arch);
  }
  if (k.has("rope.scaling.attn_factor")) {
    BRASS_ASSIGN_OR_RETURN(c.rope_attn_factor, k.real("rope.scaling.attn_factor", 0.0, 100.0));
  }
  if (k.has("rope.scaling.yarn_beta_fast")) {
    BRASS_ASSIGN_OR_RETURN(c.yarn_beta_fast, k.real("rope.scaling.yarn_beta_fast", 0.0, 1e6));
  }
  if (k.has("rope.scaling.yarn_beta_slow")) {
    BRASS_ASSIGN_OR_RETURN(c.yarn_beta_slow, k.real("rope.scaling.yarn_beta_slow", 0.0, 1e6));
  }
  if (c.rope_scaling_type == "yarn" && c.rope_factor > 1.0) {
    // torch asserts 0 < low < high < d_half - 1; the ramp is meaningless otherwise.
    RopeFreqs f = compute_rope_freqs(c.rope_params(false));
    if (!(f.low > 0 && f.low < f.high && f.high < c.head_dim / 2.0 - 1))
      return Status::errorf(
          "{}: keys '{}', '{}': YaRN correction range [{:.3f}, {:.3f}] must satisfy 0 < low < high < "
          "head_dim/2 - 1 = {}",
          r.path(), k.key("rope.scaling.original_context_length"), k.key("rope.freq_base"), f.low,
          f.high, c.head_dim / 2 - 1);
  }

  const gguf::TensorInfo* emb = r.tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2)
    return Status::errorf("{}: tensor 'token_embd.weight': expected a 2-D tensor (n_vocab from its shape), found {}",
                          r.path(), emb ? emb->shape_str() : std::string("nothing"));
  c.n_vocab = emb->ne[1];
  return c;
}

std::string config_summary(const GptOssConfig& c, const gguf::Reader& r, int64_t kv_elt_bytes) {
  double n_params = 0, n_bytes = 0;
  for (const auto& t : r.tensors()) {
    n_params += static_cast<double>(t.n_elements());
    n_bytes += static_cast<double>(t.nbytes);
  }
  const double swa_mib = 2.0 * c.n_swa_layers() * c.n_swa * c.kv_dim() * kv_elt_bytes / (1 << 20);
  return fmt::format(
      "{} {} params, {:.2f} GiB, {:.2f} bpw, ctx {}, {} layers, {}x{} experts, "
      "KV {:.1f} KiB/token ({}-byte elements, {} full layers) + {:.1f} MiB/seq sliding window",
      c.arch, n_params >= 1e9 ? fmt::format("{:.2f}B", n_params / 1e9) : fmt::format("{:.2f}M", n_params / 1e6), n_bytes / (1024.0 * 1024 * 1024), n_params > 0 ? n_bytes * 8 / n_params : 0.0,
      c.n_ctx_train, c.n_layer, c.n_expert, c.n_expert_used,
      c.kv_bytes_per_token(kv_elt_bytes) / 1024.0, kv_elt_bytes, c.n_full_layers(), swa_mib);
}

}  // namespace brass::model
