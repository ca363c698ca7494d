// `brass synth`: writes a gpt-oss GGUF with random weights and the exact tensor names,
// shapes, types and metadata of the common MXFP4 release (ggml-org/gpt-oss-20b-GGUF:
// MXFP4 experts, Q8_0 attention/embeddings/output, F32 norms/biases/sinks/router), for
// benchmarks at full size and for tests at tiny size. Tensors are generated one at a
// time inside gguf::Writer's Fill callback (never the whole model in memory), in
// fixed-size chunks each with its own seed, so the bytes depend only on (seed, preset,
// types), not on the number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace brass::gguf {
class Writer;
}

namespace brass::tools {

// gpt-oss hyperparameters as they appear in GGUF metadata.
struct GptOssShape {
  std::string name;          // "gpt-oss-20b"
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff = 0;          // per expert
  int64_t n_swa = 0;         // sliding window of the even layers
  int64_t n_ctx_train = 0;   // context_length
  int64_t n_vocab = 0;
  float rope_theta = 0.0f;
  float yarn_factor = 0.0f;
  int64_t yarn_orig_ctx = 0;
  float rms_eps = 1e-5f;
};

GptOssShape preset_20b();
GptOssShape preset_120b();
GptOssShape preset_tiny();  // n_embd 64, 4 layers, 4/2 heads of 32, 8 experts (4 used), n_ff 64,
                            // n_swa 8, YaRN factor 32 over 256 (context 8192)
Result<GptOssShape> preset_by_name(std::string_view name);  // "20b" | "120b" | "tiny"

// One tensor of a gpt-oss GGUF: name, type, ggml shape, and how synth fills it.
struct TensorPlan {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> ne;
  float mean = 0.0f;  // synth: Gaussian(mean, std)
  float std = 0.0f;
};

struct TypePlan {
  DType dense = DType::Q8_0;    // attn q/k/v/o weights, token_embd, output
  DType experts = DType::MXFP4; // ffn_{gate,up,down}_exps weights
};

// The full tensor list in file order (token_embd, per-layer blocks, output_norm, output).
std::vector<TensorPlan> gpt_oss_tensor_plan(const GptOssShape& s, const TypePlan& types);
// general.file_type (llama_ftype) that llama.cpp would write for these types.
uint32_t llama_file_type(const TypePlan& types);

// Write general.architecture and every gpt-oss.* hyperparameter key with the types and
// order llama.cpp's converter uses (u32 integers, f32 floats), plus general.file_type
// and general.quantization_version. YaRN beta keys only when given (> 0), as newer
// converters write them from config.json and the common release predates them.
struct GptOssMetaExtras {
  std::string general_name;
  float yarn_beta_fast = 0.0f;
  float yarn_beta_slow = 0.0f;
};
void write_gpt_oss_hparams(gguf::Writer& w, const GptOssShape& s, uint32_t file_type,
                           const GptOssMetaExtras& extras);

struct SynthOptions {
  std::string preset = "tiny";
  std::string out_path;
  uint64_t seed = 0;
  std::string vocab_file;   // o200k_base.tiktoken; tokenizer metadata comes from it
  TypePlan types;
  int threads = 2;
  bool progress = true;     // print progress and GB/s to stderr
};

struct SynthStats {
  int64_t bytes = 0;        // file size
  int n_tensors = 0;
  double seconds = 0.0;
};

Result<SynthStats> synth(const SynthOptions& opts);

// Fill `dst` (row_bytes(type, ne[0]) * rows bytes) with random values of the plan's
// distribution. Deterministic in (seed, plan); uses up to `threads` threads.
void synth_fill(const TensorPlan& plan, uint64_t seed, int threads, uint8_t* dst, int64_t nbytes);

}  // namespace brass::tools
